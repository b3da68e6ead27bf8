package terminal

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
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

const (
	testModel = "claude-sonnet-4-5"
	testKey   = "sk-ant-harvest-terminal-test-token"
)

// claudeEnv is a Claude Code test's provider, workspace and sim.
type claudeEnv struct {
	t      *testing.T
	prov   *local.Provider
	claude string
	ws     string
	sim    *sim.Server
}

func newClaudeEnv(t *testing.T) *claudeEnv {
	t.Helper()
	claude := testbin.Claude(t)
	if !strings.HasPrefix(claude, testbin.NPMPrefix+"/") {
		testreq.Unavailable(t, testreq.CLIs, "claude is at %s; these tests mount %s into the box and need the CLI under it", claude, testbin.NPMPrefix)
	}
	e := &claudeEnv{t: t, claude: claude, prov: agenttest.Provider(t)}
	script, err := sim.LoadScript(filepath.Join("testdata", "claude.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	e.sim = sim.New(script)
	e.ws = agenttest.Workspace(t, map[string]string{"hello.txt": "helo, world\n"})
	agenttest.LogRequestsOnFailure(t, e.sim)
	return e
}

// box starts a box on the workspace with the npm prefix mounted, serves the
// sim on a listener in it (as the session layer serves the model proxy) and
// returns the box and the sim's in-box URL.
func (e *claudeEnv) box(ctx context.Context) (*sandbox.Sandbox, string) {
	t := e.t
	t.Helper()
	sb := agenttest.StartBox(ctx, t, e.prov, e.ws, sandbox.Mount{HostPath: testbin.NPMPrefix, BoxPath: testbin.NPMPrefix})
	return sb, agenttest.ServeIn(ctx, t, sb, e.sim)
}

func (e *claudeEnv) agent(ctx context.Context, sb *sandbox.Sandbox, url string, state []byte) *Agent {
	t := e.t
	t.Helper()
	a, err := New(ctx, Config{
		Box: sb, Workdir: "/workspace/repo", CLI: e.claude,
		ModelURL: url, ModelKey: testKey, Model: testModel,
		Logger: testLogger(t),
	}, state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return a
}

// request returns the sim's last request answered by rule.
func (e *claudeEnv) request(rule string) *sim.Request {
	e.t.Helper()
	reqs := e.sim.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Rule == rule {
			return &reqs[i]
		}
	}
	e.t.Fatalf("the sim answered no request with rule %q", rule)
	return nil
}

// checkRequests fails on any request the script did not answer.
func (e *claudeEnv) checkRequests() {
	e.t.Helper()
	for _, r := range e.sim.Requests() {
		if r.Path == "/" && r.Method == http.MethodHead {
			continue // Claude Code's connectivity probe
		}
		if r.Status != http.StatusOK {
			e.t.Errorf("sim request #%d %s %s got %d: %s", r.Seq, r.Method, r.Path, r.Status, r.Error)
		}
		if got := r.Header.Get("x-api-key"); got != testKey {
			e.t.Errorf("sim request #%d sent key %q, want the configured %q", r.Seq, got, testKey)
		}
	}
}

func answer(t *testing.T, e *claudeEnv, rule string) string {
	t.Helper()
	script, err := sim.LoadScript(filepath.Join("testdata", "claude.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range script.Rules {
		if r.Name == rule {
			return r.Reply.Text
		}
	}
	t.Fatalf("no rule %q", rule)
	return ""
}

// TestClaudeCode drives the real Claude Code 2.1.197 in interactive mode on
// the box's PTY, against harvest sim:
//
//  1. the scripted task (read, edit, run a command, answer) completes:
//     tool.started/finished from the hooks, the answer as assistant.message
//     and turn.finished's result (from the Stop hook), the answer in the
//     terminal output, the file changed in the workspace;
//  2. a multi-line follow-up goes to the same CLI and arrives whole;
//  3. a cancel while a command runs ends the turn as turn.cancelled within
//     a few seconds (Esc), closes the tool call, kills the command, and the
//     same CLI takes the next turn;
//  4. the state resumes the conversation in a new box (--resume: the sim
//     sees the first task in the new box's request);
//  5. Claude Code exiting mid-turn (/exit) ends the turn with
//     turn.failed{cli_exited}; the next turn restarts it with --resume and
//     the conversation goes on;
//  6. a slash command (/compact: no UserPromptSubmit or Stop hook) ends
//     when the TUI is idle again, its message read off the screen;
//  7. a new agent on the same box (a Harvest restart) ends the CLI and the
//     tail the old one left running and resumes the conversation.
func TestClaudeCode(t *testing.T) {
	e := newClaudeEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb, url := e.box(ctx)
	a := e.agent(ctx, sb, url, nil)

	// 1. The scripted task.
	out, r := run(ctx, t, a, "Task one: fix the greeting in hello.txt, show the file, and tell me what it says.")
	fin := mustFinish(t, out, r)
	want := answer(t, e, "one-answer")
	if fin.Result != want || fin.StopReason != StopHook {
		t.Errorf("result %q (stop %q), want %q by %s", fin.Result, fin.StopReason, want, StopHook)
	}
	checkTools(t, r.snapshot(), []string{"Read", "Edit", "Bash"}, "hello, world")
	if !hasEvent(r.snapshot(), func(p event.Payload) bool { m, ok := p.(event.AssistantMessage); return ok && m.Text == want }) {
		t.Errorf("no assistant.message with the answer; events:\n  %s", summarize(r.snapshot()))
	}
	if !strings.Contains(r.screenText(), "ANSWER-ONE") {
		raw := r.raw()
		i := bytes.Index(raw, []byte("ANSWER"))
		t.Errorf("the terminal output does not show the answer (raw at %d: %q)", i, raw[max(i-600, 0):min(i+200, len(raw))])
	}
	if b, err := os.ReadFile(filepath.Join(e.ws, "hello.txt")); err != nil || string(b) != "hello, world\n" {
		t.Errorf("hello.txt = %q, %v: the edit did not happen", b, err)
	}
	pid := a.currentCLI().p.PID()

	// 2. A multi-line follow-up in the same CLI.
	out, r = run(ctx, t, a, "Task two\nsecond line\n    indented third")
	if fin := mustFinish(t, out, r); fin.Result != answer(t, e, "two") {
		t.Errorf("follow-up result %q", fin.Result)
	}
	if got := a.currentCLI().p.PID(); got != pid {
		t.Errorf("the follow-up ran in pid %d, the first turn in %d", got, pid)
	}

	// 3. Cancel while the command runs.
	tctx, tcancel := context.WithCancelCause(ctx)
	rc := newRecorder()
	var cancelled time.Time
	done := make(chan struct{})
	wctx, wcancel := context.WithCancel(ctx)
	go func() {
		defer close(done)
		started := func() bool {
			_, err := os.Stat(filepath.Join(e.ws, "started.txt"))
			return err == nil && hasEvent(rc.snapshot(), func(p event.Payload) bool { s, ok := p.(event.ToolStarted); return ok && s.Tool == "Bash" })
		}
		if rc.wait(wctx, started) {
			cancelled = time.Now()
			tcancel(errUserCancel)
		}
	}()
	out = a.Turn(tctx, "Task three: wait for the release.", rc.emit)
	wcancel()
	<-done
	checkShape(t, rc.snapshot(), out)
	if out.Cancelled == nil || out.Cancelled.Reason != errUserCancel.Error() {
		t.Fatalf("turn ended with %+v, want turn.cancelled (%q); events:\n  %s\nscreen:\n%s", out.Payload(), errUserCancel, summarize(rc.snapshot()), rc.screenText())
	}
	t.Logf("cancel took %s", time.Since(cancelled).Round(time.Millisecond))
	if d := time.Since(cancelled); d > 5*time.Second {
		t.Errorf("the cancel took %s", d)
	}
	checkTools(t, rc.snapshot(), []string{"Bash"}, "")
	if st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "ps -eo args | grep -c '[r]elease.txt'"}}); err != nil || st.Code != 1 {
		t.Errorf("the cancelled command still runs (grep: %v %v)", st, err)
	}
	out, r = run(ctx, t, a, "Task four: are you still there?")
	if fin := mustFinish(t, out, r); fin.Result != answer(t, e, "four") {
		t.Errorf("after the cancel: result %q", fin.Result)
	}
	if got := a.currentCLI().p.PID(); got != pid {
		t.Errorf("Claude Code was restarted by the cancel (pid %d, was %d): Esc should have been enough", got, pid)
	}

	// 4. Suspend and resume in a new box.
	state, err := a.State()
	if err != nil {
		t.Fatal(err)
	}
	var st claudeState
	if err := json.Unmarshal(state, &st); err != nil || st.SessionID == "" || !bytes.Contains(st.Transcript, []byte("Task one")) {
		t.Fatalf("state: %v; session %q, %d transcript bytes", err, st.SessionID, len(st.Transcript))
	}
	checkClosed(ctx, t, a, sb)
	sb2, url2 := e.box(ctx)
	a2 := e.agent(ctx, sb2, url2, state)
	out, r = run(ctx, t, a2, "Task five: what did you fix?")
	if fin := mustFinish(t, out, r); fin.Result != answer(t, e, "five") {
		t.Errorf("after resuming: result %q", fin.Result)
	}
	if body := string(e.request("five").Body); !strings.Contains(body, "Task one") || !strings.Contains(body, "ANSWER-FOUR") {
		t.Errorf("the resumed conversation lacks the earlier turns; request body:\n%.2000s", body)
	}
	if got := a2.SessionID(); got != st.SessionID {
		t.Errorf("resumed session %q, saved %q", got, st.SessionID)
	}

	// 5. Claude Code exits mid-turn.
	out, r = run(ctx, t, a2, "/exit")
	if out.Failed == nil || out.Failed.Kind != event.FailCLIExited {
		t.Fatalf("/exit: turn ended with %+v, want turn.failed{%s}; events:\n  %s", out.Payload(), event.FailCLIExited, summarize(r.snapshot()))
	}
	out, r = run(ctx, t, a2, "Task six: still with me?")
	if fin := mustFinish(t, out, r); fin.Result != answer(t, e, "six") {
		t.Errorf("after the exit: result %q", fin.Result)
	}
	if body := string(e.request("six").Body); !strings.Contains(body, "Task five") {
		t.Errorf("the restarted CLI lost the conversation; request body:\n%.2000s", body)
	}

	// 6. A slash command: no UserPromptSubmit hook; done when the TUI is idle again.
	out, r = run(ctx, t, a2, "/compact")
	fin = mustFinish(t, out, r)
	if fin.StopReason != StopPrompt || !strings.HasPrefix(fin.Result, "Compacted") {
		t.Errorf("/compact: stop %q result %q, want %s and Claude Code's message; screen:\n%s", fin.StopReason, fin.Result, StopPrompt, r.screenText())
	}
	e.request("summary")

	// 7. A new agent on the same box (Harvest restarted) ends the CLI and
	// the tail the old one left, and goes on with the conversation.
	state, err = a2.State()
	if err != nil {
		t.Fatal(err)
	}
	old := a2.currentCLI()
	a3 := e.agent(ctx, sb2, url2, state)
	procs, err := sb2.Ps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.Exit == nil && (p.PID == old.p.PID() || p.Args[0] == "tail") && p.Started.Before(old.started) {
			t.Errorf("the old agent's process still runs: pid %d %q", p.PID, p.Args)
		}
	}
	out, r = run(ctx, t, a3, "Task six: and now?")
	if fin := mustFinish(t, out, r); fin.Result != answer(t, e, "six") {
		t.Errorf("after the takeover: result %q", fin.Result)
	}
	// The old agent is gone with the Harvest that ran it: drop it without
	// Close (its process handle was taken over and never reports an exit).
	old.release()
	a2.closed = true
	checkClosed(ctx, t, a3, sb2)
	e.checkRequests()
}

