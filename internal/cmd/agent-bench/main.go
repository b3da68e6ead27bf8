// Command agent-bench measures a scripted multi-step agent task end to end,
// Harvest's builtin agent side by side with the real Claude Code CLI, both
// driven by the same harvest sim script and both working in a sandbox
// (scripts/bench-agent runs it; results go in BENCHMARKS.md).
//
// The task has -steps model calls: each but the last asks for one shell
// command (append a line to log.txt), the last answers. The script holds the
// same replies twice, once for Harvest's tool names (bash) and once for
// Claude Code's (Bash), so each client gets identical work.
//
//	harvest run          the real harvest binary: copy the repo, start a local
//	                     box, run the loop with an in-process sim, destroy
//	claude in a box      a local box with Claude Code mounted read-only; the
//	                     sim is served to it through a box listener
//	                     (sandbox.Listen), no network; create → exit → destroy
//	claude on the host   the CLI run directly as uid 1000, the sim on loopback
//	                     TCP: what the sandbox costs Claude Code
//	builtin loop         Harvest's loop in-process in an already running box:
//	                     what the loop costs without the CLI and box start
//	harvest run --agent claudecode
//	                     the harvest binary running Claude Code as its agent
//	claude -p in a running box / claudecode agent in a running box
//	                     one turn of the raw CLI (sim on a box listener) and of
//	                     Harvest's claudecode agent (model proxy on a box
//	                     listener, stream-json mapped to events, transcript
//	                     kept): the per-turn overhead Harvest adds to the CLI
//	resume               (claudecode, terminal, opencode) after a turn, the
//	                     state, a new box, and the time from opening the
//	                     agent on it to its first model request
//
// Every run is checked: log.txt must have one line per command and the final
// answer must arrive. Needs root, bwrap and the CLIs scripts/setup installs.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/agents"
	"github.com/harvest-dev/harvest/agent/claudecode"
	"github.com/harvest-dev/harvest/agent/opencode"
	"github.com/harvest-dev/harvest/agent/terminal"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/providers"
	"github.com/harvest-dev/harvest/modelproxy"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local"
	"github.com/harvest-dev/harvest/sim"
)

var (
	n          = flag.Int("n", 5, "runs of each")
	steps      = flag.Int("steps", 20, "model calls in the task")
	harvestBin = flag.String("harvest", "bin/harvest", "the harvest binary")
	agentBin   = flag.String("agent", "bin/harvest-agent", "the harvest-agent binary")
	npmPrefix  = flag.String("npm", "/opt/harvest/npm", "where scripts/setup installed the agent CLIs")
)

const (
	model    = "claude-sonnet-4-5"
	boxUID   = 1000
	prompt   = "Run the scripted steps."
	finalTxt = "All steps are done."
)

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "agent-bench: "+format+"\n", args...)
	os.Exit(1)
}

// script is the task for both clients.
func script(steps int) string {
	var b strings.Builder
	b.WriteString("# agent-bench: the same task for Harvest (tool bash) and Claude Code (tool Bash).\nmode: match\ndefaults:\n  usage: {input_tokens: 1200, output_tokens: 40}\nrules:\n")
	for i := 1; i < steps; i++ {
		cmd := fmt.Sprintf("echo step %d >> log.txt", i)
		fmt.Fprintf(&b, "  - name: opencode-%d\n    when: {turn: %d, tools: [bash, todowrite]}\n    reply: {text: \"Step %d.\", tool_calls: [{name: bash, input: {command: %q, description: \"Step %d\"}}]}\n", i, i, i, cmd, i)
		fmt.Fprintf(&b, "  - name: harvest-%d\n    when: {turn: %d, tools: [bash]}\n    reply: {text: \"Step %d.\", tool_calls: [{name: bash, input: {command: %q}}]}\n", i, i, i, cmd)
		fmt.Fprintf(&b, "  - name: claude-%d\n    when: {turn: %d, tools: [Bash]}\n    reply: {text: \"Step %d.\", tool_calls: [{name: Bash, input: {command: %q, description: \"Step %d\"}}]}\n", i, i, i, cmd, i)
	}
	b.WriteString("  - name: resume\n    when: {last_user: \"Resume check\"}\n    reply: {text: \"resumed\"}\n")
	fmt.Fprintf(&b, "  - name: done\n    when: {turn: %d}\n    reply: {text: %q}\n", steps, finalTxt)
	return b.String()
}

