package clis

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sim"
)

// agentUID is the unprivileged user the CLIs run as when the tests run as
// root (the box user of the sandbox layer).
const agentUID = 1000

// process is a child process the test owns: exec copies its stdout into a
// pipe that a goroutine splits into lines (Wait returns only after the copy
// is done, so no output is lost); Stop, registered as cleanup, ends it with
// SIGTERM to its process group (SIGKILL after 10 s) and waits for everything.
type process struct {
	name   string
	cmd    *exec.Cmd
	cancel context.CancelFunc
	stderr testbin.Buffer
	lines  chan string // stdout, line by line
	wg     sync.WaitGroup
	done   chan struct{}
	err    error
}

// startProcess starts bin with args in dir, with exactly env (nothing is
// inherited), as agentUID when asAgent and the test runs as root.
func startProcess(t *testing.T, name string, asAgent bool, dir string, env []string, bin string, args ...string) *process {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if asAgent && os.Geteuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: agentUID, Gid: agentUID}
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	p := &process{name: name, cmd: cmd, cancel: cancel, lines: make(chan string, 1024), done: make(chan struct{})}
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = &p.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting %s: %v", name, err)
	}
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		defer close(p.lines)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		io.Copy(io.Discard, pr)
	}()
	go func() {
		defer p.wg.Done()
		p.err = cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.Stop() })
	return p
}

// Stop ends the process (if it still runs) and waits for it and its output
// reader; whatever is left of its process group is killed.
func (p *process) Stop() {
	p.cancel()
	for range p.lines { // the output ends once the process has exited
	}
	<-p.done
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	p.wg.Wait()
}

// waitLine returns the first stdout line with prefix, failing the test if
// the process exits or ctx ends first.
func (p *process) waitLine(ctx context.Context, t *testing.T, prefix string) string {
	t.Helper()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				<-p.done
				t.Fatalf("%s exited (%v) before printing %q; stderr:\n%s", p.name, p.err, prefix, p.stderr.String())
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-ctx.Done():
			t.Fatalf("%s did not print %q: %v; stderr:\n%s", p.name, prefix, ctx.Err(), p.stderr.String())
		}
	}
}

// simProcess is a running `harvest sim` (the real binary).
type simProcess struct {
	*process
	url    string
	script *sim.Script
}

// startSim runs the harvest binary as `harvest sim --script script` on a free
// loopback port and waits for its "listening" line.
func startSim(ctx context.Context, t *testing.T, script string) *simProcess {
	t.Helper()
	s, err := sim.LoadScript(script)
	if err != nil {
		t.Fatal(err)
	}
	bin := testbin.Harvest(t)
	p := startProcess(t, "harvest sim", false, "", []string{"PATH=/usr/bin:/bin"}, bin, "sim", "--script", script)
	line := p.waitLine(ctx, t, "harvest sim listening on ")
	sp := &simProcess{process: p, url: strings.TrimPrefix(line, "harvest sim listening on "), script: s}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("harvest sim log:\n%s", p.stderr.String())
		}
	})
	return sp
}

// requests fetches the sim's request log over HTTP, as another process would.
func (s *simProcess) requests(t *testing.T) []sim.Request {
	t.Helper()
	resp, err := http.Get(s.url + "/_sim/requests")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var reqs []sim.Request
	if err := json.NewDecoder(resp.Body).Decode(&reqs); err != nil {
		t.Fatalf("GET /_sim/requests: %v", err)
	}
	return reqs
}

// rule returns the script's rule called name.
func (s *simProcess) rule(t *testing.T, name string) *sim.Rule {
	t.Helper()
	for _, r := range s.script.Rules {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("script %s has no rule %q", s.script.Name, name)
	return nil
}

// usage is a sum of scripted usage, in Anthropic's terms.
type usage struct{ input, output, cacheRead, cacheWrite int }

func (u *usage) add(r *sim.Rule) {
	v := func(p *int) int {
		if p == nil {
			return 0
		}
		return *p
	}
	u.input += v(r.Reply.Usage.InputTokens)
	u.output += v(r.Reply.Usage.OutputTokens)
	u.cacheRead += v(r.Reply.Usage.CacheReadInputTokens)
	u.cacheWrite += v(r.Reply.Usage.CacheCreationInputTokens)
}

// agentDir returns a fresh directory owned by the agent user.
func agentDir(t *testing.T, name string) string {
	t.Helper()
	d := filepath.Join(testbin.TempDir(t), name)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(d, agentUID, agentUID); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// examplePath is the path of an example script in sim/examples.
func examplePath(t *testing.T, name string) string {
	t.Helper()
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "sim", "examples", name)
}

// rulesUsed lists the rule of every request the sim answered, in order,
// failing on any request the script did not answer with 200.
func rulesUsed(t *testing.T, reqs []sim.Request) []string {
	t.Helper()
	var out []string
	for _, r := range reqs {
		if r.Path == "/" && r.Method == http.MethodHead {
			continue // Claude Code's connectivity probe; answered 404 like the real API
		}
		if r.Status != http.StatusOK {
			t.Errorf("request #%d %s %s (rule %q) got %d: %s", r.Seq, r.Method, r.Path, r.Rule, r.Status, r.Error)
		}
		out = append(out, r.Rule)
	}
	return out
}

// withoutRule drops every occurrence of name from rules, returning how many
// there were.
func withoutRule(rules []string, name string) ([]string, int) {
	var out []string
	n := 0
	for _, r := range rules {
		if r == name {
			n++
			continue
		}
		out = append(out, r)
	}
	return out, n
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("the agent's file: %v", err)
	}
	return string(b)
}

func scriptInput(t *testing.T, r *sim.Rule, i int, field string) string {
	t.Helper()
	var in map[string]any
	if err := json.Unmarshal(r.Reply.ToolCalls[i].Input, &in); err != nil {
		t.Fatal(err)
	}
	s, ok := in[field].(string)
	if !ok {
		t.Fatalf("rule %s: tool call %d has no string %s", r.Name, i, field)
	}
	return s
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func fileUID(fi os.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
