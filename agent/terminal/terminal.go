package terminal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/sandbox"
)

// Stop reasons of turn.finished: what told the agent the turn was done.
const (
	StopHook        = "stop_hook"    // Claude Code's Stop hook ran for this prompt
	StopDonePattern = "done_pattern" // Config.DonePattern matched the output
	StopIdle        = "idle_timeout" // no output for Config.IdleTimeout: assumed done
	StopPrompt      = "prompt"       // Claude Code: idle at its prompt again without a Stop hook (a slash command)
)

// Defaults.
const (
	DefaultRows         = 40
	DefaultCols         = 120
	DefaultIdleTimeout  = 30 * time.Minute
	DefaultStartTimeout = 90 * time.Second
	DefaultCancelGrace  = 10 * time.Second
)

// Keys.
var (
	KeyEsc   = []byte{0x1b}
	KeyCtrlC = []byte{0x03}
	KeyEnter = []byte{'\r'}
)

// Config configures the agent. The fields up to Logger are shared with the
// other external agents (agent/claudecode, agent/opencode).
type Config struct {
	Box       *sandbox.Sandbox // started by the caller; the CLI runs in it
	Workdir   string           // box path the CLI works in (e.g. /workspace/repo)
	CLI       string           // box path of Claude Code (used when Command is empty)
	ModelURL  string           // Claude Code: in-box base URL of the model endpoint
	ModelKey  string           // Claude Code: the API key it sends (a per-session proxy token)
	Model     string           // Claude Code: --model (no provider prefix)
	Env       []string         // extra environment for the CLI
	SessionID string
	Logger    *slog.Logger

	// Command is a generic interactive CLI and its arguments (looked up in
	// the box's PATH). Empty: Claude Code in interactive mode (CLI), with
	// its hooks as the completion signal.
	Command []string
	// Rows and Cols are the terminal's size (default 40x120).
	Rows, Cols uint16
	// DonePattern, for a generic CLI, matches the end of the text it
	// printed since the prompt was typed (escape sequences removed, lines
	// joined by "\n") when it is ready for the next input: typically its
	// prompt, e.g. `(?m)^>>> $`. The turn ends once it matches and the
	// output stays quiet for a moment.
	DonePattern *regexp.Regexp
	// ReadyPattern matches the CLI's output once it is ready for its first
	// input. Default: DonePattern; without either, the CLI is ready once
	// its output has been quiet for a moment.
	ReadyPattern *regexp.Regexp
	// IdleTimeout is the fallback: no output for this long after the input
	// ends the turn as finished with stop reason idle_timeout (default 30
	// minutes, the seeds' "no completion signal" timeout). Set it short for
	// a generic CLI without DonePattern.
	IdleTimeout time.Duration
	// StartTimeout bounds the wait for a (re)started CLI to be ready
	// (default 90 s).
	StartTimeout time.Duration
	// CancelKeys are typed when the turn is cancelled. Default: Esc for
	// Claude Code (it interrupts the response and keeps the session;
	// Ctrl-C twice would exit), Ctrl-C for a generic CLI.
	CancelKeys []byte
	// CancelGrace is how long the CLI gets to settle after CancelKeys
	// before it is sent SIGINT, then killed (and restarted next turn).
	// Default 10 s.
	CancelGrace time.Duration
	// SubmitKeys end a generic CLI's input (default Enter, "\r"). Claude
	// Code always gets its prompt as a bracketed paste, then Enter.
	SubmitKeys []byte
	// Paste wraps a generic CLI's input in bracketed-paste markers (for
	// CLIs that enable bracketed paste and should take a multi-line prompt
	// as one input).
	Paste bool

	// Claude Code only.

	// MCP are the agent's MCP servers (agent.Deps.MCP), given to Claude
	// Code as its --mcp-config (and only those: --strict-mcp-config).
	MCP []agent.MCPServer

	// Instructions are appended to Claude Code's system prompt
	// (--append-system-prompt).
	Instructions string
	// ConfigDir is CLAUDE_CONFIG_DIR in the box (default $HOME/.claude, with
	// the box's HOME).
	ConfigDir string
	// Settings is extra settings.json content (a JSON object), for example
	// Harvest's own hooks; the agent adds its hooks to them.
	Settings json.RawMessage
}