type result struct {
	name    string
	samples []time.Duration
}

func main() {
	flag.Parse()
	if os.Geteuid() != 0 {
		die("run as root (the local backend needs it)")
	}
	text := script(*steps)
	s, err := sim.ParseScript("agent-bench.yaml", []byte(text))
	if err != nil {
		die("%v", err)
	}
	tmp, err := os.MkdirTemp("", "agent-bench-*")
	if err != nil {
		die("%v", err)
	}
	os.Chmod(tmp, 0o711)
	defer os.RemoveAll(tmp)
	scriptPath := filepath.Join(tmp, "script.yaml")
	if err := os.WriteFile(scriptPath, []byte(text), 0o644); err != nil {
		die("%v", err)
	}
	claude := filepath.Join(*npmPrefix, "node_modules/.bin/claude")
	if _, err := os.Stat(claude); err != nil {
		die("Claude Code is not installed at %s: run scripts/setup", claude)
	}
	runDir := filepath.Join(tmp, "run")
	os.MkdirAll(runDir, 0o711)
	p := local.New(local.Config{RunDir: runDir, AgentBinary: *agentBin})
	ctx := context.Background()
	if err := p.Available(ctx); err != nil {
		die("%v", err)
	}

	results := []*result{
		{name: "harvest run (builtin agent, local box)"},
		{name: "Claude Code in a local box"},
		{name: "Claude Code on the host, no sandbox"},
		{name: "builtin loop in a running local box"},
		{name: "`harvest run --agent claudecode` (local box)"},
		{name: "Claude Code `-p` in a running local box (one turn)"},
		{name: "claudecode agent in a running local box (one turn)"},
		{name: "claudecode resume: open on a new box → first model request"},
		{name: "terminal agent (Claude Code's TUI) in a running local box (one turn)"},
		{name: "terminal resume: open on a new box → first model request"},
		{name: "OpenCode `run` in a running local box (one turn)"},
		{name: "opencode agent in a running local box (one turn)"},
		{name: "opencode resume: open on a new box → first model request"},
	}
	for i := 0; i < *n; i++ {
		results[0].samples = append(results[0].samples, harvestRun(tmp, runDir, scriptPath, i))
		results[1].samples = append(results[1].samples, claudeInBox(ctx, p, s, tmp, claude, i))
		results[2].samples = append(results[2].samples, claudeOnHost(ctx, s, tmp, claude, i))
		results[3].samples = append(results[3].samples, builtinLoop(ctx, p, s, tmp, i))
		results[4].samples = append(results[4].samples, harvestRun(tmp, runDir, scriptPath, i, "--agent", "claudecode"))
		results[5].samples = append(results[5].samples, claudeRaw(ctx, p, s, tmp, claude, i))
		turn, resume := externalTurn(ctx, p, s, tmp, claudecode.Kind.Name, i)
		results[6].samples = append(results[6].samples, turn)
		results[7].samples = append(results[7].samples, resume)
		turn, resume = externalTurn(ctx, p, s, tmp, terminal.Kind.Name, i)
		results[8].samples = append(results[8].samples, turn)
		results[9].samples = append(results[9].samples, resume)
		results[10].samples = append(results[10].samples, openCodeRun(ctx, p, s, tmp, i))
		turn, resume = externalTurn(ctx, p, s, tmp, opencode.Kind.Name, i)
		results[11].samples = append(results[11].samples, turn)
		results[12].samples = append(results[12].samples, resume)
		fmt.Fprintf(os.Stderr, "run %d/%d done\n", i+1, *n)
	}

	fmt.Printf("%d-step scripted task, %d runs each (wall time, start to finish):\n\n", *steps, *n)
	fmt.Println("| how | p50 | min | max | per step (p50) | vs harvest run |")
	fmt.Println("|---|---|---|---|---|---|")
	base := pct(results[0].samples, 0.5)
	for _, r := range results {
		p50 := pct(r.samples, 0.5)
		fmt.Printf("| %s | %s | %s | %s | %s | %.1f× |\n", r.name, sec(p50), sec(pct(r.samples, 0)), sec(pct(r.samples, 1)),
			msf(p50/time.Duration(*steps)), float64(p50)/float64(base))
	}
}

