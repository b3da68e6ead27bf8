// Package external opens the agents Harvest does not write itself — the
// Claude Code CLI (agent/claudecode), OpenCode (agent/opencode) and any
// CLI in a terminal (agent/terminal) — in a box, behind the same
// agent.Agent contract as the builtin loop, and bridges their model calls
// to the host.
//
// # The model bridge
//
// A box has no network. Open listens on 127.0.0.1 inside the box
// (sandbox.Sandbox.Listen: the in-box agent carries each connection to the
// host), serves the host's modelproxy.Proxy on that listener, and gives
// the CLI the listener's address as its API base URL and a per-session
// proxy token as its API key. The real key stays on the host, in the
// proxy; the token is revoked when the agent is closed.
//
//	CLI in box ──► 127.0.0.1:N (box listener) ══ agentd ══► host: Proxy ──► model API (+ real key)
//
// Open owns one goroutine per agent, the proxy's Serve on that listener
// (two with egress: Spec.Egress, an allowlisting HTTP(S) proxy for package
// registries, bridged the same way); Close stops them (closing the
// listeners) and waits for them.
//
// # Usage
//
// Claude Code and OpenCode report every model call's usage and cost
// themselves; the agents turn them into step.finished events. An
// interactive CLI in a terminal reports nothing, so for the terminal
// agent the usage the proxy measured during the turn is emitted as
// step.finished events just before the turn's last event, whose totals
// it fills in. (That includes the CLI's side calls, a session title for
// instance: they are spent too.) The proxy also enforces the session's budget for every
// kind: BudgetUSD is per turn, as for the builtin agent.
package external

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/claudecode"
	"github.com/harvest-dev/harvest/agent/opencode"
	"github.com/harvest-dev/harvest/agent/terminal"
	"github.com/harvest-dev/harvest/egress"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/providers"
	"github.com/harvest-dev/harvest/modelproxy"
	"github.com/harvest-dev/harvest/sandbox"
)

// The agent kinds besides the builtin one.
const (
	ClaudeCode = "claudecode"
	OpenCode   = "opencode"
	Terminal   = "terminal"
)

// Kinds lists the external agent kinds Open runs.
var Kinds = []string{ClaudeCode, OpenCode, Terminal}

// IsKind reports whether name is an external agent kind Open runs.
func IsKind(name string) bool { return slices.Contains(Kinds, name) }

// DefaultCLIPrefix is where scripts/setup installs the pinned CLIs (npm
// install --prefix).
const DefaultCLIPrefix = "/opt/harvest/npm"

// cliName is the binary each kind runs.
func cliName(kind string) string {
	switch kind {
	case OpenCode:
		return "opencode"
	default:
		return "claude"
	}
}

// CLIPath is the path of kind's CLI under prefix, on the host and, as
// Mounts shows prefix at the same path, in the box.
func CLIPath(prefix, kind string) string {
	return filepath.Join(prefix, "node_modules", ".bin", cliName(kind))
}

// CheckCLI reports, on the host, whether kind's CLI is installed under
// prefix, saying how to install it when it is not.
func CheckCLI(prefix, kind string) error {
	p := CLIPath(prefix, kind)
	fi, err := os.Stat(p)
	if err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return nil
	}
	if err == nil {
		err = errors.New("not an executable file")
	}
	return fmt.Errorf("the %s agent needs its CLI at %s (%v): run scripts/setup, or point Harvest at another npm prefix", kind, p, err)
}

// Backends are the sandbox backends the external agents run on. The CLIs
// npm installs are native executables linked against glibc (Claude Code and
// OpenCode ship compiled binaries, no Node.js needed), mounted read-only
// from the host: they run in a local box (the host's own /usr) and in the
// docker backend's Debian base image — an image without glibc cannot run
// them. The host backend is refused: there the CLI would see this
// machine's own files, its config and credentials among them.
var Backends = []string{"local", "docker"}

// CheckBackend says whether the external agents run on backend.
func CheckBackend(backend string) error {
	if slices.Contains(Backends, backend) {
		return nil
	}
	return fmt.Errorf("the external agents run in an isolated box, on the %s backend; not on %q", strings.Join(Backends, " or "), backend)
}

// checkLoader says, before anything starts, when the box cannot run the
// CLI at all: a dynamically linked executable whose program interpreter
// (read from its ELF header on the host, where the same file is) is missing
// in the box's image — an Alpine image for the glibc builds npm installs —
// would otherwise fail to start with a bare "no such file or directory".
func checkLoader(ctx context.Context, box *sandbox.Sandbox, cli, kind string) error {
	interp, err := elfInterpreter(cli)
	if err != nil || interp == "" {
		return nil // not ELF, or static: nothing to check here
	}
	if _, err := box.Stat(ctx, interp); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("the %s agent cannot run in this box: its CLI %s needs the program interpreter %s, which the box's image does not have (npm installs glibc builds: use a glibc image such as the Debian one scripts/setup builds, or the local backend)", kind, cli, interp)
		}
		return fmt.Errorf("the %s agent: checking the box for %s: %w", kind, interp, err)
	}
	return nil
}

