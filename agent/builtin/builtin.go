package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/tools"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/netguard"
	"github.com/harvest-dev/harvest/sandbox"
)

// Defaults of the harness when the agent definition does not set them.
const (
	DefaultMaxSteps        = 200
	DefaultTimeout         = time.Hour
	DefaultMaxOutputTokens = 16384
	// maxTruncations is how many replies in a row may hit max_output_tokens
	// before the turn fails with kind max_tokens.
	maxTruncations = 3
)

// Config is what an Agent needs.
type Config struct {
	// Client calls the model. Required.
	Client *llm.Client
	// Box is the session's sandbox; the tools act only in it. Required.
	Box *sandbox.Sandbox
	// Definition is the agent definition; nil is the built-in default.
	Definition *Definition
	// Workspaces are the repositories in the box; nil means every workspace
	// of the box's spec.
	Workspaces []Workspace
	// SessionID is given to hooks.
	SessionID string
	// CommandEnv is added to the environment of the commands the agent's
	// bash tool runs (the egress proxy's HTTP(S)_PROXY, for one).
	CommandEnv []string
	// Instructions are the agent's instructions (agent.ComposeInstructions,
	// from the registry); empty: composed here. The definition's own come
	// after them.
	Instructions string
	// Hooks are Go hooks, run before the definition's command hooks.
	Hooks []HookRegistration
	// Registry is the tool set the definition selects from; nil is
	// tools.Default().
	Registry *tools.Registry
	// Limits caps the tools' output; zero fields take tools' defaults.
	Limits tools.Limits
	// MCP are the agent's MCP servers (see mcp.go): their tools are
	// offered next to the registry's.
	MCP []agent.MCPServer
	// MCPGuard checks and dials the remote MCP servers that are not the
	// operator's (agent.MCPServer.Operator); nil is netguard's default.
	MCPGuard *netguard.Guard
	// Logger receives internal errors; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Agent is Harvest's builtin agent: one conversation in one sandbox. See the
// package doc for the loop. Turns are sequential; State may be called
// concurrently with a turn.
type Agent struct {
	client    *llm.Client
	box       *sandbox.Sandbox
	def       *Definition
	ws        []Workspace
	reg       *tools.Registry
	env       *tools.Env
	mcp       *mcpServers
	llmTools  []llm.Tool
	hooks     []hookEntry
	system    string
	compactor *compactor
	window    int
	session   string
	log       *slog.Logger
	now       func() time.Time

	mu    sync.Mutex // guards st and last
	st    state
	last  TurnStats
	turnN int // turns run by this Agent
}

// TurnStats says where a turn's time went.
type TurnStats struct {
	Steps int
	// Total is the turn's wall time.
	Total time.Duration
	// Model is the time spent in model calls (streams, compaction summaries).
	Model time.Duration
	// Tools is the time tools ran (in the box), parallel calls counted once.
	Tools time.Duration
	// Hooks is the time hooks ran.
	Hooks time.Duration
}

// Overhead is the loop's own time: everything but the model, the tools and
// the hooks.
func (s TurnStats) Overhead() time.Duration { return s.Total - s.Model - s.Tools - s.Hooks }

// LastTurn returns the timing of the last finished turn.
func (a *Agent) LastTurn() TurnStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// state is the persisted conversation (State and New).
type state struct {
	Version  int           `json:"version"`
	Messages []llm.Message `json:"messages"`
	// Task is the session's first prompt, kept verbatim through compaction.
	Task string `json:"task,omitempty"`
	// LastUsage is the usage of the last model call: the measured context size.
	LastUsage *llm.Usage `json:"last_usage,omitempty"`
	// Todos is the agent's todo list.
	Todos []tools.TodoItem `json:"todos,omitempty"`
}

const stateVersion = 1

var _ agent.Agent = (*Agent)(nil)

// New returns an agent working in cfg.Box, continuing the conversation in
// saved (from State) when it is not empty.
func New(ctx context.Context, cfg Config, saved []byte) (*Agent, error) {
	if cfg.Client == nil {
		return nil, errors.New("builtin agent: no model client")
	}
	if cfg.Box == nil {
		return nil, errors.New("builtin agent: no sandbox")
	}
	def := cfg.Definition
	if def == nil {
		def = &Definition{Name: "default", Source: "built in"}
	}
	if err := def.validate(); err != nil {
		return nil, fmt.Errorf("agent definition %s: %w", def.Source, err)
	}
	ws := cfg.Workspaces
	if ws == nil {
		for _, w := range cfg.Box.Handle().Spec.Workspaces {
			ws = append(ws, Workspace{Name: w.Name, Path: cfg.Box.WorkspacePath(w.Name)})
		}
	}
	reg := cfg.Registry
	if reg == nil {
		reg = tools.Default()
	}
	own, mcpNames := splitMCPNames(def.Tools)
	if len(def.Tools) > 0 {
		var err error
		if reg, err = reg.Select(own...); err != nil {
			return nil, fmt.Errorf("agent definition %s: tools: %w", def.Source, err)
		}
	}
	policy, err := policyOf(def)
	if err != nil {
		return nil, fmt.Errorf("agent definition %s: %w", def.Source, err)
	}
	root := sandbox.WorkspaceRoot
	if cfg.Box.Unsafe() && len(ws) > 0 {
		// The host backend has no /workspace: the workspaces are host
		// directories wherever they are, and the tools are confined to them.
		root = ws[0].Path
		for _, w := range ws[1:] {
			policy.AllowPaths = append(policy.AllowPaths, w.Path)
		}
	}
	workdir := ""
	if len(ws) > 0 {
		workdir = ws[0].Path
	}
	env, err := tools.NewEnv(cfg.Box, tools.Config{
		Root: root, Workdir: workdir, Policy: policy, Limits: cfg.Limits, Logger: cfg.Logger,
		CommandEnv: cfg.CommandEnv,
	})
	if err != nil {
		return nil, err
	}
	a := &Agent{
		client: cfg.Client, box: cfg.Box, def: def, ws: ws, env: env,
		session: cfg.SessionID, log: cfg.Logger, now: cfg.Now,
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.mcp, err = connectMCP(ctx, cfg.Box, withDefinitionMCP(cfg.MCP, def, a.log), cfg.MCPGuard, workdir, cfg.CommandEnv, a.log); err != nil {
		env.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("builtin agent: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			a.Close(context.WithoutCancel(ctx))
		}
	}()
	if a.reg, err = withMCPTools(reg, a.mcp.tools, def.Tools, mcpNames); err != nil {
		return nil, fmt.Errorf("agent definition %s: tools: %w", def.Source, err)
	}
	reg = a.reg
	if a.now == nil {
		a.now = time.Now
	}
	for _, t := range reg.Tools() {
		a.llmTools = append(a.llmTools, llm.Tool{Name: t.Name(), Description: t.Description(), InputSchema: t.Schema()})
	}
	regs := append(append([]HookRegistration(nil), cfg.Hooks...), definitionHooks(def, cfg.Box, workdir)...)
	if a.hooks, err = compileHooks(regs); err != nil {
		return nil, err
	}
	a.window = def.Harness.ContextWindow
	if a.window <= 0 {
		a.window = contextWindowOf(cfg.Client.Model)
	}
	a.compactor = newCompactor(a.window, def.Harness.Compaction)
	if a.system, err = buildSystemPrompt(ctx, cfg.Box, cfg.Instructions, def, ws); err != nil {
		return nil, err
	}
	a.st.Version = stateVersion
	if len(saved) > 0 {
		var st state
		if err := json.Unmarshal(saved, &st); err != nil {
			return nil, fmt.Errorf("builtin agent: the saved conversation is not readable: %w", err)
		}
		if st.Version != stateVersion {
			return nil, fmt.Errorf("builtin agent: the saved conversation has version %d; this Harvest reads version %d", st.Version, stateVersion)
		}
		a.st = st
		if len(st.Todos) > 0 {
			if err := env.SetTodos(st.Todos); err != nil {
				return nil, fmt.Errorf("builtin agent: the saved todo list: %w", err)
			}
		}
	}
	ok = true
	return a, nil
}

// policyOf turns a definition's permissions into the tools' policy.
func policyOf(def *Definition) (tools.Policy, error) {
	p := tools.DefaultPolicy()
	if def.Permissions.Mode == "plan" {
		p.Mode = tools.ModePlan
	}
	p.AllowExternal = def.Permissions.ExternalDirectory == "allow"
	p.AllowPaths = def.Permissions.AllowPaths
	for _, r := range def.Permissions.Bash {
		p.Bash = append(p.Bash, tools.BashRule{
			Pattern: r.Pattern, Action: tools.Action(r.Action),
			Source: fmt.Sprintf("%s line %d", def.Source, r.Line),
		})
	}
	return p, p.Validate()
}

// Definition is the agent definition in use.
func (a *Agent) Definition() *Definition { return a.def }

// SystemPrompt is the system prompt the model gets.
func (a *Agent) SystemPrompt() string { return a.system }

// Model is the model's name (provider/model).
func (a *Agent) Model() string { return a.client.String() }

// Messages returns a copy of the conversation.
func (a *Agent) Messages() []llm.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]llm.Message(nil), a.st.Messages...)
}

// State implements agent.Agent.
func (a *Agent) State() ([]byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.st
	st.Todos = a.env.Todos()
	return json.Marshal(st)
}

// Close implements agent.Agent: it kills the background processes the bash
// tool started and closes the MCP servers.
func (a *Agent) Close(ctx context.Context) error {
	err := a.env.Close(ctx)
	if a.mcp != nil {
		err = errors.Join(err, a.mcp.close(ctx))
	}
	return err
}

func (a *Agent) commit(msgs []llm.Message, usage *llm.Usage) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.Messages = msgs
	if usage != nil {
		a.st.LastUsage = usage
	}
}