func pct(s []time.Duration, p float64) time.Duration {
	c := append([]time.Duration(nil), s...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	i := int(p * float64(len(c)-1))
	return c[i]
}

func sec(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
func msf(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// workspace makes an empty directory owned by the box user.
func workspace(tmp, name string) string {
	d := filepath.Join(tmp, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		die("%v", err)
	}
	os.Chown(d, boxUID, boxUID)
	return d
}

func checkLog(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "log.txt"))
	if err != nil {
		die("the task did not run: %v", err)
	}
	if got := strings.Count(string(b), "\n"); got != *steps-1 {
		die("log.txt has %d lines, want %d", got, *steps-1)
	}
}

// harvestRun runs the real harvest binary.
func harvestRun(tmp, runDir, scriptPath string, i int, flags ...string) time.Duration {
	tag := strings.Join(flags, "")
	repo := workspace(tmp, fmt.Sprintf("repo-h%s%d", tag, i))
	home := filepath.Join(tmp, fmt.Sprintf("home-h%s%d", tag, i))
	args := append([]string{"run", "--repo", repo, "--sim-script", scriptPath, "--json"}, flags...)
	cmd := exec.Command(*harvestBin, append(args, prompt)...)
	cmd.Env = append(os.Environ(), "HARVEST_HOME="+home, "HARVEST_RUN_DIR="+runDir, "HARVEST_AGENT_BINARY="+*agentBin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil || !strings.Contains(out.String(), finalTxt) {
		die("harvest run: %v\n%s", err, errb.String())
	}
	logs, _ := filepath.Glob(filepath.Join(home, "runs", "*", filepath.Base(repo)))
	if len(logs) != 1 {
		die("harvest run left %d workspaces", len(logs))
	}
	checkLog(logs[0])
	return d
}

func claudeEnv(baseURL, home string) []string {
	return []string{
		"HOME=" + home,
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"ANTHROPIC_BASE_URL=" + baseURL,
		"ANTHROPIC_API_KEY=sk-ant-agent-bench",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1", "DISABLE_ERROR_REPORTING=1",
	}
}

func claudeArgs(claude string) []string {
	return []string{claude, "-p", prompt, "--output-format", "stream-json", "--verbose",
		"--permission-mode", "bypassPermissions", "--model", model}
}

// checkClaude checks the result line of Claude Code's stream-json output.
func checkClaude(out []byte) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var r struct {
			Type    string `json:"type"`
			IsError bool   `json:"is_error"`
			Result  string `json:"result"`
		}
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Type == "result" {
			if r.IsError || r.Result != finalTxt {
				die("claude: result %+v", r)
			}
			return
		}
	}
	die("claude printed no result line:\n%s", out)
}