// elfInterpreter is the PT_INTERP of the ELF file at path ("" for a static
// executable).
func elfInterpreter(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
		if err != nil {
			return "", err
		}
		return strings.TrimRight(string(b), "\x00"), nil
	}
	return "", nil
}

// Mounts is what a box for kind needs besides its workspaces: the CLIs'
// npm prefix, read-only at the same path.
func Mounts(prefix, kind string) []sandbox.Mount {
	return []sandbox.Mount{{HostPath: prefix, BoxPath: prefix}}
}

// NewProxy returns a model proxy for the endpoint of model (a Harvest model
// name, "endpoint/model") as models configures it: its real key is what
// the proxy adds, and API returns the endpoint's wire API.
func NewProxy(models providers.Config, model string, log *slog.Logger) (p *modelproxy.Proxy, api string, err error) {
	name, _, err := llm.ParseModel(model)
	if err != nil {
		return nil, "", err
	}
	e, ok := models.Endpoints[name]
	if !ok {
		return nil, "", fmt.Errorf("model %q: no endpoint %q is configured", model, name)
	}
	api = e.API
	if api == "" {
		api = name
	}
	up := &modelproxy.Upstream{BaseURL: e.BaseURL, APIKey: e.APIKey}
	cfg := modelproxy.Config{Prices: models.Prices, Logger: log}
	switch api {
	case "anthropic":
		cfg.Anthropic = up
	case "openai":
		cfg.OpenAI = up
	default:
		return nil, "", fmt.Errorf("model %q: endpoint %q speaks %q, which the model proxy does not", model, name, api)
	}
	p, err = modelproxy.New(cfg)
	return p, api, err
}

// CheckModel reports whether kind can use a model of an endpoint
// speaking api.
func CheckModel(kind, api string) error {
	if (kind == ClaudeCode || kind == Terminal) && api != "anthropic" {
		return fmt.Errorf("the %s agent speaks the Anthropic API: give an anthropic/... model", kind)
	}
	return nil
}

// Spec is an external agent to open in a box.
type Spec struct {
	Kind string
	// Box is started by the caller with Mounts(CLIPrefix, Kind).
	Box *sandbox.Sandbox
	// Workdir is the box path the CLI works in (the first workspace).
	Workdir   string
	CLIPrefix string
	// Model is the model id the CLI asks for, without Harvest's provider
	// prefix (claude-sonnet-4-5).
	Model string
	// API is the model endpoint's wire protocol, "anthropic" or "openai"
	// (OpenCode speaks either; Claude Code only the first).
	API string
	// Proxy carries the CLI's model calls to the real API.
	Proxy *modelproxy.Proxy
	// Egress, when set, lets the CLI (and the commands it runs) reach the
	// hosts it allows — package registries — through a second bridge:
	// HTTP(S)_PROXY and friends point at it. Nil: no way out of the box.
	Egress *egress.Proxy
	// EgressAllow, when not nil, narrows Egress's allowlist for this
	// session (egress.Proxy.GrantOnly); nil: all of it.
	EgressAllow []string
	// BudgetUSD caps each turn's model spending (0: no cap).
	BudgetUSD float64
	// Instructions are added to the CLI's system prompt.
	Instructions string
	// Command, for the terminal kind, is an interactive CLI to run instead
	// of Claude Code (with DonePattern or IdleTimeout saying when it is
	// done); empty runs Claude Code interactively. It finds the model in
	// its environment (modelEnv): HARVEST_MODEL_URL and _TOKEN, and
	// ANTHROPIC_* or OPENAI_* as the endpoint's API is.
	Command      []string
	DonePattern  *regexp.Regexp
	ReadyPattern *regexp.Regexp
	IdleTimeout  time.Duration
	SessionID    string
	// State is what the agent's State returned before (a suspension).
	State  []byte
	Logger *slog.Logger
}

