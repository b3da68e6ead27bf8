package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/agents"
	"github.com/harvest-dev/harvest/agent/builtin"
	"github.com/harvest-dev/harvest/environment"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/demo"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/providers"
	"github.com/harvest-dev/harvest/netguard"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/backends"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/sim"
	"github.com/harvest-dev/harvest/workspace"
)

// Exit codes of `harvest run`.
const (
	exitTurnFailed = 1   // the agent could not finish: a limit, a loop, stuck, a model error
	exitCancelled  = 130 // Ctrl-C (or SIGTERM)
)

type agentRunFlags struct {
	repos      []string
	agentName  string
	model      string
	backend    string
	json       bool
	maxSteps   int
	timeout    time.Duration
	budget     float64
	maxOutput  int
	image      string
	runtime    string
	memory     string
	disk       diskFlags
	cpus       float64
	simScript  string
	prices     string
	unsafeHost bool
	dataDir    string
	terminal   terminalFlags
	egress     string
	mcpAllow   []string
	cold       bool
}

func newRunCmd() *cobra.Command {
	var f agentRunFlags
	cmd := &cobra.Command{
		Use:   "run --repo PATH [flags] PROMPT",
		Short: "Run Harvest's agent on a copy of a repository, in a fresh sandbox",
		Long: `Copy a repository into a fresh workspace, start a sandbox on it and run
Harvest's builtin agent on PROMPT until it is done, streaming what it does.
The model runs from this process; its key never enters the sandbox. The
copy is kept afterwards: its path is printed at the end, with what changed.

--repo is a directory (copied as it is: uncommitted changes, untracked files
and .git included; your checkout is never written) or a git URL (cloned).
Repeat it for several repositories: the first is where the agent starts.
PROMPT "-" reads the prompt from stdin.

The model is --model, else $HARVEST_MODEL, else anthropic/claude-sonnet-4-5
when ANTHROPIC_API_KEY is set, else openai/gpt-4.1 when OPENAI_API_KEY is.
With no key at all, Harvest runs on harvest sim with its bundled demo script
(it says so), which knows one task: fixing examples/calc. --sim-script FILE
runs on harvest sim with your own script instead.

The agent is --agent NAME: .harvest/agents/NAME.md in the repository, else
~/.config/harvest/agents/NAME.md, else the built-in default. --agent
claudecode (Claude Code through stream-json), terminal (Claude Code's
interactive TUI in a PTY) or opencode (an OpenCode server) runs that CLI in
the box instead (installed by scripts/setup under $HARVEST_CLI_PREFIX,
default /opt/harvest/npm; local or docker backend), its model calls going through a
proxy on this machine that adds the key: the box sees only a per-run token.
--agent terminal --command "CLI ARGS" runs any interactive CLI in the PTY
instead of Claude Code, a turn ending when its output matches
--done-pattern (its prompt) or has been quiet for --terminal-idle; it finds
the model proxy in HARVEST_MODEL_URL / HARVEST_MODEL_TOKEN (and
ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY or OPENAI_BASE_URL / OPENAI_API_KEY).

Ctrl-C cancels the turn: the running tool's processes are killed and the
box is destroyed. Exit status: 0 done, 1 the agent failed (a limit, a loop,
stuck, a model error), 130 cancelled, 125 Harvest could not run, 2 bad usage.`,
		Example: `  harvest run --repo examples/calc "Fix the failing test"
  harvest run --repo . --model anthropic/claude-sonnet-4-5 --budget 2 "Add a --verbose flag"
  harvest run --repo https://github.com/acme/app.git --json "Why does CI fail?" > events.jsonl
  harvest run --repo . --sim-script task.yaml "do the scripted task"
  harvest run --repo . --agent terminal --command "python3 -i -q" --done-pattern '>>> $' "print(2**64)"`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New(`no prompt: say what to do, like: harvest run --repo . "Fix the failing test"`)
			}
			if len(f.repos) == 0 {
				return errors.New("no repository: give --repo DIR (or a git URL)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runAgent(cmd, f, args) },
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.repos, "repo", nil, "repository to work on: a directory or a git URL (repeatable)")
	fl.StringVar(&f.agentName, "agent", "", "agent definition name (default: the repository's or built-in default), or claudecode, terminal, opencode")
	fl.StringVar(&f.model, "model", "", "model as provider/model, like anthropic/claude-sonnet-4-5 or openai/gpt-4.1")
	fl.StringVar(&f.backend, "backend", backends.Default, "sandbox backend: "+strings.Join(backends.Names(), ", "))
	fl.BoolVar(&f.json, "json", false, "print every event as a JSON line instead of the progress view")
	fl.IntVar(&f.maxSteps, "max-steps", 0, fmt.Sprintf("most model calls in the turn (default: the agent's, else %d)", builtin.DefaultMaxSteps))
	fl.DurationVar(&f.timeout, "timeout", 0, fmt.Sprintf("wall-clock limit of the turn (default: the agent's, else %s)", builtin.DefaultTimeout))
	fl.Float64Var(&f.budget, "budget", 0, "most USD the turn may spend (default: the agent's, else none)")
	fl.IntVar(&f.maxOutput, "max-output-tokens", 0, fmt.Sprintf("cap on each model reply (default: the agent's, else %d)", builtin.DefaultMaxOutputTokens))
	fl.StringVar(&f.image, "image", "", "container image (docker backend)")
	fl.StringVar(&f.runtime, "runtime", "", runtimeHelp)
	fl.StringVar(&f.memory, "memory", "", "memory limit of the box, like 4g (default 6g)")
	f.disk.add(fl, "none: the workspaces, kept after the run, are then on a disk image mounted under the run's directory until reboot")
	fl.Float64Var(&f.cpus, "cpus", 0, "CPU limit of the box in cores (default: none)")
	fl.StringVar(&f.simScript, "sim-script", "", "run on harvest sim with this script instead of a model API")
	fl.StringVar(&f.prices, "prices", "", "YAML or JSON file of model prices (USD per million tokens) to add to the built-in table")
	fl.BoolVar(&f.unsafeHost, "unsafe-host", false, "allow --backend host: the agent's tools run on this machine with NO isolation")
	fl.StringVar(&f.egress, "egress-allow", "", egressHelp)
	fl.StringArrayVar(&f.mcpAllow, "mcp-allow", nil, "let the repositories' .mcp.json remote servers be dialed at this internal address, which is otherwise refused (left out with a warning): a host name, an IP, or a CIDR network, each optionally with :PORT (localhost:3000, 10.0.0.0/8; repeatable)")
	fl.BoolVar(&f.cold, "cold", false, "do not start from the repository's prepared environment (harvest prepare), even when the local server has one")
	fl.StringVar(&f.dataDir, "data-dir", "", "where run workspaces are kept (default $HARVEST_HOME, else ~/.local/share/harvest)")
	f.terminal.add(cmd)
	return cmd
}

func (f agentRunFlags) validate() error {
	if err := checkRuntimeFlag(f.backend, f.runtime); err != nil {
		return err
	}
	switch {
	case f.maxSteps < 0:
		return fmt.Errorf("--max-steps %d: must be positive", f.maxSteps)
	case f.timeout < 0:
		return fmt.Errorf("--timeout %s: must be positive", f.timeout)
	case f.budget < 0:
		return fmt.Errorf("--budget %v: must be positive (USD)", f.budget)
	case f.maxOutput < 0:
		return fmt.Errorf("--max-output-tokens %d: must be positive", f.maxOutput)
	case f.cpus < 0:
		return fmt.Errorf("--cpus %v: must be positive", f.cpus)
	}
	if _, err := openEgress(f.egress, nil, nil, nil); err != nil { // checks the list; serves nothing yet
		return err
	}
	if _, err := f.mcpGuard(); err != nil {
		return err
	}
	_, err := f.terminal.spec(f.agentName)
	return err
}

// mcpGuard is the address policy of the repositories' remote MCP
// servers, with --mcp-allow's allowances.
func (f agentRunFlags) mcpGuard() (*netguard.Guard, error) {
	g, err := netguard.New(netguard.Config{Allow: f.mcpAllow, AllowHint: "harvest run --mcp-allow"})
	if err != nil {
		return nil, fmt.Errorf("--mcp-allow: %w", err)
	}
	return g, nil
}

// dataDir is where harvest keeps run workspaces.
func dataDir(flag string) (string, error) {
	if flag != "" {
		return filepath.Abs(flag)
	}
	if d := os.Getenv("HARVEST_HOME"); d != "" {
		return filepath.Abs(d)
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "harvest"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory to keep workspaces in: set HARVEST_HOME or pass --data-dir (%v)", err)
	}
	return filepath.Join(home, ".local/share/harvest"), nil
}

// agentsDir is the user's agent definitions directory.
func agentsDir() string {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "harvest/agents")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".config/harvest/agents")
}

