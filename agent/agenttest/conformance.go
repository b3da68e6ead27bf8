package agenttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sim"
)

// The agent conformance suite: what every kind of agent does the same way,
// on every backend it runs on. agent/agents runs it for every registered
// kind (it builds them through the registry, as sessions do); a kind's own
// tests keep only what is particular to it.
//
// One scripted conversation, the same for every kind (the sim tells the
// kinds apart by the tools their requests offer):
//
//  1. "Task one": a bash command that waits for a file the test writes,
//     then writes fixed.txt; the turn ends with one turn.finished, its
//     last event, equal to the Outcome; emits are never concurrent. While
//     it runs, nothing in the box (environments, command lines, HOME,
//     /workspace, /tmp) holds the model's real key.
//  2. "Task two": a second turn in the same conversation.
//  3. "Task four": a bash command starting a process tree that never ends;
//     cancelling the turn's context ends it with turn.cancelled whose
//     reason is the cancel's cause, the tool call (if its end is told) as an
//     error, and the whole tree is gone within a second.
//  4. "Task five": the agent still works after a cancel.
//  5. State, Close: no process of the agent is left in the box.
//  6. A new box on the same workspace, the agent opened from State:
//     "Task three" gets the whole earlier conversation in its request.
//
// No event of any turn carries the key; every request reached the sim with
// it (added on the host for an agent whose model calls leave the box).

// ConformanceKey is the real key of the suite's model endpoint: it must
// reach the sim and nothing in or from the box.
const ConformanceKey = "sk-ant-conformance-9e8d7c6b5a4f3e2d1c0b-never-in-the-box"

// ConformanceScript is the suite's sim script.
const ConformanceScript = `
rules:
  - name: title
    when: {api: anthropic, system: "Generate a concise, sentence-case title"}
    reply: {text: '{"title": "Make fixed.txt"}', usage: {input_tokens: 150, output_tokens: 10}}
  - name: one-wait-opencode
    when: {api: anthropic, last_user: "Task one", turn: 1, tools: [bash, todowrite]}
    reply:
      tool_calls: [{name: bash, input: {command: "until [ -e go ]; do sleep 0.02; done; echo fixed > fixed.txt; echo released", description: "Wait for go"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: four-tree-opencode
    when: {api: anthropic, last_user: "Task four", tools: [bash, todowrite]}
    reply:
      tool_calls: [{name: bash, input: {command: "sh -c 'sleep 51337' & sleep 51338; echo never", description: "Never ends"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: one-wait-builtin
    when: {api: anthropic, last_user: "Task one", turn: 1, tools: [bash]}
    reply:
      tool_calls: [{name: bash, input: {command: "until [ -e go ]; do sleep 0.02; done; echo fixed > fixed.txt; echo released"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: four-tree-builtin
    when: {api: anthropic, last_user: "Task four", tools: [bash]}
    reply:
      tool_calls: [{name: bash, input: {command: "sh -c 'sleep 51337' & sleep 51338; echo never"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: one-wait
    when: {api: anthropic, last_user: "Task one", turn: 1, tools: [Bash]}
    reply:
      tool_calls: [{name: Bash, input: {command: "until [ -e go ]; do sleep 0.02; done; echo fixed > fixed.txt; echo released", description: "Wait for go"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: one-answer
    when: {api: anthropic, last_user: "Task one", turn: 2, tool_result: "released"}
    reply: {text: "Task one done.", usage: {input_tokens: 110, output_tokens: 5}}
  - name: two
    when: {api: anthropic, last_user: "Task two"}
    reply: {text: "Task two done.", usage: {input_tokens: 120, output_tokens: 5}}
  - name: three
    when: {api: anthropic, last_user: "Task three"}
    reply: {text: "I remember both tasks.", usage: {input_tokens: 130, output_tokens: 5}}
  - name: four-tree
    when: {api: anthropic, last_user: "Task four", tools: [Bash]}
    reply:
      tool_calls: [{name: Bash, input: {command: "sh -c 'sleep 51337' & sleep 51338; echo never", description: "Never ends"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: five
    when: {api: anthropic, last_user: "Task five"}
    reply: {text: "Still here.", usage: {input_tokens: 100, output_tokens: 5}}
`

