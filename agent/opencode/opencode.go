package opencode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/sandbox"
)

// Defaults of Config's timeouts and limits.
const (
	// DefaultNoOutputTimeout is above the longest timeout OpenCode's bash
	// tool accepts (10 minutes; 2 by default), during which a command may
	// print nothing and the session report nothing.
	DefaultNoOutputTimeout = 15 * time.Minute
	// DefaultStartTimeout bounds starting the server (a cold start in a box
	// takes 1-3 s) and importing a conversation.
	DefaultStartTimeout = 60 * time.Second
	// DefaultAbortGrace is how long a cancelled turn waits for the session
	// to go idle after the abort before the server is stopped.
	DefaultAbortGrace = 10 * time.Second
	// DefaultMaxStateBytes bounds the conversation kept for State.
	DefaultMaxStateBytes = 32 << 20
)

// requestTimeout bounds each API call other than the event stream.
const requestTimeout = 30 * time.Second

// API shapes of the model endpoint (Config.API).
const (
	APIOpenAI    = "openai"    // Chat Completions, through @ai-sdk/openai-compatible
	APIAnthropic = "anthropic" // Messages, through @ai-sdk/anthropic
)

// providerID is the name of the provider the agent configures in OpenCode.
const providerID = "harvest"

// Config is what an Agent needs.
type Config struct {
	// Box is the session's sandbox, started by the caller. Required.
	Box *sandbox.Sandbox
	// Workdir is the box path OpenCode works in (e.g. /workspace/repo);
	// default: the box's workdir. A resumed session must use the same one.
	Workdir string
	// CLI is the box path of the opencode binary (the caller mounts
	// /opt/harvest/npm read-only at the same path). Required.
	CLI string
	// ModelURL is the in-box base URL of the model endpoint, e.g.
	// http://127.0.0.1:41234; OpenCode calls ModelURL/v1/... Required.
	ModelURL string
	// ModelKey is what OpenCode sends as its API key: a per-session proxy
	// token, never a real key. Required.
	ModelKey string
	// Model is the model id to ask for, e.g. claude-sonnet-4-5. Required.
	Model string
	// Env is extra environment for the server (and the tools it runs); it
	// overrides what the agent sets.
	Env []string
	// SessionID is Harvest's session id (for logs and OpenCode's session
	// title).
	SessionID string
	// Logger receives what the server does that is not an event; nil
	// discards.
	Logger *slog.Logger

	// API is the model endpoint's wire protocol: APIOpenAI (default) or
	// APIAnthropic.
	API string
	// Home is HOME for the server; default: the box's HOME. OpenCode keeps
	// its database under it (~/.local/share/opencode); the agent keeps its
	// config there too (~/.config/harvest-opencode).
	Home string
	// Instructions are extra system instructions (OpenCode's
	// "instructions" files).
	Instructions string
	// MCP are the agent's MCP servers (agent.Deps.MCP: stdio ones, and
	// the registry's bridge for remote ones), in its config's mcp section.
	MCP []agent.MCPServer
	// Prices give OpenCode the model's price, so that it reports each
	// step's cost; nil is llm.DefaultPrices. A model it does not list costs
	// 0 here (the model proxy meters the real spending).
	Prices *llm.PriceTable

	// NoOutputTimeout: a turn whose session reports nothing for this long
	// is aborted and fails (event.FailCLIHung). Default DefaultNoOutputTimeout.
	NoOutputTimeout time.Duration
	// StartTimeout bounds starting the server. Default DefaultStartTimeout.
	StartTimeout time.Duration
	// AbortGrace: after the abort of a cancelled (or hung) turn, how long
	// to wait for the session to stop before stopping the server. Default
	// DefaultAbortGrace.
	AbortGrace time.Duration
	// MaxStateBytes bounds the conversation State keeps (uncompressed
	// JSON); default DefaultMaxStateBytes.
	MaxStateBytes int64
}

// Agent drives `opencode serve` in a box through its HTTP API, reached with
// Sandbox.Dial. See the package doc. Turns are sequential; State and Close
// may be called concurrently with a turn.
type Agent struct {
	cfg    Config
	box    *sandbox.Sandbox
	log    *slog.Logger
	tr     *http.Transport
	client *http.Client
	dir    string // box directory of the agent's own files
	config string // OPENCODE_CONFIG_CONTENT

	// srvMu serialises starting and stopping the server (held across that
	// I/O, never across a turn's event loop).
	srvMu  sync.Mutex
	srv    *server
	closed bool
	// fatal is an error no restart fixes (an incompatible server).
	fatal error

	mu      sync.Mutex // guards the fields below; never held across I/O
	session string     // OpenCode's session id
	version string     // the server's version
	saved   []byte     // State's answer
	saveErr error
}