// modelSetup is the model client and, when it runs on the sim, the server.
type modelSetup struct {
	client *llm.Client
	models providers.Config // where models are served (the sim's endpoint on the sim)
	name   string           // the model, provider/model
	demo   bool             // the bundled demo script plays the model
	notice string           // said once on stderr
	stop   func()
}

// openModel picks the model (see the run command's help).
func openModel(f agentRunFlags) (*modelSetup, error) {
	if f.prices != "" {
		if err := llm.LoadPrices(f.prices); err != nil {
			return nil, fmt.Errorf("--prices: %w", err)
		}
	}
	cfg := providers.FromEnv()
	if f.simScript != "" {
		s, err := sim.LoadScript(f.simScript)
		if err != nil {
			return nil, fmt.Errorf("--sim-script: %w", err)
		}
		return startSim(cfg, s, f.model, false, fmt.Sprintf("running on harvest sim with the script %s: the answers are scripted, not from a model.", f.simScript))
	}
	model := f.model
	if model == "" {
		model = strings.TrimSpace(os.Getenv("HARVEST_MODEL"))
	}
	if model == "" {
		switch {
		case cfg.Endpoints["anthropic"].APIKey != "":
			model = "anthropic/claude-sonnet-4-5"
		case cfg.Endpoints["openai"].APIKey != "":
			model = "openai/gpt-4.1"
		default:
			s, err := demo.Script()
			if err != nil {
				return nil, err
			}
			return startSim(cfg, s, demo.Model, true, "no model key is configured (ANTHROPIC_API_KEY or OPENAI_API_KEY), so this is a DEMO: "+
				"Harvest runs on harvest sim with its bundled demo script, which only knows how to fix examples/calc. "+
				"The sandbox, the tools and the agent loop are real; the model's answers are scripted.")
		}
	}
	client, err := providers.Open(cfg, model)
	if err != nil {
		return nil, err
	}
	return &modelSetup{client: client, models: cfg, name: model, stop: func() {}}, nil
}

