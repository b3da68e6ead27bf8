package claudecode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/agenttest"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local"
	"github.com/harvest-dev/harvest/sim"
)

// The tests run the real thing: the pinned Claude Code CLI as the box user
// in a real local box (network none), talking to `harvest sim` served on a
// box listener, the way the session layer serves the model proxy.

const (
	testModel = "claude-sonnet-4-5"
	testKey   = "sk-ant-harvest-claudecode-test-token"
	// faultMount is where the fault tests mount their fault injector.
	faultMount = "/opt/harvest-fault"
)

// env is one test's provider, workspace, sim and fault injector.
type env struct {
	t      *testing.T
	prov   *local.Provider
	claude string // the CLI's path, the same in the box
	ws     string // host directory of workspace "repo"
	sim    *sim.Server
	faults string // host directory mounted at faultMount
}

func newEnv(t *testing.T) *env {
	t.Helper()
	claude := testbin.Claude(t)
	if !strings.HasPrefix(claude, testbin.NPMPrefix+"/") {
		testreq.Unavailable(t, testreq.CLIs, "claude is at %s; these tests mount %s into the box and need the CLI under it", claude, testbin.NPMPrefix)
	}
	e := &env{t: t, claude: claude, prov: agenttest.Provider(t)}
	script, err := sim.LoadScript(filepath.Join("testdata", "script.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	e.sim = sim.New(script)
	e.ws = agenttest.Workspace(t, map[string]string{"hello.txt": "helo, world\n"})

	e.faults = testbin.TempDir(t)
	if err := os.Chmod(e.faults, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join("testdata", "fault.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.faults, "claude"), src, 0o755); err != nil {
		t.Fatal(err)
	}
	e.setFault("")
	agenttest.LogRequestsOnFailure(t, e.sim)
	return e
}

// setFault sets the fault injector's mode ("" runs the real CLI).
func (e *env) setFault(mode string) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.faults, "mode"), []byte(mode), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// box starts a box on the workspace with the CLIs and the fault injector
// mounted, serves the sim on a listener in it, and returns the box and the
// sim's in-box URL. Both end with the test.
func (e *env) box(ctx context.Context) (*sandbox.Sandbox, string) {
	e.t.Helper()
	sb := agenttest.StartBox(ctx, e.t, e.prov, e.ws,
		sandbox.Mount{HostPath: testbin.NPMPrefix, BoxPath: testbin.NPMPrefix},
		sandbox.Mount{HostPath: e.faults, BoxPath: faultMount})
	return sb, agenttest.ServeIn(ctx, e.t, sb, e.sim)
}

// config is the agent's configuration for a box.
func (e *env) config(sb *sandbox.Sandbox, url string) Config {
	return Config{
		Box: sb, Workdir: sb.WorkspacePath("repo"), CLI: e.claude,
		ModelURL: url, ModelKey: testKey, Model: testModel,
		SessionID: "test-" + strings.ReplaceAll(e.t.Name(), "/", "-"),
		Logger:    slog.New(slog.NewTextHandler(testWriter{e.t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// newAgent makes an agent, closed when the test ends.
func (e *env) newAgent(ctx context.Context, cfg Config, state []byte) *Agent {
	e.t.Helper()
	a, err := New(ctx, cfg, state)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
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

// conversation is the text of a model request's messages and system
// prompt, to look for earlier exchanges in.
func conversation(t *testing.T, r sim.Request) (system, messages string) {
	t.Helper()
	var body struct {
		System   json.RawMessage `json:"system"`
		Messages json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatalf("request #%d: %v", r.Seq, err)
	}
	return string(body.System), string(body.Messages)
}

// turn runs one turn and checks the contract: TurnStarted first, exactly
// one outcome, last, equal to the one returned.
func turnOf(ctx context.Context, t *testing.T, a agent.Agent, prompt string) (agent.Outcome, []event.Payload) {
	t.Helper()
	rec := agenttest.NewRecorder()
	out := a.Turn(ctx, prompt, rec.Emit)
	evs := rec.All()
	checkContract(t, out, evs)
	return out, evs
}

func checkContract(t *testing.T, out agent.Outcome, evs []event.Payload) {
	t.Helper()
	if len(evs) < 2 {
		t.Fatalf("the turn emitted %s", types(evs))
	}
	if _, ok := evs[0].(event.TurnStarted); !ok {
		t.Errorf("first event %s, want turn.started", evs[0].EventType())
	}
	outcomes := 0
	for _, p := range evs {
		switch p.(type) {
		case event.TurnFinished, event.TurnCancelled, event.TurnFailed:
			outcomes++
		}
	}
	if outcomes != 1 {
		t.Errorf("%d outcome events, want 1: %s", outcomes, types(evs))
	}
	if last := evs[len(evs)-1]; fmt.Sprint(last) != fmt.Sprint(out.Payload()) {
		t.Errorf("last event %#v, want the outcome %#v", last, out.Payload())
	}
	started := map[string]bool{}
	for _, p := range evs {
		switch e := p.(type) {
		case event.ToolStarted:
			started[e.CallID] = true
		case event.ToolFinished:
			if !started[e.CallID] {
				t.Errorf("tool.finished for %s, which did not start", e.CallID)
			}
			delete(started, e.CallID)
		}
	}
	if len(started) > 0 {
		t.Errorf("tool calls that never finished: %v", started)
	}
}

func types(evs []event.Payload) string {
	var s []string
	for _, p := range evs {
		s = append(s, string(p.EventType()))
	}
	return strings.Join(s, " ")
}

func finished(t *testing.T, out agent.Outcome, evs []event.Payload) *event.TurnFinished {
	t.Helper()
	if out.Finished == nil {
		t.Fatalf("the turn did not finish: %#v; events: %s", out.Payload(), types(evs))
	}
	return out.Finished
}

// boxProcesses lists the command lines of the box's processes.
func boxProcesses(ctx context.Context, t *testing.T, sb *sandbox.Sandbox) string {
	t.Helper()
	var out strings.Builder
	st, err := sb.Run(ctx, &sandbox.Cmd{
		Args:   []string{"sh", "-c", `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f"; echo; done 2>/dev/null`},
		Stdout: &out,
	})
	if err != nil || !st.Success() {
		t.Fatalf("listing the box's processes: %v %v", st, err)
	}
	return out.String()
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var errTestCancel = errors.New("the test cancelled the turn")
