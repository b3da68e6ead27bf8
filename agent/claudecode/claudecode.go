package claudecode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/sandbox"
)

// Defaults of Config's timeouts and limits.
const (
	// DefaultNoOutputTimeout is longer than the Bash tool's own maximum
	// timeout (10 minutes in 2.1.197), during which the CLI prints nothing.
	DefaultNoOutputTimeout = 15 * time.Minute
	DefaultResultTimeout   = 30 * time.Second
	DefaultInterruptGrace  = 5 * time.Second
	DefaultMaxStateBytes   = 64 << 20
)

// Config is what an Agent needs.
type Config struct {
	// Box is the session's sandbox, started by the caller. Required.
	Box *sandbox.Sandbox
	// Workdir is the box path the CLI works in (e.g. /workspace/repo);
	// default: the box's workdir. The conversation is filed under it, so a
	// resumed session must use the same one.
	Workdir string
	// CLI is the box path of the claude binary (the caller mounts
	// /opt/harvest/npm read-only at the same path). Required.
	CLI string
	// ModelURL is the in-box base URL of the model endpoint
	// (ANTHROPIC_BASE_URL), e.g. http://127.0.0.1:41234. Required.
	ModelURL string
	// ModelKey is what the CLI sends as its API key (ANTHROPIC_API_KEY): a
	// per-session proxy token, never a real key. Required.
	ModelKey string
	// Model is the model id (--model), e.g. claude-sonnet-4-5; empty is the
	// CLI's default. Side models (haiku, subagents) are pinned to it too.
	Model string
	// Env is extra environment for the CLI; it overrides what the agent sets.
	Env []string
	// SessionID is Harvest's session id (for logs).
	SessionID string
	// Logger receives what the CLI does that is not an event; nil discards.
	Logger *slog.Logger

	// Home is HOME for the CLI; default: the box's HOME. It must be writable
	// by the box user.
	Home string
	// ConfigDir is CLAUDE_CONFIG_DIR; default Home/.claude. Keep it out of
	// the workspaces: it holds the transcript.
	ConfigDir string
	// Instructions are appended to Claude Code's system prompt
	// (--append-system-prompt).
	Instructions string
	// Settings is a JSON object written as the CLI's user settings
	// (ConfigDir/settings.json): hooks, env, permissions.
	Settings json.RawMessage
	// MCP are the agent's MCP servers (agent.Deps.MCP: stdio ones, and
	// the registry's bridge for remote ones), written into ConfigDir as
	// its --mcp-config; with --strict-mcp-config, they are the only ones
	// it uses (a repository's .mcp.json is among them already).
	MCP []agent.MCPServer

	// NoOutputTimeout: a turn whose CLI prints nothing for this long fails
	// (event.FailCLIHung) and the CLI is killed. Default DefaultNoOutputTimeout.
	NoOutputTimeout time.Duration
	// ResultTimeout: after its result, the CLI must answer a control
	// request within this, else the turn fails (event.FailCLIHung). Default
	// DefaultResultTimeout.
	ResultTimeout time.Duration
	// InterruptGrace is how long a cancelled turn waits for the CLI after
	// its interrupt request, and again after SIGINT, before killing it.
	// Default DefaultInterruptGrace.
	InterruptGrace time.Duration
	// Prices estimate each step's cost from its usage (Claude Code
	// reports cost per turn; the turn's last step gets the rest of it);
	// nil is llm.DefaultPrices.
	Prices *llm.PriceTable
	// MaxStateBytes bounds the session files kept for State (uncompressed);
	// default DefaultMaxStateBytes.
	MaxStateBytes int64
}

// Agent runs Claude Code in a box: one long-lived process, restarted with
// --resume when it had to be killed. See the package doc. Turns are
// sequential; State and Close may be called concurrently with a turn.
type Agent struct {
	cfg     Config
	box     *sandbox.Sandbox
	log     *slog.Logger
	session string // Claude Code's session id
	// mcpConfig is the box path of its --mcp-config ("" none).
	mcpConfig string

	mu      sync.Mutex // guards everything below
	project string     // box path of the session's project directory
	proc    *proc      // the running CLI, or nil
	saved   *files
	saveErr error
	// unsaved: a turn ended since the files were last copied out; State
	// copies them (waiting for untilUUID), not the turn, so the answer is
	// not held back by Claude Code's transcript flush.
	unsaved   bool
	untilUUID string
	closed    bool
	seq       int // control request ids
}