// Agent runs one interactive CLI in a PTY of the box, for the turns of one
// conversation. See the package doc.
type Agent struct {
	cfg    Config
	sb     *sandbox.Sandbox
	logger *slog.Logger
	out    *output
	claude *claude // nil for a generic CLI

	closing context.Context // cancelled by Close: a running turn cancels
	cancel  context.CancelCauseFunc

	turnMu sync.Mutex // held by Turn and Close
	closed bool

	mu         sync.Mutex // guards the fields below (Resize reads them during a turn)
	cli        *cli       // the running CLI; nil until the first turn, or after it ended
	rows, cols uint16
}

var _ agent.Agent = (*Agent)(nil)

// New prepares the agent. For Claude Code it writes the CLI's
// configuration into the box and follows its hook log; state (from State)
// makes the first start resume that conversation. The CLI itself starts
// with the first turn.
func New(ctx context.Context, cfg Config, state []byte) (*Agent, error) {
	if cfg.Box == nil {
		return nil, errors.New("terminal agent: Config.Box is nil: start a sandbox first")
	}
	if cfg.Workdir == "" {
		cfg.Workdir = cfg.Box.Workdir()
	}
	if cfg.Rows == 0 {
		cfg.Rows = DefaultRows
	}
	if cfg.Cols == 0 {
		cfg.Cols = DefaultCols
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.CancelGrace <= 0 {
		cfg.CancelGrace = DefaultCancelGrace
	}
	if len(cfg.SubmitKeys) == 0 {
		cfg.SubmitKeys = KeyEnter
	}
	if cfg.ReadyPattern == nil {
		cfg.ReadyPattern = cfg.DonePattern
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &Agent{cfg: cfg, sb: cfg.Box, out: newOutput(cfg.Rows, cfg.Cols), rows: cfg.Rows, cols: cfg.Cols}
	a.closing, a.cancel = context.WithCancelCause(context.Background())

	if len(cfg.Command) > 0 {
		if len(cfg.CancelKeys) == 0 {
			a.cfg.CancelKeys = KeyCtrlC
		}
		a.logger = logger.With("agent", "terminal", "cli", cfg.Command[0], "session", cfg.SessionID)
		return a, nil
	}

	// Claude Code.
	switch {
	case cfg.CLI == "":
		return nil, errors.New("terminal agent: neither Command (a generic CLI) nor CLI (Claude Code's path in the box) is set")
	case cfg.ModelURL == "" || cfg.ModelKey == "":
		return nil, errors.New("terminal agent: Claude Code needs ModelURL and ModelKey (the model endpoint in the box and its per-session token)")
	}
	if len(cfg.CancelKeys) == 0 {
		a.cfg.CancelKeys = KeyEsc
	}
	a.logger = logger.With("agent", "terminal", "cli", "claude", "session", cfg.SessionID)
	st, err := parseClaudeState(state)
	if err != nil {
		return nil, err
	}
	dir := cfg.ConfigDir
	if dir == "" {
		dir = boxHome(cfg) + "/.claude"
	}
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	c := &claude{configDir: dir, hookDir: dir + "/harvest-hooks", nonce: hex.EncodeToString(nonce)}
	c.w = newWatcher(cfg.Box, c.hookDir, c.nonce, a.logger)
	a.endLeftovers(ctx, c)
	if err := c.prepare(ctx, cfg.Box, &a.cfg, st); err != nil {
		return nil, err
	}
	if err := c.w.start(ctx); err != nil {
		return nil, err
	}
	a.claude = c
	return a, nil
}

// boxHome is HOME for the CLI: from Env, else the box's.
func boxHome(cfg Config) string {
	home := ""
	for _, e := range cfg.Env {
		if len(e) > 5 && e[:5] == "HOME=" {
			home = e[5:]
		}
	}
	if home == "" {
		home = cfg.Box.Handle().Spec.Env["HOME"]
	}
	if home == "" {
		home = "/home/user"
	}
	return home
}

// State implements agent.Agent. For Claude Code it is the conversation's
// session id and transcript (read from the box), so that New in another
// box resumes it with --resume. A generic CLI has no state: a new box
// starts it afresh.
func (a *Agent) State() ([]byte, error) {
	if a.claude == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return a.claude.state(ctx, a.sb, a.cfg.Workdir)
}

// SessionID is Claude Code's own session id ("" before it reported one, or
// for a generic CLI).
func (a *Agent) SessionID() string {
	if a.claude == nil {
		return ""
	}
	id, _ := a.claude.session()
	return id
}

// Resize changes the terminal's size (a web terminal's). It applies to the
// running CLI and to later starts.
func (a *Agent) Resize(ctx context.Context, rows, cols uint16) error {
	if rows == 0 || cols == 0 {
		return fmt.Errorf("terminal size %dx%d: rows and columns must be positive", rows, cols)
	}
	a.mu.Lock()
	a.rows, a.cols = rows, cols
	c := a.cli
	a.mu.Unlock()
	a.out.resize(rows, cols)
	if c != nil && !c.exited() {
		return c.p.Resize(ctx, rows, cols)
	}
	return nil
}

// Close implements agent.Agent: a running turn is cancelled, then the CLI
// is ended (SIGINT for Claude Code, which saves its session and exits;
// SIGHUP and SIGTERM for any other CLI; SIGKILL of its tree after 5 s) and
// the hook log's tail is stopped. Idempotent.
func (a *Agent) Close(ctx context.Context) error {
	a.cancel(errors.New("the agent is closing"))
	a.turnMu.Lock()
	defer a.turnMu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	var err error
	if c := a.setCLI(nil); c != nil {
		// Claude Code saves its session and exits on SIGINT. Any other CLI
		// gets what closing its terminal window sends, SIGHUP (which ends
		// an interactive shell; the box's agent starts commands with
		// SIGHUP ignored, so it ends little else), and SIGTERM (which an
		// interactive shell ignores).
		sigs := []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM}
		if a.claude != nil {
			sigs = []syscall.Signal{syscall.SIGINT}
		}
		err = c.terminate(ctx, 5*time.Second, sigs...)
	}
	if a.claude != nil {
		a.claude.w.stop(ctx)
	}
	return err
}

// setCLI replaces the running CLI, returning the previous one.
func (a *Agent) setCLI(c *cli) *cli {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.cli
	a.cli = c
	return old
}

func (a *Agent) size() (rows, cols uint16) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rows, a.cols
}