// startSim serves script on loopback and opens model against it.
func startSim(cfg providers.Config, s *sim.Script, model string, isDemo bool, notice string) (*modelSetup, error) {
	cfg, model, stop, err := serveSim(cfg, s, model)
	if err != nil {
		return nil, err
	}
	client, err := providers.Open(cfg, model)
	if err != nil {
		stop()
		return nil, err
	}
	return &modelSetup{client: client, models: cfg, name: model, demo: isDemo, notice: notice, stop: stop}, nil
}

// serveSim serves script on loopback until stop is called, and returns cfg
// with model's provider pointed at it (model defaults to the demo's). Both
// harvest run and harvest serve use it.
func serveSim(cfg providers.Config, s *sim.Script, model string) (_ providers.Config, _ string, stop func(), _ error) {
	if model == "" {
		model = demo.Model
	}
	api, _, err := llm.ParseModel(model)
	if err != nil {
		return cfg, "", nil, fmt.Errorf("--model: %w", err)
	}
	if api != "anthropic" && api != "openai" {
		return cfg, "", nil, fmt.Errorf("--model %s: on harvest sim use an anthropic/ or openai/ model", model)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return cfg, "", nil, fmt.Errorf("starting harvest sim: %w", err)
	}
	srv := &http.Server{Handler: sim.New(s), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	base := "http://" + ln.Addr().String()
	if api == "openai" {
		base += "/v1"
	}
	cfg.Endpoints = map[string]providers.Endpoint{api: {API: api, BaseURL: base, APIKey: "harvest-sim"}}
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}
	return cfg, model, stop, nil
}