// errConformanceCancel is the cause the suite cancels a turn with: the
// turn.cancelled event must carry it as its reason.
var errConformanceCancel = errors.New("cancelled by the conformance suite")

// Subject is an agent kind on a backend, for the suite.
type Subject struct {
	// Provider starts the boxes; Mounts is what a box of the kind needs.
	Provider sandbox.Provider
	Mounts   []sandbox.Mount
	// Open makes the agent in box (workspace "repo" at /workspace/repo),
	// its model "anthropic/claude-sonnet-4-5" at simURL (on the host) with
	// key, continuing state.
	Open func(ctx context.Context, box *sandbox.Sandbox, simURL, key string, state []byte) (agent.Agent, error)
}

// RunConformance runs the suite against s.
func RunConformance(t *testing.T, s Subject) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	script, err := sim.ParseScript("conformance.yaml", []byte(ConformanceScript))
	if err != nil {
		t.Fatal(err)
	}
	sm := sim.New(script)
	LogRequestsOnFailure(t, sm)
	srv := httptest.NewServer(sm)
	t.Cleanup(srv.Close)
	ws := Workspace(t, map[string]string{"README.md": "# conformance\n"})
	var all []event.Payload

	box := startSubjectBox(ctx, t, s, ws)
	ag, err := s.Open(ctx, box, srv.URL, ConformanceKey, nil)
	if err != nil {
		t.Fatalf("opening the agent: %v", err)
	}
	agentClosed := false
	t.Cleanup(func() {
		if !agentClosed {
			ag.Close(context.Background())
		}
	})

	// 1. A turn with a tool, watched while it runs.
	tt := startTurn(ctx, ag, "Task one: make fixed.txt")
	tt.rec.WaitFor(ctx, t, "tool.started (bash)", func(p event.Payload) bool {
		ts, ok := p.(event.ToolStarted)
		return ok && strings.EqualFold(ts.Tool, "bash")
	})
	scanBox(ctx, t, box, ConformanceKey)
	writeOwned(t, filepath.Join(ws, "go"), "")
	if f := tt.finished(t); f.Result != "Task one done." {
		t.Fatalf("turn one finished with %+v", f)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "fixed.txt")); err != nil || string(b) != "fixed\n" {
		t.Fatalf("fixed.txt after turn one: %q, %v", b, err)
	}
	all = append(all, tt.rec.All()...)

	// 2. A follow-up in the same conversation.
	tt = startTurn(ctx, ag, "Task two, after that")
	if f := tt.finished(t); f.Result != "Task two done." {
		t.Fatalf("turn two finished with %+v", f)
	}
	all = append(all, tt.rec.All()...)

	// 3. Cancel mid-tool: the process tree goes within a second.
	tctx, cancelTurn := context.WithCancelCause(ctx)
	tt = startTurn(tctx, ag, "Task four: run forever")
	tt.rec.WaitFor(ctx, t, "tool.started", func(p event.Payload) bool { _, ok := p.(event.ToolStarted); return ok })
	testbin.WaitFor(t, 30*time.Second, "the tool's process tree to run", func() bool {
		return len(ProcsWith("sleep", "51337")) > 0 && len(ProcsWith("sleep", "51338")) > 0
	})
	start := time.Now()
	cancelTurn(errConformanceCancel)
	out := tt.wait(t)
	if out.Cancelled == nil || out.Cancelled.Reason != errConformanceCancel.Error() {
		t.Fatalf("a cancelled turn ended with %+v, want turn.cancelled with the cancel's cause as its reason", out.Payload())
	}
	for _, p := range tt.rec.All() {
		if tf, ok := p.(event.ToolFinished); ok && !tf.IsError {
			t.Errorf("the interrupted tool call finished without an error: %+v", tf)
		}
	}
	testbin.WaitFor(t, time.Second-time.Since(start), "the cancelled tool's process tree to go", func() bool {
		return len(ProcsWith("sleep", "51337")) == 0 && len(ProcsWith("sleep", "51338")) == 0
	})
	t.Logf("cancel to process tree gone: %s", time.Since(start))
	all = append(all, tt.rec.All()...)

	// 4. It goes on after a cancel.
	tt = startTurn(ctx, ag, "Task five: still there?")
	if f := tt.finished(t); f.Result != "Still here." {
		t.Fatalf("turn five finished with %+v", f)
	}
	all = append(all, tt.rec.All()...)

	// 5. State, then Close: nothing of the agent is left running.
	state, err := ag.State()
	if err != nil || len(state) == 0 {
		t.Fatalf("State: %d bytes, %v", len(state), err)
	}
	if err := ag.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	agentClosed = true
	testbin.WaitFor(t, 10*time.Second, "the agent's processes in the box to go", func() bool { return len(boxProcs(ctx, t, box)) == 0 })
	if err := box.Destroy(ctx); err != nil {
		t.Fatal(err)
	}

	// 6. Resume from State in a new box.
	box = startSubjectBox(ctx, t, s, ws)
	ag2, err := s.Open(ctx, box, srv.URL, ConformanceKey, state)
	if err != nil {
		t.Fatalf("opening the agent from its state: %v", err)
	}
	defer ag2.Close(context.Background())
	tt = startTurn(ctx, ag2, "Task three: what did you do?")
	if f := tt.finished(t); f.Result != "I remember both tasks." {
		t.Fatalf("the resumed turn finished with %+v", f)
	}
	all = append(all, tt.rec.All()...)
	req := AnsweredOnce(t, sm, "three")
	for _, want := range []string{"Task one: make fixed.txt", "Task one done.", "Task two, after that", "Task two done."} {
		if !bytes.Contains(req.Body, []byte(want)) {
			t.Fatalf("the resumed turn's request lacks %q: the conversation was not resumed\n%.3000s", want, req.Body)
		}
	}

	// The key went to the model and nowhere else.
	for _, r := range sm.Requests() {
		if got := r.Header.Get("X-Api-Key"); got != ConformanceKey {
			t.Errorf("request %d (%s) reached the model with key %q, want the real one", r.Seq, r.Path, got)
		}
	}
	for _, p := range all {
		b, _ := json.Marshal(p)
		if bytes.Contains(b, []byte(ConformanceKey[:24])) {
			t.Fatalf("a %s event carries the key: %s", p.EventType(), b)
		}
	}
}

