// Package agent is the contract between a Harvest session and the agent that
// works in it: the builtin loop (agent/builtin), which runs in Harvest and
// acts in the box through its tools, and the agents that run a real CLI in
// the box — Claude Code (agent/claudecode), OpenCode (agent/opencode), any
// interactive CLI in a PTY (agent/terminal).
//
// The session layer owns the sandbox, the message queue and the events'
// envelopes; an agent turns one user message into work, emitting typed event
// payloads as it goes.
//
// Each kind of agent is a Kind: its name, its Capabilities, and how to open
// one from Deps. The registry (agent/agents) lists every kind and is the one
// place that builds an agent: it wires what every agent needs (the model,
// reached from the host or through a proxy bridged into the box; the egress
// proxy; instructions) once, for every kind, and the session layer and
// `harvest run` both call it. Nothing above it compares kind names: it asks
// the kind's Capabilities.
package agent

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/netguard"
	"github.com/harvest-dev/harvest/sandbox"
)

// Agent runs the turns of one conversation. Turns are sequential: Turn is
// never called while another is running.
type Agent interface {
	// Turn works on one user message until the agent is done, a limit is hit
	// or ctx is cancelled. It emits payloads in order (emit is never called
	// concurrently) and ends with exactly one of turn.finished,
	// turn.cancelled or turn.failed, which it also returns as the Outcome.
	Turn(ctx context.Context, prompt string, emit func(event.Payload)) Outcome
	// State is the conversation so far, to persist across suspension; the
	// agent's constructor takes it back.
	State() ([]byte, error)
	// Close releases what the agent holds in its sandbox (background
	// processes). The sandbox itself belongs to the caller.
	Close(ctx context.Context) error
}

// Outcome is how a turn ended: the payload of its last event.
type Outcome struct {
	Finished  *event.TurnFinished
	Cancelled *event.TurnCancelled
	Failed    *event.TurnFailed
}

// Payload returns the outcome's event payload.
func (o Outcome) Payload() event.Payload {
	switch {
	case o.Finished != nil:
		return *o.Finished
	case o.Cancelled != nil:
		return *o.Cancelled
	case o.Failed != nil:
		return *o.Failed
	}
	return nil
}

// Kind is a kind of agent, as the registry (agent/agents) lists it.
type Kind struct {
	// Name is what sessions and `harvest run --agent` call it.
	Name string
	// Summary says what it is, in a line.
	Summary string
	Caps    Capabilities
	// Open makes an agent of this kind in d.Box, continuing d.State. It
	// is called only by the registry, which has filled d as Caps ask.
	Open func(ctx context.Context, d Deps) (Agent, error)
}

// Capabilities are what a kind can do and needs. The session layer and the
// registry branch on these, never on a kind's name.
type Capabilities struct {
	// ModelInBox: the agent calls the model from inside the box (a CLI):
	// the registry serves a model proxy on a loopback port in the box and
	// gives Deps.Model its URL and a per-session token; the real key stays
	// on the host. Otherwise the agent calls the model from the host,
	// through Deps.Model.Client.
	ModelInBox bool
	// ProxyMeters: the agent reports no usage (an interactive CLI): its
	// turns' step.finished events are what the model proxy measured.
	ProxyMeters bool
	// StepCheckpoints: State is worth saving after every step.finished
	// (it holds the conversation up to the last finished step), so a
	// crash mid-turn keeps the finished steps. Otherwise State is saved
	// after each turn only.
	StepCheckpoints bool
	// ReportsStuck: the agent notices a STUCK.md it wrote and reports it
	// itself (event.Stuck, ending its turn). Otherwise the registry looks
	// for one when each turn ends.
	ReportsStuck bool
	// CLI is the npm binary the agent runs (under the CLI prefix, which
	// the box sees read-only at the same path); "" runs none.
	CLI string
	// TakesCommand: Deps.Terminal.Command, when given, runs instead of CLI
	// (which is then not needed), and the model API is the command's
	// business.
	TakesCommand bool
	// Backends the agent runs on; nil: any.
	Backends []string
	// APIs are the model wire APIs it speaks ("anthropic", "openai"); nil:
	// any.
	APIs []string
	// Limits are the harness limits it enforces itself (Limits' field
	// names: "MaxSteps", "MaxOutputTokens", "Timeout"); a CLI has its own
	// (a caller bounds its turns from outside).
	Limits []string
}