// Open starts the bridge and the agent. The caller closes the agent;
// the box stays the caller's.
func Open(ctx context.Context, s Spec) (agent.Agent, error) {
	if !IsKind(s.Kind) {
		return nil, fmt.Errorf("agent kind %q: this Harvest runs %s", s.Kind, strings.Join(Kinds, ", "))
	}
	if s.Box == nil || s.Proxy == nil {
		return nil, errors.New("external agent: a box and a model proxy are required")
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if !(s.Kind == Terminal && len(s.Command) > 0) {
		if err := checkLoader(ctx, s.Box, CLIPath(s.CLIPrefix, s.Kind), s.Kind); err != nil {
			return nil, err
		}
	}
	ln, err := s.Box.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bridging the model endpoint into the box: %w", err)
	}
	b := &bridged{proxy: s.Proxy, session: s.SessionID, budget: s.BudgetUSD, ln: ln, served: make(chan struct{})}
	token, revoke := s.Proxy.Grant(modelproxy.Grant{Session: s.SessionID, OnUsage: b.onUsage})
	b.revoke = revoke
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.stopServe = cancel
	go func() {
		defer close(b.served)
		if err := s.Proxy.Serve(sctx, ln); err != nil && sctx.Err() == nil {
			s.Logger.Warn("serving the model proxy in the box stopped", "session", s.SessionID, "err", err)
		}
	}()
	url := "http://" + ln.Addr().String()
	var env []string
	if s.Egress != nil {
		if b.egress, env, err = BridgeEgress(ctx, s.Box, s.Egress, s.EgressAllow, s.SessionID, s.Logger); err != nil {
			b.stop()
			return nil, err
		}
	}
	var ag agent.Agent
	switch s.Kind {
	case ClaudeCode:
		ag, err = claudecode.New(ctx, claudecode.Config{
			Box: s.Box, Workdir: s.Workdir, CLI: CLIPath(s.CLIPrefix, s.Kind),
			ModelURL: url, ModelKey: token, Model: s.Model, Env: env,
			SessionID: s.SessionID, Logger: s.Logger, Instructions: s.Instructions,
		}, s.State)
	case OpenCode:
		ag, err = opencode.New(ctx, opencode.Config{
			Box: s.Box, Workdir: s.Workdir, CLI: CLIPath(s.CLIPrefix, s.Kind),
			ModelURL: url, ModelKey: token, Model: s.Model, API: s.API, Env: env,
			SessionID: s.SessionID, Logger: s.Logger, Instructions: s.Instructions,
		}, s.State)
	case Terminal:
		b.meter = true
		if len(s.Command) > 0 {
			env = append(env, modelEnv(s.API, url, token, s.Model)...)
		}
		ag, err = terminal.New(ctx, terminal.Config{
			Box: s.Box, Workdir: s.Workdir, CLI: CLIPath(s.CLIPrefix, s.Kind),
			ModelURL: url, ModelKey: token, Model: s.Model, Env: env,
			SessionID: s.SessionID, Logger: s.Logger, Instructions: s.Instructions,
			Command: s.Command, DonePattern: s.DonePattern, ReadyPattern: s.ReadyPattern, IdleTimeout: s.IdleTimeout,
		}, s.State)
	}
	if err != nil {
		b.stop()
		return nil, err
	}
	b.Agent = ag
	return b, nil
}

// modelEnv is how a generic terminal CLI finds the model: the bridged
// proxy's in-box URL and the session's token (never the real key) under
// Harvest's own names and the names the API's SDKs read.
func modelEnv(api, url, token, model string) []string {
	env := []string{"HARVEST_MODEL_URL=" + url, "HARVEST_MODEL_TOKEN=" + token, "HARVEST_MODEL=" + model, "HARVEST_MODEL_API=" + api}
	switch api {
	case "anthropic":
		env = append(env, "ANTHROPIC_BASE_URL="+url, "ANTHROPIC_API_KEY="+token)
	case "openai":
		env = append(env, "OPENAI_BASE_URL="+url+"/v1", "OPENAI_API_KEY="+token)
	}
	return env
}

// bridged is an agent with its model bridge.
type bridged struct {
	agent.Agent
	proxy   *modelproxy.Proxy
	session string
	budget  float64

	ln        *sandbox.Listener
	revoke    func()
	stopServe context.CancelFunc
	served    chan struct{}
	egress    *EgressBridge // nil without egress
	closeOnce sync.Once
	closeErr  error

	// meter: the CLI reports no usage (a terminal), so the turn's usage is
	// what the proxy measured.
	meter bool
	mu    sync.Mutex
	usage []modelproxy.Usage // during a turn (OnUsage runs on the proxy's request goroutines)
}

func (b *bridged) onUsage(u modelproxy.Usage) {
	b.mu.Lock()
	b.usage = append(b.usage, u)
	b.mu.Unlock()
}