func startSubjectBox(ctx context.Context, t *testing.T, s Subject, ws string) *sandbox.Sandbox {
	t.Helper()
	sb, err := s.Provider.Start(ctx, sandbox.Spec{
		Workspaces: []sandbox.Workspace{{Name: "repo", HostPath: ws}},
		User:       sandbox.User{UID: sandbox.DefaultUID, GID: sandbox.DefaultGID},
		Mounts:     s.Mounts,
	})
	if err != nil {
		t.Fatalf("starting a box: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("destroying the box: %v", err)
		}
	})
	return sb
}

// runningTurn is a turn on its own goroutine, its events recorded with
// checks: emits never overlap, exactly one ending event, and it is last.
type runningTurn struct {
	rec     *Recorder
	out     chan agent.Outcome
	busy    atomic.Int32
	overlap atomic.Bool
	ends    atomic.Int32
	after   atomic.Int32 // events after the ending one
}

func startTurn(ctx context.Context, ag agent.Agent, prompt string) *runningTurn {
	tt := &runningTurn{rec: NewRecorder(), out: make(chan agent.Outcome, 1)}
	go func() {
		tt.out <- ag.Turn(ctx, prompt, func(p event.Payload) {
			if tt.busy.Add(1) != 1 {
				tt.overlap.Store(true)
			}
			defer tt.busy.Add(-1)
			if tt.ends.Load() > 0 {
				tt.after.Add(1)
			}
			switch p.(type) {
			case event.TurnFinished, event.TurnCancelled, event.TurnFailed:
				tt.ends.Add(1)
			}
			tt.rec.Emit(p)
		})
	}()
	return tt
}