// claudeInBox runs Claude Code in a fresh local box.
func claudeInBox(ctx context.Context, p *local.Provider, s *sim.Script, tmp, claude string, i int) time.Duration {
	ws := workspace(tmp, fmt.Sprintf("repo-cb%d", i))
	start := time.Now()
	sb := startBox(ctx, p, ws, claudecode.Kind.Name)
	defer sb.Destroy(context.Background())
	srv, url := serveSim(ctx, sb, s)
	defer srv.Close()
	var out, errb bytes.Buffer
	st, err := sb.Run(ctx, &sandbox.Cmd{
		Args: claudeArgs(claude), Env: claudeEnv(url, "/home/user"),
		Stdout: &out, Stderr: &errb, Timeout: 5 * time.Minute,
	})
	if err != nil || !st.Success() {
		die("claude in the box: %v %v\n%s", st, err, errb.String())
	}
	checkClaude(out.Bytes())
	if err := sb.Destroy(ctx); err != nil {
		die("destroy: %v", err)
	}
	d := time.Since(start)
	checkLog(ws)
	return d
}

// claudeOnHost runs Claude Code directly, as the box user, no sandbox.
func claudeOnHost(ctx context.Context, s *sim.Script, tmp, claude string, i int) time.Duration {
	ws := workspace(tmp, fmt.Sprintf("repo-ch%d", i))
	home := workspace(tmp, fmt.Sprintf("home-ch%d", i))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		die("%v", err)
	}
	srv := &http.Server{Handler: sim.New(s)}
	go srv.Serve(ln)
	defer srv.Close()
	args := claudeArgs(claude)
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = ws
	cmd.Env = claudeEnv("http://"+ln.Addr().String(), home)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: boxUID, Gid: boxUID}}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		die("claude on the host: %v\n%s", err, errb.String())
	}
	d := time.Since(start)
	checkClaude(out.Bytes())
	checkLog(ws)
	return d
}

// builtinLoop runs the loop in-process in a box started beforehand.
func builtinLoop(ctx context.Context, p *local.Provider, s *sim.Script, tmp string, i int) time.Duration {
	ws := workspace(tmp, fmt.Sprintf("repo-b%d", i))
	sb, err := p.Start(ctx, sandbox.Spec{Workspaces: []sandbox.Workspace{{Name: "repo", HostPath: ws}}, User: sandbox.User{UID: boxUID, GID: boxUID}})
	if err != nil {
		die("starting a box: %v", err)
	}
	defer sb.Destroy(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		die("%v", err)
	}
	srv := &http.Server{Handler: sim.New(s)}
	go srv.Serve(ln)
	defer srv.Close()
	a, err := agents.Open(ctx, agents.Request{Box: sb, Workspaces: []agent.Workspace{{Name: "repo", Path: "/workspace/repo"}},
		Model: "anthropic/" + model, ModelExplicit: true, Models: providers.Config{
			Endpoints: map[string]providers.Endpoint{"anthropic": {BaseURL: "http://" + ln.Addr().String(), APIKey: "sk-ant-agent-bench"}},
			Retry:     llm.RetryPolicy{MaxAttempts: 1},
		}, SessionID: "bench-builtin"})
	if err != nil {
		die("%v", err)
	}
	defer a.Close(ctx)
	start := time.Now()
	out := a.Turn(ctx, prompt, func(event.Payload) {})
	d := time.Since(start)
	if out.Finished == nil || out.Finished.Result != finalTxt {
		die("builtin loop: %+v", out.Payload())
	}
	checkLog(ws)
	return d
}

// claudeRaw measures the raw CLI's turn in a running box (claude -p, the
// sim on a box listener): what the claudecode agent's turn compares with.
func claudeRaw(ctx context.Context, p *local.Provider, s *sim.Script, tmp, claude string, i int) (raw time.Duration) {
	ws := workspace(tmp, fmt.Sprintf("repo-cr%d", i))
	sb := startBox(ctx, p, ws, claudecode.Kind.Name)
	defer sb.Destroy(ctx)
	srv, url := serveSim(ctx, sb, s)
	var out, errb bytes.Buffer
	start := time.Now()
	st, err := sb.Run(ctx, &sandbox.Cmd{
		Args: claudeArgs(claude), Env: claudeEnv(url, "/home/user"), Dir: "/workspace/repo",
		Stdout: &out, Stderr: &errb, Timeout: 5 * time.Minute,
	})
	raw = time.Since(start)
	if err != nil || !st.Success() {
		die("claude in the box: %v %v\n%s", st, err, errb.String())
	}
	checkClaude(out.Bytes())
	checkLog(ws)
	srv.Close()
	return raw
}