var _ agent.Agent = (*Agent)(nil)

// New prepares Claude Code in cfg.Box, continuing the conversation in state
// (from State) when it is not empty: the transcript is written back into
// the box and the first turn starts the CLI with --resume. The CLI itself
// starts with the first turn.
func New(ctx context.Context, cfg Config, state []byte) (*Agent, error) {
	if cfg.Box == nil {
		return nil, errors.New("claudecode agent: no sandbox")
	}
	if cfg.CLI == "" {
		return nil, errors.New("claudecode agent: no CLI path: give the box path of claude (mount the npm prefix read-only into the box)")
	}
	if cfg.ModelURL == "" || cfg.ModelKey == "" {
		return nil, errors.New("claudecode agent: the model URL and key are required (the in-box address of the model proxy and the session's token)")
	}
	if len(cfg.Settings) > 0 {
		var obj map[string]any
		if err := json.Unmarshal(cfg.Settings, &obj); err != nil {
			return nil, fmt.Errorf("claudecode agent: settings must be a JSON object: %w", err)
		}
	}
	if cfg.Workdir == "" {
		cfg.Workdir = cfg.Box.Workdir()
	}
	if cfg.Home == "" {
		cfg.Home = cfg.Box.Handle().Spec.Env["HOME"]
	}
	if cfg.Home == "" {
		cfg.Home = "/home/user"
	}
	if cfg.ConfigDir == "" {
		cfg.ConfigDir = path.Join(cfg.Home, ".claude")
	}
	if cfg.NoOutputTimeout <= 0 {
		cfg.NoOutputTimeout = DefaultNoOutputTimeout
	}
	if cfg.ResultTimeout <= 0 {
		cfg.ResultTimeout = DefaultResultTimeout
	}
	if cfg.InterruptGrace <= 0 {
		cfg.InterruptGrace = DefaultInterruptGrace
	}
	if cfg.Prices == nil {
		cfg.Prices = llm.DefaultPrices
	}
	if cfg.MaxStateBytes <= 0 {
		cfg.MaxStateBytes = DefaultMaxStateBytes
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{
		cfg: cfg, box: cfg.Box,
		log:     log.With("agent", "claudecode", "session", cfg.SessionID),
		project: path.Join(cfg.ConfigDir, "projects", projectDirName(cfg.Workdir)),
		saved:   &files{byName: map[string]*file{}},
	}
	if _, err := cfg.Box.Stat(ctx, cfg.CLI); err != nil {
		return nil, fmt.Errorf("claudecode agent: the Claude Code CLI is not in the box at %s (mount it read-only at that path): %w", cfg.CLI, err)
	}
	if len(state) > 0 {
		id, project, saved, err := unpack(state, cfg.MaxStateBytes)
		if err != nil {
			return nil, err
		}
		if project != "" {
			a.project = path.Join(cfg.ConfigDir, "projects", project)
		}
		if err := saved.restore(ctx, cfg.Box, a.project); err != nil {
			return nil, err
		}
		a.session, a.saved = id, saved
	} else {
		a.session = newUUID()
	}
	if len(cfg.Settings) > 0 {
		if err := cfg.Box.WriteFile(ctx, path.Join(cfg.ConfigDir, "settings.json"), cfg.Settings, 0o600); err != nil {
			return nil, fmt.Errorf("claudecode agent: writing Claude Code's settings into the box: %w", err)
		}
	}
	if len(cfg.MCP) > 0 {
		b, err := agent.MCPJSON(cfg.MCP, cfg.Workdir)
		if err != nil {
			return nil, fmt.Errorf("claudecode agent: %w", err)
		}
		a.mcpConfig = path.Join(cfg.ConfigDir, "harvest-mcp.json")
		if err := cfg.Box.WriteFile(ctx, a.mcpConfig, b, 0o600); err != nil {
			return nil, fmt.Errorf("claudecode agent: writing the MCP config into the box: %w", err)
		}
	}
	return a, nil
}

// ClaudeSession is Claude Code's session id.
func (a *Agent) ClaudeSession() string { return a.session }

// TranscriptPath is the box path of Claude Code's transcript.
func (a *Agent) TranscriptPath() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return path.Join(a.project, a.session+".jsonl")
}