// wait returns the turn's outcome once it is over, checking its events.
func (tt *runningTurn) wait(t *testing.T) agent.Outcome {
	t.Helper()
	var out agent.Outcome
	select {
	case out = <-tt.out:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the turn did not end in 3 minutes; events: %s", Types(tt.rec.All()))
	}
	evs := tt.rec.All()
	switch {
	case tt.overlap.Load():
		t.Fatal("emit was called concurrently")
	case tt.ends.Load() != 1:
		t.Fatalf("the turn emitted %d ending events, want 1: %s", tt.ends.Load(), Types(evs))
	case tt.after.Load() != 0:
		t.Fatalf("the turn emitted %d events after its end: %s", tt.after.Load(), Types(evs))
	case len(evs) == 0 || evs[0].EventType() != event.TypeTurnStarted:
		t.Fatalf("the turn does not start with turn.started: %s", Types(evs))
	}
	last, _ := json.Marshal(evs[len(evs)-1])
	want, _ := json.Marshal(out.Payload())
	if !bytes.Equal(last, want) {
		t.Fatalf("the Outcome %s is not the last event %s", want, last)
	}
	return out
}

func (tt *runningTurn) finished(t *testing.T) event.TurnFinished {
	t.Helper()
	out := tt.wait(t)
	if out.Finished == nil {
		t.Fatalf("the turn did not finish: %+v; events: %s", out.Payload(), Types(tt.rec.All()))
	}
	return *out.Finished
}

// scanBox looks, from inside the box, everywhere a process there could
// find a secret: every process's environment and command line, and the
// files under HOME, /workspace and /tmp.
func scanBox(ctx context.Context, t *testing.T, sb *sandbox.Sandbox, secret string) {
	t.Helper()
	var out, errb bytes.Buffer
	script := `for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do echo "== $f"; tr '\0' '\n' < "$f"; echo; done
find "$HOME" /workspace /tmp -type f -size -16M -exec cat {} + 2>/dev/null; echo scan-done`
	st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb, Timeout: time.Minute})
	if err != nil || !strings.Contains(out.String(), "scan-done") || st.Dropped > 0 {
		t.Fatalf("scanning the box: %v %v (%d bytes dropped)\n%s", st, err, st.Dropped, errb.String())
	}
	for _, part := range []string{secret, secret[:20], secret[len(secret)-20:]} {
		if strings.Contains(out.String(), part) {
			t.Fatalf("the key (%q) is in the box", part)
		}
	}
}

// boxProcs lists the processes in the box besides its agent (PID 1) and
// the listing itself.
func boxProcs(ctx context.Context, t *testing.T, sb *sandbox.Sandbox) []string {
	t.Helper()
	var out bytes.Buffer
	script := `for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = 1 ] || [ "$p" = $$ ] && continue; c=$(tr '\0' ' ' < $d/cmdline 2>/dev/null); [ -n "$c" ] && echo "$p $c"; done; true`
	if _, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", script}, Stdout: &out, Timeout: time.Minute}); err != nil {
		t.Fatalf("listing the box's processes: %v", err)
	}
	var procs []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if l != "" && !strings.Contains(l, "/proc/[0-9]*") {
			procs = append(procs, l)
		}
	}
	return procs
}

// ProcsWith lists the host's processes whose command line has every one
// of args.
func ProcsWith(args ...string) []string {
	var found []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		cmd := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		all := true
		for _, a := range args {
			hit := false
			for _, c := range cmd {
				if c == a || filepath.Base(c) == a {
					hit = true
				}
			}
			all = all && hit
		}
		if all {
			found = append(found, fmt.Sprintf("%s: %s", e.Name(), strings.Join(cmd, " ")))
		}
	}
	return found
}

func writeOwned(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		os.Chown(path, sandbox.DefaultUID, sandbox.DefaultGID)
	}
}