// serveSim serves the sim with script s on a loopback listener in sb and
// returns the server (closed by the caller) and its in-box URL.
func serveSim(ctx context.Context, sb *sandbox.Sandbox, s *sim.Script) (*http.Server, string) {
	ln, err := sb.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		die("listening in the box: %v", err)
	}
	srv := &http.Server{Handler: sim.New(s)}
	go srv.Serve(ln)
	return srv, "http://" + ln.Addr().String()
}

func mounts(kind string) []sandbox.Mount {
	k, err := agents.Lookup(kind)
	if err != nil {
		die("%v", err)
	}
	return agents.Mounts(k, *npmPrefix)
}

// startBox starts a box on workspace ws with kind's CLI mounted.
func startBox(ctx context.Context, p *local.Provider, ws, kind string) *sandbox.Sandbox {
	sb, err := p.Start(ctx, sandbox.Spec{
		Workspaces: []sandbox.Workspace{{Name: "repo", HostPath: ws}},
		User:       sandbox.User{UID: boxUID, GID: boxUID},
		Mounts:     mounts(kind),
	})
	if err != nil {
		die("starting a box: %v", err)
	}
	return sb
}

type agentTurner interface {
	Turn(context.Context, string, func(event.Payload)) agent.Outcome
	State() ([]byte, error)
	Close(context.Context) error
}

type agentOutcome struct{ agent.Outcome }

// firstRequest records when the first /v1/messages request arrives.
type firstRequest struct {
	h    http.Handler
	mu   sync.Mutex
	at   time.Time
	seen chan struct{}
}

func (f *firstRequest) reset() {
	f.mu.Lock()
	f.at, f.seen = time.Time{}, make(chan struct{})
	f.mu.Unlock()
}

func (f *firstRequest) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/v1/messages") {
		f.mu.Lock()
		if f.at.IsZero() && f.seen != nil {
			f.at = time.Now()
			close(f.seen)
		}
		f.mu.Unlock()
	}
	f.h.ServeHTTP(w, r)
}

func (f *firstRequest) wait() time.Time {
	f.mu.Lock()
	c := f.seen
	f.mu.Unlock()
	<-c
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at
}