var _ agent.Agent = (*Agent)(nil)

// New starts OpenCode in cfg.Box: it writes the agent's config, imports
// the conversation in state (from State) when there is one, starts the
// server, checks its API (CheckAPI) and creates, or finds, the OpenCode
// session. An incompatible server is an *IncompatibleError.
func New(ctx context.Context, cfg Config, state []byte) (*Agent, error) {
	if cfg.Box == nil {
		return nil, errors.New("opencode agent: no sandbox")
	}
	if cfg.CLI == "" {
		return nil, errors.New("opencode agent: no CLI path: give the box path of opencode (mount the npm prefix read-only into the box)")
	}
	if cfg.ModelURL == "" || cfg.ModelKey == "" {
		return nil, errors.New("opencode agent: the model URL and key are required (the in-box address of the model proxy and the session's token)")
	}
	if cfg.Model == "" {
		return nil, errors.New("opencode agent: no model: give the model id to ask the endpoint for")
	}
	switch cfg.API {
	case "":
		cfg.API = APIOpenAI
	case APIOpenAI, APIAnthropic:
	default:
		return nil, fmt.Errorf("opencode agent: API %q: use %q or %q", cfg.API, APIOpenAI, APIAnthropic)
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
	if cfg.Prices == nil {
		cfg.Prices = llm.DefaultPrices
	}
	if cfg.NoOutputTimeout <= 0 {
		cfg.NoOutputTimeout = DefaultNoOutputTimeout
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.AbortGrace <= 0 {
		cfg.AbortGrace = DefaultAbortGrace
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
		log: log.With("agent", "opencode", "session", cfg.SessionID),
		dir: path.Join(cfg.Home, ".config", "harvest-opencode"),
	}
	a.tr = &http.Transport{
		// Every connection is made by the box's agent, inside the box:
		// the server listens on the box's loopback only.
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return cfg.Box.Dial(ctx, "tcp", addr)
		},
		Proxy:               nil,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     time.Minute,
	}
	a.client = &http.Client{Transport: a.tr}

	if _, err := cfg.Box.Stat(ctx, cfg.CLI); err != nil {
		return nil, fmt.Errorf("opencode agent: the OpenCode CLI is not in the box at %s (mount it read-only at that path): %w", cfg.CLI, err)
	}
	if err := a.writeConfig(ctx); err != nil {
		return nil, err
	}
	if len(state) > 0 {
		st, err := unpack(state)
		if err != nil {
			return nil, err
		}
		if st.Workdir != "" && st.Workdir != cfg.Workdir {
			return nil, fmt.Errorf("opencode agent: the saved conversation was made in %s, not %s: resume it with the same Workdir", st.Workdir, cfg.Workdir)
		}
		if err := a.importSession(ctx, st); err != nil {
			return nil, err
		}
		a.session, a.saved = st.Session, state
	}
	if _, err := a.server(ctx); err != nil {
		a.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return a, nil
}

// Session is OpenCode's session id.
func (a *Agent) Session() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.session
}

// Version is the version the OpenCode server reported.
func (a *Agent) Version() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.version
}