// Workspace is a repository in the box.
type Workspace struct {
	Name string
	Path string // inside the box
	// Branch, when set, is the session branch the agent commits and
	// pushes on (a GitHub repository's): its instructions say so.
	Branch string
}

// Deps is everything an agent is made from. The registry fills it.
type Deps struct {
	// Box is the session's sandbox, started by the caller with the
	// registry's Mounts. Required.
	Box *sandbox.Sandbox
	// Workspaces are the repositories in the box; the agent starts in the
	// first.
	Workspaces []Workspace
	// Model is how the agent reaches its model.
	Model Model
	// CommandEnv is added to the environment of every command the agent
	// runs (the egress proxy's HTTP(S)_PROXY, for one).
	CommandEnv []string
	// CLI is the box path of Caps.CLI ("" when it runs none).
	CLI string
	// Limits are the session's limits (zero: the agent's defaults).
	Limits Limits
	// Definition names the agent definition to load from the
	// repositories' .harvest/agents or AgentsDir ("" the default), for a
	// kind that has definitions (the builtin one).
	Definition string
	AgentsDir  string
	// Terminal, for a kind that TakesCommand, is the interactive CLI to run.
	Terminal *Terminal
	// Instructions are added to the agent's system prompt.
	Instructions string
	// Audit, when set, receives a JSON line per tool call.
	Audit io.Writer
	// SessionID names the session (logs, hooks, titles).
	SessionID string
	// State is what a previous agent's State returned (nil: a new
	// conversation).
	State []byte
	// MCP are the agent's MCP servers, validated (CheckMCP), as the kind
	// should use them: stdio ones as listed (run them in the box); for a
	// kind whose model is in the box (Caps.ModelInBox), a remote or host
	// one is the registry's bridge in the box (URL, and Headers holding the
	// session's token, never a real credential); for one whose loop runs
	// on the host, it is a Handler on the host that adds the credentials.
	MCP []MCPServer
	// MCPGuard checks and dials the remote MCP servers that are not the
	// operator's (MCPServer.Operator) when the kind reaches one itself;
	// nil is netguard's default policy.
	MCPGuard *netguard.Guard
	Logger   *slog.Logger
}

// Model is how an agent reaches its model.
type Model struct {
	// Name is Harvest's model name, "endpoint/model"; ID is the model's
	// own id (claude-sonnet-4-5); API is the endpoint's wire API.
	Name, ID, API string
	// Client calls the model from the host (when !Caps.ModelInBox).
	Client *llm.Client
	// Explicit: the caller chose Name; an agent definition's own model
	// does not override it. Otherwise OpenClient opens the definition's.
	Explicit   bool
	OpenClient func(name string) (*llm.Client, error)
	// URL and Token reach the model proxy from inside the box (when
	// Caps.ModelInBox): the token is the session's, never a real key.
	URL, Token string
}

// Limits bound an agent's turns (zero: its defaults).
type Limits struct {
	MaxSteps        int
	MaxOutputTokens int
	// Timeout bounds a turn.
	Timeout time.Duration
	// BudgetUSD caps a turn's model spending.
	BudgetUSD float64
}

// Terminal is an interactive CLI in a PTY and how it says a turn is over.
type Terminal struct {
	Command      []string
	DonePattern  *regexp.Regexp
	ReadyPattern *regexp.Regexp
	IdleTimeout  time.Duration
}