// externalTurn measures one turn of an external agent (opened on a running
// box, the sim behind the model proxy), CLI start included, and after it a
// resume on a new box: from opening the agent with the saved state to its
// first model request.
func externalTurn(ctx context.Context, p *local.Provider, s *sim.Script, tmp, kind string, i int) (turn, resume time.Duration) {
	box := func(name string) (*sandbox.Sandbox, string) {
		ws := workspace(tmp, fmt.Sprintf("repo-%s-%s%d", kind, name, i))
		return startBox(ctx, p, ws, kind), ws
	}
	hs := &firstRequest{h: sim.New(s)}
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		die("%v", err)
	}
	srv := &http.Server{Handler: hs}
	go srv.Serve(up)
	defer srv.Close()
	models := providers.Config{Endpoints: map[string]providers.Endpoint{"anthropic": {BaseURL: "http://" + up.Addr().String(), APIKey: "sk-ant-agent-bench"}}}
	proxy, err := agents.NewProxy(models, "anthropic/"+model, nil, nil)
	if err != nil {
		die("%v", err)
	}
	open := func(sb *sandbox.Sandbox, state []byte) agentTurner {
		a, err := agents.Open(ctx, agents.Request{Kind: kind, Box: sb, Workspaces: []agent.Workspace{{Name: "repo", Path: "/workspace/repo"}},
			CLIPrefix: *npmPrefix, Model: "anthropic/" + model, Models: models, ModelExplicit: true,
			Proxy:     func(string) (*modelproxy.Proxy, error) { return proxy, nil },
			SessionID: fmt.Sprintf("bench-%s-%d", kind, i), State: state})
		if err != nil {
			die("opening the %s agent: %v", kind, err)
		}
		return a
	}

	sb, ws := box("t")
	start := time.Now()
	a := open(sb, nil)
	o := a.Turn(ctx, prompt, func(event.Payload) {})
	turn = time.Since(start)
	if o.Finished == nil || !strings.Contains(o.Finished.Result, finalTxt) {
		die("%s agent: %+v", kind, o.Payload())
	}
	checkLog(ws)
	state, err := a.State()
	if err != nil || len(state) == 0 {
		die("%s state: %d bytes, %v", kind, len(state), err)
	}
	a.Close(ctx)
	sb.Destroy(ctx)

	// Resume on a new box.
	sb, _ = box("r")
	defer sb.Destroy(ctx)
	hs.reset()
	start = time.Now()
	a = open(sb, state)
	defer a.Close(ctx)
	done := make(chan agentOutcome, 1)
	go func() { done <- agentOutcome{a.Turn(ctx, "Resume check", func(event.Payload) {})} }()
	resume = hs.wait().Sub(start)
	if o := <-done; o.Finished == nil || !strings.Contains(o.Finished.Result, "resumed") {
		die("%s resume: %+v", kind, o.Payload())
	}
	return turn, resume
}

// openCodeRun runs `opencode run PROMPT` once in a running box, the sim
// on a box listener (Anthropic API), configured as the opencode agent
// configures its server.
func openCodeRun(ctx context.Context, p *local.Provider, s *sim.Script, tmp string, i int) time.Duration {
	ws := workspace(tmp, fmt.Sprintf("repo-or%d", i))
	sb := startBox(ctx, p, ws, opencode.Kind.Name)
	defer sb.Destroy(ctx)
	srv, url := serveSim(ctx, sb, s)
	defer srv.Close()
	cfg, _ := json.Marshal(map[string]any{
		"provider": map[string]any{"anthropic": map[string]any{
			"options": map[string]any{"baseURL": url + "/v1", "apiKey": "sk-ant-agent-bench"},
			"models":  map[string]any{model: map[string]any{"name": "Sim", "tool_call": true}},
		}},
		"model": "anthropic/" + model, "small_model": "anthropic/" + model,
		"autoupdate": false, "share": "disabled", "snapshot": false,
		"permission": map[string]any{"edit": "allow", "bash": "allow", "webfetch": "deny"},
	})
	var out, errb bytes.Buffer
	start := time.Now()
	st, err := sb.Run(ctx, &sandbox.Cmd{
		Args: []string{agents.CLIPath(*npmPrefix, opencode.Kind.Caps.CLI), "run", "--title", "bench", prompt},
		Dir:  "/workspace/repo",
		Env: []string{"HOME=/home/user", "PATH=/usr/local/bin:/usr/bin:/bin", "OPENCODE_CONFIG_CONTENT=" + string(cfg),
			"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_LSP_DOWNLOAD=1", "OPENCODE_DISABLE_SHARE=1",
			"npm_config_registry=http://127.0.0.1:9/", "npm_config_offline=true"},
		Stdout: &out, Stderr: &errb, Timeout: 5 * time.Minute,
	})
	d := time.Since(start)
	if err != nil || !st.Success() || !strings.Contains(out.String()+errb.String(), finalTxt) {
		die("opencode run in the box: %v %v\n%s\n%s", st, err, out.String(), errb.String())
	}
	checkLog(ws)
	return d
}