// writeConfig writes the key file and the instructions into the box and
// builds the config OpenCode gets in OPENCODE_CONFIG_CONTENT, which it
// merges last, over the user's and the repository's own opencode.json.
func (a *Agent) writeConfig(ctx context.Context) error {
	cfg := a.cfg
	keyPath := path.Join(a.dir, "key")
	// The key is read from a file ({file:...}) so that it is not in the
	// environment of every command the bash tool runs.
	if err := a.box.WriteFile(ctx, keyPath, []byte(cfg.ModelKey), 0o600); err != nil {
		return fmt.Errorf("opencode agent: writing its config into the box: %w", err)
	}
	npm := "@ai-sdk/openai-compatible"
	if cfg.API == APIAnthropic {
		npm = "@ai-sdk/anthropic"
	}
	model := map[string]any{"name": cfg.Model, "tool_call": true}
	if p, ok := cfg.Prices.Lookup(cfg.Model); ok {
		model["cost"] = map[string]float64{"input": p.Input, "output": p.Output, "cache_read": p.CacheRead, "cache_write": p.CacheWrite}
	}
	allow, deny := "allow", "deny"
	c := map[string]any{
		"$schema": "https://opencode.ai/config.json",
		"provider": map[string]any{providerID: map[string]any{
			"npm":  npm,
			"name": "Harvest",
			"options": map[string]any{
				"baseURL": strings.TrimSuffix(cfg.ModelURL, "/") + "/v1",
				"apiKey":  "{file:" + keyPath + "}",
			},
			"models": map[string]any{cfg.Model: model},
		}},
		"enabled_providers": []string{providerID},
		"model":             providerID + "/" + cfg.Model,
		"small_model":       providerID + "/" + cfg.Model,
		"autoupdate":        false,
		"share":             "disabled",
		// Harvest tracks the workspace with git itself; OpenCode's
		// snapshots, formatters and language servers only cost time in a
		// box (and would try to download servers).
		"snapshot":  false,
		"formatter": false,
		"lsp":       false,
		// Nobody answers a permission prompt or a question during a turn:
		// everything that works in a box is allowed, the rest denied (the
		// box has no network). A prompt that comes anyway is rejected.
		"permission": map[string]any{
			"read": allow, "edit": allow, "glob": allow, "grep": allow, "list": allow,
			"bash": allow, "task": allow, "external_directory": allow, "todowrite": allow,
			"lsp": allow, "skill": allow,
			"question": deny, "webfetch": deny, "websearch": deny, "doom_loop": deny,
		},
	}
	if len(cfg.MCP) > 0 {
		m, err := mcpConfig(cfg.MCP, cfg.Workdir)
		if err != nil {
			return err
		}
		c["mcp"] = m
	}
	if cfg.Instructions != "" {
		p := path.Join(a.dir, "instructions.md")
		if err := a.box.WriteFile(ctx, p, []byte(cfg.Instructions), 0o600); err != nil {
			return fmt.Errorf("opencode agent: writing its instructions into the box: %w", err)
		}
		c["instructions"] = []string{p}
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	a.config = string(b)
	return nil
}

// env is the server's environment (on top of the box's).
func (a *Agent) env() []string {
	env := []string{
		"HOME=" + a.cfg.Home,
		"OPENCODE_CONFIG_CONTENT=" + a.config,
		// No update checks, no model catalogue download, no language
		// server downloads, no sharing: the box has no network, and each
		// would only fail (or wait) at start.
		"OPENCODE_DISABLE_AUTOUPDATE=1",
		"OPENCODE_DISABLE_MODELS_FETCH=1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD=1",
		"OPENCODE_DISABLE_SHARE=1",
		// At start OpenCode npm-installs @opencode-ai/plugin into its
		// config dir; it works without it: fail fast.
		"npm_config_offline=true",
		"npm_config_registry=http://127.0.0.1:9/",
	}
	return append(env, a.cfg.Env...)
}

// State implements agent.Agent: OpenCode's session id and the session's
// stored conversation (info and messages with their parts, as `opencode
// export` writes them), as read through the API at the end of the last
// turn, gzipped. See "Resume" in the package doc.
func (a *Agent) State() ([]byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.saveErr != nil {
		return nil, fmt.Errorf("opencode agent: the conversation could not be read out of the box: %w", a.saveErr)
	}
	return a.saved, nil // nil before the first turn: nothing to resume
}

// Close implements agent.Agent: it aborts what the session still runs and
// stops the server. The conversation stays in the box (and in State).
func (a *Agent) Close(ctx context.Context) error {
	a.srvMu.Lock()
	defer a.srvMu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	var err error
	if a.srv != nil {
		if s := a.Session(); s != "" && a.srv.alive() {
			actx, cancel := context.WithTimeout(ctx, a.cfg.AbortGrace)
			_ = a.abort(actx, a.srv, s) // OpenCode kills its tools' process trees
			cancel()
		}
		err = a.srv.stop(ctx)
		a.srv = nil
	}
	a.tr.CloseIdleConnections()
	return err
}

// mcpConfig is servers in OpenCode's config format: {type: "local",
// command, environment} run in the box, or {type: "remote", url, headers}
// (the bridge, with the session's token; no OAuth).
func mcpConfig(servers []agent.MCPServer, workdir string) (map[string]any, error) {
	m := map[string]any{}
	for _, s := range servers {
		switch s.Kind() {
		case agent.MCPStdio:
			e := map[string]any{"type": "local", "command": s.MCPArgv(workdir), "enabled": true}
			if len(s.Env) > 0 {
				e["environment"] = s.Env
			}
			m[s.Name] = e
		case agent.MCPRemote:
			e := map[string]any{"type": "remote", "url": s.URL, "enabled": true, "oauth": false}
			if len(s.Headers) > 0 {
				e["headers"] = s.Headers
			}
			m[s.Name] = e
		default:
			return nil, fmt.Errorf("opencode agent: MCP server %q is served by Harvest on the host: it reaches OpenCode through the registry's bridge (a URL)", s.Name)
		}
	}
	return m, nil
}