// endLeftovers ends a Claude Code and a hook-log tail that an earlier agent
// left running in this box (Harvest restarted and recovered the box): two
// CLIs on one conversation would race, and the tail would leak. The CLI
// gets SIGINT first, so it saves its session.
func (a *Agent) endLeftovers(ctx context.Context, c *claude) {
	procs, err := a.sb.Ps(ctx)
	if err != nil {
		a.logger.Warn("listing the box's processes", "err", err)
		return
	}
	for _, p := range procs {
		if p.Exit != nil || len(p.Args) == 0 {
			continue
		}
		isCLI := p.Args[0] == a.cfg.CLI
		isTail := p.Args[0] == "tail" && p.Args[len(p.Args)-1] == c.hookDir+"/log"
		if !isCLI && !isTail {
			continue
		}
		proc, err := a.sb.Attach(ctx, p.Proc, nil, nil)
		if err != nil {
			a.logger.Warn("attaching to a leftover process", "pid", p.PID, "err", err)
			continue
		}
		a.logger.Info("ending a process an earlier agent left in the box", "pid", p.PID, "args", p.Args)
		left := &cli{p: proc, stdin: nil}
		sig := syscall.SIGINT
		if isTail {
			sig = syscall.SIGKILL
		}
		if err := left.terminate(ctx, 5*time.Second, sig); err != nil {
			a.logger.Warn("ending a leftover process", "pid", p.PID, "err", err)
		}
	}
}