func runAgent(cmd *cobra.Command, f agentRunFlags, args []string) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if err := f.validate(); err != nil {
		return exitCode(2, err)
	}
	prompt := strings.Join(args, " ")
	if prompt == "-" {
		b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
		if err != nil {
			return exitCode(exitHarvestError, fmt.Errorf("reading the prompt from stdin: %w", err))
		}
		prompt = string(b)
	}
	if strings.TrimSpace(prompt) == "" {
		return exitCode(2, errors.New("the prompt is empty: say what to do"))
	}
	var sources []workspace.Source
	names := map[string]bool{}
	for _, r := range f.repos {
		src, err := workspace.Parse(r)
		if err != nil {
			return exitCode(exitHarvestError, fmt.Errorf("--repo: %w", err))
		}
		if names[src.Name()] {
			return exitCode(exitHarvestError, fmt.Errorf("--repo: two repositories are named %q; the workspace names must differ", src.Name()))
		}
		names[src.Name()] = true
		sources = append(sources, src)
	}
	var limits sandbox.Limits
	if f.memory != "" {
		n, err := sandbox.ParseSize(f.memory)
		if err != nil {
			return exitCode(exitHarvestError, fmt.Errorf("--memory: %w", err))
		}
		limits.MemoryBytes = n
	}
	limits.CPUs = f.cpus
	diskSize, err := f.disk.limits()
	if err != nil {
		return exitCode(2, err)
	}
	data, err := dataDir(f.dataDir)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}

	model, err := openModel(f)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}
	defer model.stop()
	kind, err := checkAgent(f, model)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}
	if model.notice != "" {
		fmt.Fprintln(stderr, "harvest:", model.notice)
	}

	p, closeP, err := openBackend(f.backend, backends.Options{AllowUnsafeHost: f.unsafeHost, DockerImage: f.image, DockerRuntime: f.runtime}, stderr)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}
	defer closeP()

	// Signals: the first cancels the turn (its tools die, the box is
	// destroyed); a second one also abandons the clean-up steps that are
	// still waiting (the box is still destroyed).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancelCause(cmd.Context())
	defer cancel(nil)
	hard, hardCancel := context.WithCancel(context.Background())
	defer hardCancel()
	sigDone := make(chan struct{})
	defer close(sigDone)
	go func() {
		n := 0
		for {
			select {
			case s := <-sigs:
				n++
				if n == 1 {
					fmt.Fprintf(stderr, "\nharvest: %s: cancelling the turn (again to stop waiting)\n", sigName(s))
					cancel(fmt.Errorf("interrupted (%s)", sigName(s)))
				} else {
					hardCancel()
				}
			case <-sigDone:
				return
			}
		}
	}()

	// The workspaces.
	runID := "run-" + strings.TrimPrefix(sandbox.NewID(), "box-")
	runDir := filepath.Join(data, "runs", runID)
	if err := os.MkdirAll(runDir, 0o711); err != nil {
		return exitCode(exitHarvestError, fmt.Errorf("creating %s: %w (pass --data-dir or set HARVEST_HOME to a writable directory)", runDir, err))
	}
	// The box user: 1000 when Harvest runs as root (the box must not be
	// root), else the caller, who owns the copies.
	user := sandbox.User{UID: sandbox.DefaultUID, GID: sandbox.DefaultGID}
	owner := workspace.Owner{UID: user.UID, GID: user.GID}
	if os.Geteuid() != 0 {
		user = sandbox.User{UID: os.Geteuid(), GID: os.Getegid()}
		owner = workspace.Owner{}
	}
	spec := sandbox.Spec{User: user, Limits: limits, Image: f.image, Labels: map[string]string{"harvest.run": runID}}
	spec.Mounts = agents.Mounts(kind, cliPrefix())
	wsDir := runDir
	if diskSize != (disk.Size{}) {
		if wsDir, spec.DiskDir, err = runDisk(ctx, runDir, diskSize, stderr); err != nil {
			return exitCode(exitHarvestError, err)
		}
	}
	for _, src := range sources {
		dst := filepath.Join(wsDir, src.Name())
		if _, err := workspace.Prepare(ctx, src, dst, owner, workspace.CloneOptions{}); err != nil {
			if spec.DiskDir != "" && disk.IsFull(err) {
				err = fmt.Errorf("%w: the repositories do not fit the run's disk (--disk %s): give a larger --disk", err, f.disk.size)
			}
			return exitCode(exitHarvestError, err)
		}
		spec.Workspaces = append(spec.Workspaces, sandbox.Workspace{Name: src.Name(), HostPath: dst})
	}
	unpack := false
	if !f.cold {
		serverData, err := serverDataDir("")
		if err != nil {
			return exitCode(exitHarvestError, err)
		}
		env, err := findPreparedEnv(ctx, serverData, sources[0], f.backend)
		if err != nil {
			return exitCode(exitHarvestError, err)
		}
		if env != nil {
			lp, layers := p.(sandbox.LayerProvider)
			layers = layers && lp.WorkspaceLayers()
			if unpack, err = env.apply(&spec, filepath.Join(runDir, "box"), spec.Workspaces[0].HostPath, owner, layers, stderr); err != nil {
				return exitCode(exitHarvestError, fmt.Errorf("starting from the prepared environment %s: %w (--cold starts without it)", env.env.ID, err))
			}
		}
	}
	turnTimeout := f.timeout
	if turnTimeout == 0 {
		turnTimeout = builtin.DefaultTimeout
	}
	spec.Timeout = turnTimeout + 10*time.Minute

	startCtx, cancelStart := context.WithTimeout(ctx, 2*time.Minute)
	box, err := p.Start(startCtx, spec)
	cancelStart()
	if err != nil {
		if ctx.Err() != nil {
			return exitCode(exitCancelled, nil)
		}
		return exitCode(exitHarvestError, err)
	}
	destroyed := false
	destroy := func() {
		if destroyed {
			return
		}
		destroyed = true
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		if err := box.Destroy(dctx); err != nil {
			fmt.Fprintf(stderr, "harvest: destroying box %s: %v (remove it with: harvest sandbox rm %s)\n", box.ID(), err, box.ID())
		}
	}
	defer destroy()

	if unpack {
		if err := environment.UnpackArtifacts(ctx, box, spec.Workspaces[0].Name); err != nil {
			return exitCode(exitHarvestError, err)
		}
	}
	if err := environment.RunStart(ctx, box, spec.Workspaces[0].Name, ""); err != nil {
		return exitCode(exitHarvestError, err)
	}
	var ws []agent.Workspace
	for _, w := range spec.Workspaces {
		ws = append(ws, agent.Workspace{Name: w.Name, Path: box.WorkspacePath(w.Name)})
	}
	if err := trackChanges(ctx, box, ws, stderr); err != nil {
		return exitCode(exitHarvestError, err)
	}
	audit, err := os.OpenFile(filepath.Join(runDir, "audit.jsonl"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}
	defer audit.Close()
	events, err := os.OpenFile(filepath.Join(runDir, "events.jsonl"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}
	defer events.Close()

	ag, err := openAgent(ctx, f, kind, model, box, ws, runID, audit)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}
	desc := fmt.Sprintf("%s agent, %s", kind.Name, model.name)
	if kind.Name == agents.Default {
		def := f.agentName
		if def == "" {
			def = "default"
		}
		desc = fmt.Sprintf("%s agent, %s", def, model.client)
	}
	if f.timeout > 0 && !hasOwnTimeout(kind) {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeoutCause(ctx, f.timeout, fmt.Errorf("the turn reached its time limit (--timeout %s)", f.timeout))
		defer cancelT()
	}

	var view eventSink
	if f.json {
		view = &jsonView{w: stdout}
	} else {
		view = newTextView(stdout, isTerminal(stdout))
		fmt.Fprintf(stderr, "harvest: %s on %s in a %s box (%s)\n", describeRepos(sources), runDir, box.Backend(), desc)
	}
	rec := &eventLog{run: runID, turn: "t1", agent: kind.Name, sinks: []eventSink{&jsonView{w: events}, view}}
	out := ag.Turn(ctx, prompt, rec.emit)
	view.close()
	// The conversation, for the record (and for a later continue).
	if st, err := ag.State(); err == nil {
		if err := os.WriteFile(filepath.Join(runDir, "conversation.json"), st, 0o600); err != nil {
			fmt.Fprintf(stderr, "harvest: saving the conversation: %v\n", err)
		}
	}

	// What changed, asked inside the box (host code never runs git in a
	// workspace the agent wrote), then the box goes.
	sumCtx, sumCancel := context.WithTimeout(hard, 20*time.Second)
	changes := changedFiles(sumCtx, box, ws)
	sumCancel()
	closeCtx, closeCancel := context.WithTimeout(hard, 10*time.Second)
	_ = ag.Close(closeCtx)
	closeCancel()
	destroy()

	if !f.json {
		printWorkspaces(stderr, spec.Workspaces, changes)
	}
	switch {
	case out.Finished != nil:
		return nil
	case out.Cancelled != nil:
		return exitCode(exitCancelled, nil)
	default:
		return exitCode(exitTurnFailed, nil)
	}
}

