package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
)

// runEnv is an environment for the real harvest binary with no model key,
// its own run dir (so its boxes never mix with other tests') and its own
// data dir.
func runEnv(t testing.TB) (env []string, home string) {
	t.Helper()
	home = t.TempDir()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "HARVEST_MODEL", "HARVEST_HOME", "HARVEST_RUN_DIR", "HARVEST_STORE":
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "HARVEST_AGENT_BINARY="+testbin.Agent(t), "HARVEST_HOME="+home, "HARVEST_RUN_DIR="+testbin.TempDir(t), "NO_COLOR=1")
	return env, home
}

func runHarvest(t *testing.T, env []string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	return runBinary(t, testbin.Harvest(t), env, stdin, args...)
}

// runBinary runs bin with env and stdin, returning its exit code and output.
func runBinary(t *testing.T, bin string, env []string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

func needRoot(t testing.TB) {
	t.Helper()
	testreq.NeedRoot(t, "the local backend")
}

// TestRunDemo is the README's first command: on a machine with no model key,
// harvest run fixes the bundled example on harvest sim, says it is a demo,
// and leaves the fix in the workspace it prints.
func TestRunDemo(t *testing.T) {
	needRoot(t)
	env, home := runEnv(t)
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runHarvest(t, env, "", "run", "--repo", filepath.Join(root, "examples/calc"), "Fix the failing test")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "this is a DEMO") {
		t.Errorf("the demo does not say it is one:\n%s", errOut)
	}
	for _, want := range []string{"✓ bash: go test ./...", "✓ edit: calc.go", "Fixed the failing test", "✓ done: 5 steps", "$0."} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "M calc.go") {
		t.Errorf("the change summary is missing:\n%s", errOut)
	}
	matches, _ := filepath.Glob(filepath.Join(home, "runs", "*", "calc", "calc.go"))
	if len(matches) != 1 {
		t.Fatalf("workspaces: %v", matches)
	}
	if b, _ := os.ReadFile(matches[0]); !strings.Contains(string(b), "for i := 0; i < len(xs); i++") {
		t.Errorf("the workspace does not have the fix:\n%s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "examples/calc/calc.go")); !strings.Contains(string(b), "for i := 1;") {
		t.Error("the source repository was changed")
	}
	// The run's events and audit log are kept next to the workspace.
	dir := filepath.Dir(filepath.Dir(matches[0]))
	if b, err := os.ReadFile(filepath.Join(dir, "audit.jsonl")); err != nil || strings.Count(string(b), "\n") != 4 {
		t.Errorf("audit log: %v\n%s", err, b)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "events.jsonl")); err != nil || !strings.Contains(string(b), `"type":"turn.finished"`) {
		t.Errorf("event log: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "conversation.json")); err != nil || !strings.Contains(string(b), "Fix the failing test") {
		t.Errorf("conversation: %v", err)
	}
}

func writeScript(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunJSONAndExitCodes(t *testing.T) {
	needRoot(t)
	env, _ := runEnv(t)
	repo := t.TempDir()
	os.WriteFile(filepath.Join(repo, "notes.txt"), []byte("hello\n"), 0o644)
	script := writeScript(t, `
mode: sequence
rules:
  - reply: {text: "Reading.", tool_calls: [{name: read, input: {path: notes.txt}}]}
  - when: {tool_result: "hello"}
    reply: {text: "It says hello.", usage: {input_tokens: 10, output_tokens: 5}}
`)
	code, out, errOut := runHarvest(t, env, "", "run", "--repo", repo, "--sim-script", script, "--json", "read the notes")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var types []string
	var lastSeq int64
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var e struct {
			Session string          `json:"session"`
			Seq     int64           `json:"seq"`
			Type    string          `json:"type"`
			Data    json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		if e.Seq != lastSeq+1 || !strings.HasPrefix(e.Session, "run-") {
			t.Errorf("event %+v after seq %d", e, lastSeq)
		}
		lastSeq = e.Seq
		types = append(types, e.Type)
	}
	if types[0] != "turn.started" || types[len(types)-1] != "turn.finished" {
		t.Errorf("event types: %v", types)
	}
	if !strings.Contains(strings.Join(types, " "), "tool.started tool.finished step.finished") {
		t.Errorf("event types: %v", types)
	}
	if !strings.Contains(errOut, "running on harvest sim with the script") {
		t.Errorf("stderr: %s", errOut)
	}

	// A limit: exit 1 and the reason.
	code, out, _ = runHarvest(t, env, "", "run", "--repo", repo, "--sim-script", script, "--max-steps", "1", "read the notes")
	if code != 1 || !strings.Contains(out, "failed (max_steps)") {
		t.Errorf("max steps: exit %d\n%s", code, out)
	}
}

// TestRunCtrlC: Ctrl-C during a long bash command kills it within a second,
// harvest exits 130, and no box is left.
func TestRunCtrlC(t *testing.T) {
	needRoot(t)
	env, home := runEnv(t)
	marker := strconv.Itoa(100000 + os.Getpid()%800000) // a sleep no other test runs
	script := writeScript(t, `
rules:
  - reply: {tool_calls: [{name: bash, input: {command: "touch started; sleep `+marker+`"}}]}
`)
	cmd := exec.Command(testbin.Harvest(t), "run", "--repo", t.TempDir(), "--sim-script", script, "wait")
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	testbin.WaitFor(t, 60*time.Second, "the run to start and its command to sleep", func() bool {
		m, _ := filepath.Glob(filepath.Join(home, "runs", "*", "*", "started"))
		return len(m) == 1 && sleeping(marker)
	})
	sent := time.Now()
	cmd.Process.Signal(syscall.SIGINT)
	testbin.WaitFor(t, 10*time.Second, "the command to be gone after Ctrl-C", func() bool { return !sleeping(marker) })
	if d := time.Since(sent); d > time.Second {
		t.Errorf("the command ran %s after Ctrl-C", d)
	}
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Errorf("exit: %v, want 130\n%s\n%s", err, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "cancelled") {
		t.Errorf("output:\n%s", out.String())
	}
	if code, ls, _ := runHarvest(t, env, "", "sandbox", "ls"); code != 0 || strings.Count(ls, "\n") > 1 {
		t.Errorf("boxes left after Ctrl-C:\n%s", ls)
	}
}

// sleeping reports whether a "sleep N" process runs anywhere on the host.
func sleeping(n string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && string(b) == "sleep\x00"+n+"\x00" {
			return true
		}
	}
	return false
}