// State implements agent.Agent: Claude Code's session id and its files, as
// copied out of the box after the last turn (here, if not yet) (gzipped: the
// transcript holds every tool output, so it grows with the session, up to
// Config.MaxStateBytes uncompressed).
func (a *Agent) State() ([]byte, error) {
	a.mu.Lock()
	unsaved, until := a.unsaved, a.untilUUID
	a.unsaved = false
	a.mu.Unlock()
	if unsaved && a.box.Alive() {
		a.save(context.Background(), until)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.saveErr != nil {
		return nil, fmt.Errorf("claudecode agent: the conversation could not be copied out of the box: %w", a.saveErr)
	}
	return a.saved.pack(a.session, path.Base(a.project))
}

// flushTimeout bounds the wait for Claude Code to write a turn's last lines
// into its transcript (it does so a moment after printing them: 100-200 ms
// in 2.1.197).
const flushTimeout = 5 * time.Second

// save copies the session's files out of the box (what changed since the
// last time). With until, the uuid of the turn's last conversation line, it
// waits for the transcript to hold that entry, polling.
func (a *Agent) save(ctx context.Context, until string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	deadline := time.Now().Add(flushTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		a.mu.Lock()
		a.findProject(ctx)
		err := a.saved.refresh(ctx, a.box, a.project, a.session, a.cfg.MaxStateBytes)
		a.saveErr = err
		done := until == "" || a.saved.holds(a.session+".jsonl", until)
		a.mu.Unlock()
		if err != nil {
			a.log.Error("copying Claude Code's transcript out of the box", "err", err)
			return
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			a.log.Warn("Claude Code's transcript still lacks the turn's last message; the saved state may miss it", "after", flushTimeout, "uuid", until)
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// findProject checks that the transcript is where Claude Code was expected
// to file it, and else looks for it in the other project directories (a
// working directory Claude Code names differently, through a symlink say),
// following it there. a.mu is held.
func (a *Agent) findProject(ctx context.Context) {
	name := a.session + ".jsonl"
	if _, err := a.box.Stat(ctx, path.Join(a.project, name)); !errors.Is(err, fs.ErrNotExist) {
		return
	}
	root := path.Join(a.cfg.ConfigDir, "projects")
	dirs, err := a.box.ReadDir(ctx, root)
	if err != nil {
		return
	}
	for _, d := range dirs {
		p := path.Join(root, d.Name)
		if _, err := a.box.Stat(ctx, path.Join(p, name)); d.IsDir() && err == nil {
			a.log.Warn("Claude Code filed the transcript in another project directory than expected; following it", "expected", a.project, "found", p)
			a.project = p
			return
		}
	}
}

// Close implements agent.Agent: it closes the CLI's stdin so it exits,
// killing it (and everything it started) if it has not after
// InterruptGrace, and copies the transcript out one last time.
func (a *Agent) Close(ctx context.Context) error {
	a.mu.Lock()
	p := a.proc
	a.proc, a.closed = nil, true
	a.mu.Unlock()
	if p == nil {
		return nil
	}
	var errs []error
	if !p.exited() {
		_ = p.closeStdin(ctx)
		wctx, cancel := context.WithTimeout(ctx, a.cfg.InterruptGrace)
		_, _ = p.p.Wait(wctx)
		cancel()
	}
	if err := p.kill(ctx); err != nil {
		errs = append(errs, err)
	}
	if a.box.Alive() {
		a.save(ctx, "")
	}
	return errors.Join(errs...)
}

// nextID returns a fresh control request id.
func (a *Agent) nextID(kind string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seq++
	return fmt.Sprintf("harvest-%s-%d", kind, a.seq)
}

// running returns the CLI process, starting it if there is none (the first
// turn, or after one was killed or exited): with --resume when the box has
// the session's transcript, else with --session-id.
func (a *Agent) running(ctx context.Context) (*proc, error) {
	a.mu.Lock()
	p, closed := a.proc, a.closed
	a.mu.Unlock()
	if closed {
		return nil, errors.New("the agent was closed")
	}
	if p != nil && !p.exited() {
		return p, nil
	}
	if p != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		a.log.Warn("Claude Code exited between turns; starting it again", "status", p.status(rctx), "stderr", p.stderr.String())
		_ = p.kill(rctx)
		cancel()
	}
	resume := false
	if _, err := a.box.Stat(ctx, a.TranscriptPath()); err == nil {
		resume = true
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("looking for the transcript in the box: %w", err)
	}
	cmd := &sandbox.Cmd{Args: a.args(resume), Env: a.env(), Dir: a.cfg.Workdir}
	p, err := startProc(ctx, a.box, cmd)
	if err != nil {
		return nil, err
	}
	p.resumed = resume
	a.log.Info("started Claude Code", "pid", p.p.PID(), "resume", resume, "claude_session", a.session)
	a.mu.Lock()
	closed = a.closed
	if !closed {
		a.proc = p
	}
	a.mu.Unlock()
	if closed {
		_ = p.kill(context.WithoutCancel(ctx))
		return nil, errors.New("the agent was closed")
	}
	return p, nil
}

// args is the command line (2.1.197: stream-json output needs --verbose;
// stream-json input needs -p; bypassPermissions is refused as root, which
// the box user never is).
func (a *Agent) args(resume bool) []string {
	args := []string{a.cfg.CLI, "-p",
		"--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
		"--include-partial-messages", "--permission-mode", "bypassPermissions"}
	if a.cfg.Model != "" {
		args = append(args, "--model", a.cfg.Model)
	}
	if a.cfg.Instructions != "" {
		args = append(args, "--append-system-prompt", a.cfg.Instructions)
	}
	if a.mcpConfig != "" {
		// bypassPermissions lets its MCP tools run without a prompt.
		args = append(args, "--mcp-config", a.mcpConfig, "--strict-mcp-config")
	}
	if resume {
		return append(args, "--resume", a.session)
	}
	return append(args, "--session-id", a.session)
}

// env is the CLI's environment: the model endpoint, its own config
// directory, and everything that would reach for the network (there is
// none) turned off.
func (a *Agent) env() []string {
	c := a.cfg
	env := []string{
		"HOME=" + c.Home,
		"CLAUDE_CONFIG_DIR=" + c.ConfigDir,
		"ANTHROPIC_BASE_URL=" + c.ModelURL,
		"ANTHROPIC_API_KEY=" + c.ModelKey,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
		"DISABLE_BUG_COMMAND=1",
		"DISABLE_COST_WARNINGS=1",
		"CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY=1",
		"CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL=1",
		"CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL=1",
	}
	if c.Model != "" {
		env = append(env, "ANTHROPIC_DEFAULT_HAIKU_MODEL="+c.Model, "ANTHROPIC_SMALL_FAST_MODEL="+c.Model, "CLAUDE_CODE_SUBAGENT_MODEL="+c.Model)
	}
	return mergeEnv(env, c.Env)
}

// mergeEnv returns base with over's entries replacing those of the same key.
func mergeEnv(base, over []string) []string {
	idx := map[string]int{}
	out := append([]string(nil), base...)
	for i, kv := range out {
		k, _, _ := strings.Cut(kv, "=")
		idx[k] = i
	}
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// kill kills the CLI (the turn found it broken); the next turn starts a
// new one with --resume.
func (a *Agent) kill(ctx context.Context, p *proc) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := p.kill(kctx); err != nil {
		a.log.Error("killing Claude Code", "err", err)
	}
	a.mu.Lock()
	if a.proc == p {
		a.proc = nil
	}
	a.mu.Unlock()
}

// Turn implements agent.Agent: it writes prompt on the CLI's stdin and maps
// its output to events until its result (see the package doc).
func (a *Agent) Turn(ctx context.Context, prompt string, emit func(event.Payload)) agent.Outcome {
	t := &turn{a: a, ctx: ctx, emit: emit, m: newMapper(emit, a.log, a.cfg.Prices), start: time.Now()}
	emit(event.TurnStarted{Prompt: prompt, Model: a.cfg.Model})
	out := t.run(prompt)
	until := ""
	a.mu.Lock()
	if a.proc != nil && !a.proc.exited() {
		until = t.m.last // a live CLI may not have written it yet
	}
	a.unsaved, a.untilUUID = true, until
	a.mu.Unlock()
	emit(out.Payload())
	return out
}