// cliPrefix is where the external agents' CLIs are installed:
// $HARVEST_CLI_PREFIX, else where scripts/setup puts them.
func cliPrefix() string {
	if p := os.Getenv("HARVEST_CLI_PREFIX"); p != "" {
		return p
	}
	return agents.DefaultCLIPrefix
}

func sigName(s os.Signal) string {
	if s == syscall.SIGINT {
		return "Ctrl-C"
	}
	return s.String()
}

func describeRepos(srcs []workspace.Source) string {
	var parts []string
	for _, s := range srcs {
		parts = append(parts, s.String())
	}
	return strings.Join(parts, ", ")
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// trackChanges makes each workspace that is not a git repository one, with
// its initial state committed, so that the agent's git tools and the summary
// at the end show what changed. It runs inside the box, as the box user.
func trackChanges(ctx context.Context, box *sandbox.Sandbox, ws []builtin.Workspace, stderr io.Writer) error {
	for _, w := range ws {
		t, err := workspace.Track(ctx, box, w.Path)
		if err != nil {
			return err
		}
		switch t {
		case workspace.MadeGit:
			fmt.Fprintf(stderr, "harvest: %s is not a git repository; made it one in the copy, with its initial state committed, to track the agent's changes\n", w.Name)
		case workspace.NoGit:
			fmt.Fprintf(stderr, "harvest: %s is not a git repository and the box has no git; its changes will not be listed\n", w.Name)
		}
	}
	return nil
}

// changedFiles lists, per workspace that is a git repository, `git status
// --short` as run inside the box.
func changedFiles(ctx context.Context, box *sandbox.Sandbox, ws []builtin.Workspace) map[string]string {
	out := map[string]string{}
	for _, w := range ws {
		var b bytes.Buffer
		st, err := box.Run(ctx, &sandbox.Cmd{
			Args: []string{"sh", "-c", "git rev-parse --is-inside-work-tree >/dev/null 2>&1 || exit 3; git status --short --untracked-files=all | head -n 50"},
			Dir:  w.Path, Stdout: &b, OutputLimit: 64 << 10, Timeout: 15 * time.Second,
		})
		if err == nil && st.Success() {
			out[w.Name] = strings.TrimRight(b.String(), "\n")
		}
	}
	return out
}

func printWorkspaces(w io.Writer, ws []sandbox.Workspace, changes map[string]string) {
	for _, x := range ws {
		c, ok := changes[x.Name]
		switch {
		case !ok:
			fmt.Fprintf(w, "workspace %s: %s\n", x.Name, x.HostPath)
		case c == "":
			fmt.Fprintf(w, "workspace %s: %s (no uncommitted changes)\n", x.Name, x.HostPath)
		default:
			n := strings.Count(c, "\n") + 1
			fmt.Fprintf(w, "workspace %s: %s (%d changed %s, per git status in the box):\n", x.Name, x.HostPath, n, plural(n, "file", "files"))
			for _, line := range strings.Split(c, "\n") {
				fmt.Fprintf(w, "  %s\n", line)
			}
		}
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// eventLog numbers the turn's events and hands them to the sinks.
type eventLog struct {
	run, turn, agent string
	seq              int64
	sinks            []eventSink
}

func (l *eventLog) emit(p event.Payload) {
	l.seq++
	e := event.Event{Session: l.run, Seq: l.seq, Time: time.Now().UTC(), Turn: l.turn, Agent: l.agent, Data: p}
	for _, s := range l.sinks {
		s.event(e)
	}
}

type eventSink interface {
	event(event.Event)
	close()
}

// jsonView writes every event as a JSON line.
type jsonView struct{ w io.Writer }

func (v *jsonView) event(e event.Event) {
	b, err := json.Marshal(e)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": "encoding event: " + err.Error()})
	}
	v.w.Write(append(b, '\n'))
}

func (v *jsonView) close() {}

var _ agent.Agent = (*builtin.Agent)(nil)