func TestRunBadInput(t *testing.T) {
	env, _ := runEnv(t)
	repo := t.TempDir()
	bad := writeScript(t, "rules:\n  - reply: {txt: oops}\n")
	script := writeScript(t, "rules:\n  - reply: {text: ok}\n")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run", "fix it"}, 2, "no repository: give --repo DIR"},
		{[]string{"run", "--repo", repo}, 2, "no prompt: say what to do"},
		{[]string{"run", "--repo", repo, "  "}, 2, "the prompt is empty"},
		{[]string{"run", "--repo", "/no/such/repo", "x"}, 125, "does not exist: give an existing directory or a git URL"},
		{[]string{"run", "--repo", repo, "--max-steps", "-1", "x"}, 2, "--max-steps -1: must be positive"},
		{[]string{"run", "--repo", repo, "--backend", "local", "--runtime", "runsc", "x"}, 2, "--runtime runsc is for --backend docker, not local"},
		{[]string{"run", "--repo", repo, "--budget", "-2", "x"}, 2, "--budget -2: must be positive"},
		{[]string{"run", "--repo", repo, "--sim-script", bad, "x"}, 125, "script.yaml:2"},
		{[]string{"run", "--repo", repo, "--model", "anthropic/claude-sonnet-4-5", "x"}, 125, "ANTHROPIC_API_KEY"},
		{[]string{"run", "--repo", repo, "--model", "acme/model-1", "x"}, 125, `unknown provider "acme"`},
		{[]string{"run", "--repo", repo, "--repo", repo, "x"}, 125, "two repositories are named"},
		{[]string{"run", "--repo", repo, "--backend", "podman", "x"}, 125, `unknown backend "podman"`},
		{[]string{"run", "--repo", repo, "--agent", "claudecode", "x"}, 125, "the claudecode agent needs a model: set ANTHROPIC_API_KEY"},
		{[]string{"run", "--repo", repo, "--egress-allow", "*", "x"}, 2, "--egress-allow"},
		{[]string{"run", "--repo", repo, "--agent", "claudecode", "--sim-script", script, "--egress-allow", "*", "x"}, 2, "--egress-allow"},
		{[]string{"run", "--repo", repo, "--agent", "claudecode", "--sim-script", script, "--backend", "host", "--unsafe-host", "x"}, 125, `the claudecode agent runs in an isolated box, on the local or docker backend; not on "host"`},
		{[]string{"run", "--repo", repo, "--agent", "claudecode", "--sim-script", script, "--max-steps", "3", "x"}, 125, "--max-steps and --max-output-tokens are the builtin agent's"},
		{[]string{"run", "--repo", repo, "--agent", "claudecode", "--sim-script", script, "--model", "openai/gpt-4.1", "x"}, 125, "speaks the Anthropic API"},
	}
	for _, c := range cases {
		code, _, errOut := runHarvest(t, env, "", c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("harvest %s:\n  exit %d, want %d\n  stderr %q\n  want it to contain %q", strings.Join(c.args, " "), code, c.code, errOut, c.want)
		}
	}
}

// TestRunExternalAgents: harvest run --agent claudecode (stream-json),
// --agent terminal (the interactive TUI in a PTY) — the real Claude Code —
// and --agent opencode (the real OpenCode server, on the OpenAI API) run in
// the box on harvest sim, through the model proxy: the scripted task's
// tools really run and the answer comes back, with the same kinds of
// events as the builtin agent's.
func TestRunExternalAgents(t *testing.T) {
	for _, kind := range []string{"claudecode", "terminal", "opencode"} {
		t.Run(kind, func(t *testing.T) { testRunExternal(t, kind) })
	}
}