// Turn sets the turn's budget on the proxy (what the session spent so far
// plus BudgetUSD) and runs the agent's turn.
func (b *bridged) Turn(ctx context.Context, prompt string, emit func(event.Payload)) agent.Outcome {
	b.mu.Lock()
	b.usage = nil
	b.mu.Unlock()
	if b.budget > 0 {
		b.proxy.SetBudget(b.session, b.proxy.Spent(b.session)+b.budget)
	}
	if !b.meter {
		return b.Agent.Turn(ctx, prompt, emit)
	}
	var total event.Usage
	var cost float64
	var n int
	withUsage := func(p event.Payload) event.Payload {
		switch p := p.(type) {
		case event.TurnFinished:
			total, cost, n = b.steps(emit)
			p.Usage, p.CostUSD, p.Steps = total, cost, n
			return p
		case event.TurnFailed:
			total, cost, _ = b.steps(emit)
			p.Usage, p.Cost = total, cost
			return p
		case event.TurnCancelled:
			total, cost, _ = b.steps(emit)
		}
		return p
	}
	out := b.Agent.Turn(ctx, prompt, func(p event.Payload) { emit(withUsage(p)) })
	switch {
	case out.Finished != nil:
		out.Finished.Usage, out.Finished.CostUSD, out.Finished.Steps = total, cost, n
	case out.Failed != nil:
		out.Failed.Usage, out.Failed.Cost = total, cost
	}
	return out
}

// steps emits the model calls the proxy metered during the turn as
// step.finished events, and returns their sum and number. The proxy records a call's
// usage before the CLI sees its response end, so every call of the turn
// is there by the time the CLI says it is done.
func (b *bridged) steps(emit func(event.Payload)) (event.Usage, float64, int) {
	b.mu.Lock()
	us := b.usage
	b.usage = nil
	b.mu.Unlock()
	var total event.Usage
	var cost float64
	for i, u := range us {
		eu := event.Usage{InputTokens: int64(u.Tokens.InputTokens), OutputTokens: int64(u.Tokens.OutputTokens),
			CacheReadTokens: int64(u.Tokens.CacheReadTokens), CacheWriteTokens: int64(u.Tokens.CacheWriteTokens)}
		emit(event.StepFinished{Step: i + 1, Model: u.Model, Usage: eu, CostUSD: u.CostUSD, DurationMS: u.Duration.Milliseconds()})
		total = total.Add(eu)
		cost += u.CostUSD
	}
	return total, cost, len(us)
}

// Close closes the agent, then the bridge.
func (b *bridged) Close(ctx context.Context) error {
	b.closeOnce.Do(func() {
		b.closeErr = b.Agent.Close(ctx)
		b.stop()
	})
	return b.closeErr
}

func (b *bridged) stop() {
	b.revoke()
	b.stopServe()
	b.ln.Close()
	<-b.served
	if b.egress != nil {
		b.egress.Close()
	}
}

// EgressBridge is the egress proxy served on a loopback listener in a box.
type EgressBridge struct {
	ln        *sandbox.Listener
	revoke    func()
	cancel    context.CancelFunc
	served    chan struct{}
	closeOnce sync.Once
}

// BridgeEgress serves ep on a loopback port in box for session, and returns
// the environment that points commands at it: HTTP(S)_PROXY and friends,
// with a proxy token of the session's that is worth nothing outside that
// listener. allow, when not nil, narrows ep's allowlist for the session.
// Any agent's commands use it the same way (the external agents' CLIs, the
// builtin agent's bash). Close stops it.
func BridgeEgress(ctx context.Context, box *sandbox.Sandbox, ep *egress.Proxy, allow []string, session string, log *slog.Logger) (*EgressBridge, []string, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var token string
	var revoke func()
	if allow == nil {
		token, revoke = ep.Grant(session, nil)
	} else {
		var err error
		if token, revoke, err = ep.GrantOnly(session, allow, nil); err != nil {
			return nil, nil, err
		}
	}
	ln, err := box.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		revoke()
		return nil, nil, fmt.Errorf("bridging the egress proxy into the box: %w", err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e := &EgressBridge{ln: ln, revoke: revoke, cancel: cancel, served: make(chan struct{})}
	go func() {
		defer close(e.served)
		if err := ep.Serve(sctx, ln); err != nil && sctx.Err() == nil {
			log.Warn("serving the egress proxy in the box stopped", "session", session, "err", err)
		}
	}()
	return e, egress.Env("http://harvest:" + token + "@" + ln.Addr().String()), nil
}

// WithEgress returns ag closing bridge after itself: for an agent (the
// builtin one) whose commands were given BridgeEgress's environment.
func WithEgress(ag agent.Agent, bridge *EgressBridge) agent.Agent {
	return withEgress{ag, bridge}
}

type withEgress struct {
	agent.Agent
	bridge *EgressBridge
}

func (w withEgress) Close(ctx context.Context) error {
	err := w.Agent.Close(ctx)
	w.bridge.Close()
	return err
}

// Close revokes the token, stops serving and closes the listener; it
// returns once the serving goroutine is done. Idempotent.
func (e *EgressBridge) Close() {
	e.closeOnce.Do(func() {
		e.revoke()
		e.cancel()
		e.ln.Close()
		<-e.served
	})
}