var errUserCancel = errorString("the user pressed stop")

type errorString string

func (e errorString) Error() string { return string(e) }

func hasEvent(evs []event.Payload, f func(event.Payload) bool) bool {
	for _, e := range evs {
		if f(e) {
			return true
		}
	}
	return false
}

// checkTools checks that the tools started in order, each finished once
// after it started, and that the last one's output contains lastOutput
// (when given).
func checkTools(t *testing.T, evs []event.Payload, tools []string, lastOutput string) {
	t.Helper()
	var started []string
	open := map[string]string{}
	var last event.ToolFinished
	for _, e := range evs {
		switch p := e.(type) {
		case event.ToolStarted:
			if p.CallID == "" {
				t.Errorf("tool.started without a call id: %+v", p)
			}
			started = append(started, p.Tool)
			open[p.CallID] = p.Tool
		case event.ToolFinished:
			if _, ok := open[p.CallID]; !ok {
				t.Errorf("tool.finished for call %q that did not start (or finished twice)", p.CallID)
			}
			delete(open, p.CallID)
			last = p
		}
	}
	if strings.Join(started, ",") != strings.Join(tools, ",") {
		t.Errorf("tools started %q, want %q", started, tools)
	}
	if len(open) > 0 {
		t.Errorf("tool calls never finished: %v", open)
	}
	if lastOutput != "" && !strings.Contains(last.Output, lastOutput) {
		t.Errorf("the last tool's output %q does not contain %q", last.Output, lastOutput)
	}
}
