package opencode

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/agent/agenttest"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local"
	"github.com/harvest-dev/harvest/sim"
)

// The tests run the real thing: the pinned OpenCode CLI as the box user in
// a real local box (network none), reached only through Sandbox.Dial,
// talking to `harvest sim` served on a box listener, the way the session
// layer serves the model proxy.

const (
	testModel = "sim-coder"
	testKey   = "harvest-session-opencode-test-token"
)

// env is one test's provider, workspace and sim.
type env struct {
	t        *testing.T
	prov     *local.Provider
	opencode string // the CLI's path, the same in the box
	ws       string // host directory of workspace "repo"
	sim      *sim.Server
}

func newEnv(t *testing.T) *env {
	t.Helper()
	oc := testbin.OpenCode(t)
	if !strings.HasPrefix(oc, testbin.NPMPrefix+"/") {
		testreq.Unavailable(t, testreq.CLIs, "opencode is at %s; these tests mount %s into the box and need the CLI under it", oc, testbin.NPMPrefix)
	}
	e := &env{t: t, opencode: oc, prov: agenttest.Provider(t)}
	script, err := sim.LoadScript(filepath.Join("testdata", "script.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	e.sim = sim.New(script)
	e.ws = agenttest.Workspace(t, map[string]string{"README.md": "# a repository\n"})
	agenttest.LogRequestsOnFailure(t, e.sim)
	return e
}

// box starts a box on the workspace with the CLIs mounted, makes the
// workspace a git repository (as sessions have), serves the sim on a
// listener in it, and returns the box and the sim's in-box URL. Both end
// with the test.
func (e *env) box(ctx context.Context) (*sandbox.Sandbox, string) {
	e.t.Helper()
	sb := agenttest.StartBox(ctx, e.t, e.prov, e.ws, sandbox.Mount{HostPath: testbin.NPMPrefix, BoxPath: testbin.NPMPrefix})
	e.run(ctx, sb, "test -d .git || { git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm init; }")
	return sb, agenttest.ServeIn(ctx, e.t, sb, e.sim)
}

// run runs a shell script in the box's workspace and returns its output;
// it fails the test if the script fails.
func (e *env) run(ctx context.Context, sb *sandbox.Sandbox, script string) string {
	e.t.Helper()
	var out testbin.Buffer
	st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", script}, Dir: sb.WorkspacePath("repo"), Stdout: &out, Stderr: &out})
	if err != nil || !st.Success() {
		e.t.Fatalf("%s: %v %v: %s", script, st, err, out.String())
	}
	return out.String()
}

// config is the agent's configuration for a box.
func (e *env) config(sb *sandbox.Sandbox, url string) Config {
	return Config{
		Box: sb, Workdir: sb.WorkspacePath("repo"), CLI: e.opencode,
		ModelURL: url, ModelKey: testKey, Model: testModel,
		SessionID: "test-" + strings.ReplaceAll(e.t.Name(), "/", "-"),
		Logger:    slog.New(slog.NewTextHandler(testWriter{e.t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// newAgent makes an agent, closed when the test ends.
func (e *env) newAgent(ctx context.Context, cfg Config, state []byte) *Agent {
	e.t.Helper()
	start := time.Now()
	a, err := New(ctx, cfg, state)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	e.t.Logf("New: OpenCode %s ready in %v, session %s", a.Version(), time.Since(start).Round(time.Millisecond), a.Session())
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			e.t.Errorf("Close: %v", err)
		}
	})
	return a
}

// requests returns the sim's requests answered by rule.
func (e *env) requests(rule string) []sim.Request { return agenttest.Answered(e.sim, rule) }

// request returns the one request answered by rule.
func (e *env) request(rule string) sim.Request {
	e.t.Helper()
	return agenttest.AnsweredOnce(e.t, e.sim, rule)
}

// messages is the text of a model request's messages (OpenAI shape), to
// look for earlier exchanges in.
func messages(t *testing.T, r sim.Request) string {
	t.Helper()
	var body struct {
		Messages json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatalf("request #%d: %v", r.Seq, err)
	}
	return string(body.Messages)
}

// types lists the events' types, compactly.
func types(ps []event.Payload) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(string(p.EventType()))
		switch v := p.(type) {
		case event.ToolStarted:
			fmt.Fprintf(&b, "(%s)", v.Tool)
		case event.ToolFinished:
			fmt.Fprintf(&b, "(%s)", v.Tool)
		case event.TurnFailed:
			fmt.Fprintf(&b, "(%s: %s)", v.Kind, v.Error)
		}
	}
	return b.String()
}

// runTurn runs one turn, failing the test unless it finishes.
func runTurn(ctx context.Context, t *testing.T, a *Agent, prompt string) (*event.TurnFinished, []event.Payload) {
	t.Helper()
	rec := agenttest.NewRecorder()
	start := time.Now()
	out := a.Turn(ctx, prompt, rec.Emit)
	t.Logf("turn %q: %v", prompt, time.Since(start).Round(time.Millisecond))
	checkOutcome(t, out.Payload(), rec.All())
	if out.Finished == nil {
		t.Fatalf("turn %q did not finish: %#v; events: %s", prompt, out.Payload(), types(rec.All()))
	}
	return out.Finished, rec.All()
}

// checkOutcome: a turn starts with turn.started and ends with its outcome,
// which is emitted once, last.
func checkOutcome(t *testing.T, out event.Payload, events []event.Payload) {
	t.Helper()
	if len(events) < 2 {
		t.Fatalf("events %s: want at least turn.started and the outcome", types(events))
	}
	if _, ok := events[0].(event.TurnStarted); !ok {
		t.Errorf("first event %s, want turn.started", events[0].EventType())
	}
	if last := events[len(events)-1]; last != out && fmt.Sprint(last) != fmt.Sprint(out) {
		t.Errorf("last event %#v, want the outcome %#v", last, out)
	}
	for _, p := range events[:len(events)-1] {
		switch p.(type) {
		case event.TurnFinished, event.TurnCancelled, event.TurnFailed:
			t.Errorf("an outcome before the last event: %s", types(events))
		}
	}
}

// boxProcs lists the command lines of the processes in the box.
func (e *env) boxProcs(ctx context.Context, sb *sandbox.Sandbox) string {
	return e.run(ctx, sb, `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f 2>/dev/null; echo; done`)
}

// checkClosed closes a and checks that nothing of it is left: no
// goroutine of this package or of a forwarded connection on the host, no
// dialed connection in the box's agent, no OpenCode process in the box.
func (e *env) checkClosed(ctx context.Context, a *Agent, sb *sandbox.Sandbox) {
	t := e.t
	t.Helper()
	if err := a.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	var last string
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, err := sb.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		buf := make([]byte, 1<<22)
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if inPackageCode(g) || strings.Contains(g, "harvest/sandbox.(*boxConn)") {
				left = append(left, g)
			}
		}
		procs := e.boxProcs(ctx, sb)
		if info.Forwards == 0 && len(left) == 0 && !strings.Contains(procs, "opencode") {
			return
		}
		last = fmt.Sprintf("%d forwarded connections in the box; processes:\n%s\ngoroutines:\n%s", info.Forwards, procs, strings.Join(left, "\n\n"))
		if time.Now().After(deadline) {
			t.Fatalf("after Close: %s", last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inPackageCode: a goroutine stack has a frame in this package's own code
// (not its tests).
func inPackageCode(stack string) bool {
	for _, l := range strings.Split(stack, "\n") {
		l = strings.TrimSpace(l)
		if strings.Contains(l, "/agent/opencode/") && !strings.Contains(l, "_test.go:") {
			return true
		}
	}
	return false
}

// testWriter sends the agent's log to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