// The external agents run in the docker backend's base image too: their
// CLIs are native executables, mounted read-only from the host.
func TestRunExternalAgentsDocker(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "image", "inspect", testbin.DockerImage()).CombinedOutput(); err != nil {
		testreq.Unavailable(t, testreq.Docker, "no docker image %s: %v\n%s", testbin.DockerImage(), err, out)
	}
	for _, kind := range []string{"claudecode", "terminal", "opencode"} {
		t.Run(kind, func(t *testing.T) { testRunExternal(t, kind, "--backend", "docker", "--image", testbin.DockerImage()) })
	}
}

func testRunExternal(t *testing.T, kind string, flags ...string) {
	needRoot(t)
	script, model := "../../sim/examples/claude-code.yaml", "anthropic/claude-sonnet-4-5"
	if kind == "opencode" {
		testbin.OpenCode(t)
		script, model = "../../sim/examples/opencode.yaml", "openai/gpt-4.1"
	} else {
		testbin.Claude(t)
	}
	env, _ := runEnv(t)
	repo := t.TempDir()
	os.WriteFile(filepath.Join(repo, "README"), []byte("hi\n"), 0o644)
	script, err := filepath.Abs(script)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"run", "--agent", kind, "--model", model, "--repo", repo, "--sim-script", script, "--json"}, flags...)
	code, out, errOut := runHarvest(t, env, "", append(args, "Write a greeting script greet.sh, run it, and tell me what it printed")...)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	seen := map[string]bool{}
	var result string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e struct {
			Type string `json:"type"`
			Data struct {
				Result string `json:"result"`
			} `json:"data"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		seen[e.Type] = true
		if e.Type == "turn.finished" {
			result = e.Data.Result
		}
	}
	want := []string{"turn.started", "tool.started", "tool.finished", "assistant.message", "step.finished", "turn.finished"}
	if kind == "terminal" {
		want = append(want, "terminal.output")
	}
	for _, want := range want {
		if !seen[want] {
			t.Errorf("no %s event; seen %v", want, seen)
		}
	}
	if !strings.Contains(result, "hello, harvest") {
		t.Errorf("result %q", result)
	}
}

// harvest run --agent terminal --command runs a CLI of the user's own in
// the PTY (no model key needed for one that calls none): the turn ends on
// its done pattern, the view prints what it answered, and the events name
// the terminal agent.
func TestRunGenericTerminal(t *testing.T) {
	needRoot(t)
	env, _ := runEnv(t)
	repo := t.TempDir()
	os.WriteFile(filepath.Join(repo, "README"), []byte("hi\n"), 0o644)
	code, out, errOut := runHarvest(t, env, "", "run", "--agent", "terminal", "--repo", repo,
		"--command", `python3 -i -q -c "import sys; sys.ps1 = 'py> '"`, "--done-pattern", `py> $`, "print(6*7, 'answers'); open('made.txt','w').write('x')")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	if !strings.Contains(out, "42 answers") || !strings.Contains(out, "done:") {
		t.Errorf("the view printed %q: want the CLI's answer and the done line", out)
	}
	code, out, errOut = runHarvest(t, env, "", "run", "--agent", "terminal", "--repo", repo, "--json",
		"--command", "bash --norc --noprofile -i", "--done-pattern", `\$ $`, "echo from-bash")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	if !strings.Contains(out, `"agent":"terminal"`) || !strings.Contains(out, `"type":"terminal.output"`) || !strings.Contains(out, "from-bash") {
		t.Errorf("events: %s", out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--command", "bash", "--done-pattern", `\$ $`}, "add --agent terminal"},
		{[]string{"--agent", "terminal", "--command", "bash 'open", "--done-pattern", "x"}, "single quote is not closed"},
		{[]string{"--agent", "terminal", "--command", "bash"}, "give --done-pattern"},
		{[]string{"--agent", "terminal", "--command", "bash", "--done-pattern", "("}, "--done-pattern: error parsing regexp"},
		{[]string{"--agent", "terminal", "--done-pattern", "x"}, "go with --command"},
	} {
		code, _, errOut := runHarvest(t, env, "", append(append([]string{"run", "--repo", repo}, tc.args...), "x")...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestSplitWords(t *testing.T) {
	for in, want := range map[string][]string{
		`python3 -i -q`:              {"python3", "-i", "-q"},
		`  a   b  `:                  {"a", "b"},
		`sh -c 'echo "hi there"; x'`: {"sh", "-c", `echo "hi there"; x`},
		`a "b \"c\" \$d \x" e`:       {"a", `b "c" $d \x`, "e"},
		`a\ b c`:                     {"a b", "c"},
		`''`:                         {""},
		`x''y`:                       {"xy"},
	} {
		got, err := splitWords(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("splitWords(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{`a 'b`, `a "b`, `a\`} {
		if _, err := splitWords(in); err == nil {
			t.Errorf("splitWords(%q): no error", in)
		}
	}
}
