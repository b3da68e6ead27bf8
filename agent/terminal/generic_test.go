package terminal

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/agent/agenttest"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
)

// bash is an interactive bash on the PTY whose prompt is the done pattern.
func bash(t *testing.T, sb *sandbox.Sandbox, extra func(*Config)) *Agent {
	t.Helper()
	cfg := Config{
		Box:         sb,
		Command:     []string{"bash", "--norc", "--noprofile", "-i"},
		Env:         []string{"PS1=harvest$ ", "PS2=> "},
		DonePattern: regexp.MustCompile(`harvest\$ $`),
		Logger:      testLogger(t),
	}
	if extra != nil {
		extra(&cfg)
	}
	a, err := New(context.Background(), cfg, nil)
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

// TestGenericShell: a generic CLI (bash) completes turns by its prompt (the
// done pattern): the command really ran in the workspace, the result is
// its output without the echo and the prompt, the raw bytes carry it too,
// and a follow-up turn types into the same shell (its variable is still
// set, its pid unchanged). A multi-line input runs as two commands.
func TestGenericShell(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := agenttest.Provider(t)
	ws := testbin.Workspace(t, sandbox.DefaultUID, sandbox.DefaultGID)
	sb := agenttest.StartBox(ctx, t, p, ws)
	a := bash(t, sb, nil)

	out, r := run(ctx, t, a, "X=harvest; echo $((6*7)) > answer.txt; echo the answer is $(cat answer.txt)")
	fin := mustFinish(t, out, r)
	if fin.Result != "the answer is 42" || fin.StopReason != StopDonePattern {
		t.Errorf("result %q (stop %q), want %q by %s", fin.Result, fin.StopReason, "the answer is 42", StopDonePattern)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "answer.txt")); err != nil || string(b) != "42\n" {
		t.Errorf("answer.txt = %q, %v: the command did not run in the workspace", b, err)
	}
	if !strings.Contains(string(r.raw()), "the answer is 42") {
		t.Errorf("the terminal output does not carry the answer:\n%q", r.raw())
	}
	pid := a.currentCLI().p.PID()

	out, r = run(ctx, t, a, "echo X is $X")
	if fin := mustFinish(t, out, r); fin.Result != "X is harvest" {
		t.Errorf("follow-up result %q, want %q (the same shell)", fin.Result, "X is harvest")
	}
	if got := a.currentCLI().p.PID(); got != pid {
		t.Errorf("the follow-up ran in pid %d, the first turn in %d", got, pid)
	}

	out, r = run(ctx, t, a, "echo one\necho two")
	if fin := mustFinish(t, out, r); !strings.Contains(fin.Result, "one") || !strings.HasSuffix(fin.Result, "two") {
		t.Errorf("multi-line result %q, want both commands' output", fin.Result)
	}
}

// TestGenericCancel: a turn cancelled while its command runs ends as
// turn.cancelled within a second or two (Ctrl-C, bash back at its prompt),
// the command is gone, and the next turn works in the same shell.
func TestGenericCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := agenttest.Provider(t)
	ws := testbin.Workspace(t, sandbox.DefaultUID, sandbox.DefaultGID)
	sb := agenttest.StartBox(ctx, t, p, ws)
	a := bash(t, sb, nil)
	if out, r := run(ctx, t, a, "echo warm"); out.Finished == nil {
		mustFinish(t, out, r)
	}
	pid := a.currentCLI().p.PID()

	tctx, tcancel := context.WithCancel(ctx)
	defer tcancel()
	r := newRecorder()
	done := make(chan struct{})
	wctx, wcancel := context.WithCancel(ctx)
	var cancelled time.Time
	go func() {
		defer close(done)
		// The command is running once it printed its marker (the echo of
		// the input shows it with quotes in the middle).
		if r.wait(wctx, func() bool { return strings.Contains(r.screenText(), "\nSTARTED") }) {
			cancelled = time.Now()
			tcancel()
		}
	}()
	out := a.Turn(tctx, "echo STAR''TED; sleep 600; echo finished", r.emit)
	wcancel()
	<-done
	if cancelled.IsZero() {
		t.Fatalf("the command never started; events:\n  %s", summarize(r.snapshot()))
	}
	checkShape(t, r.snapshot(), out)
	if out.Cancelled == nil {
		t.Fatalf("turn ended with %+v, want turn.cancelled; events:\n  %s", out.Payload(), summarize(r.snapshot()))
	}
	if d := time.Since(cancelled); d > 3*time.Second {
		t.Errorf("the cancel took %s", d)
	}
	if strings.Contains(r.screenText(), "\nfinished") {
		t.Errorf("the command finished despite the cancel")
	}

	out, r2 := run(ctx, t, a, "echo alive")
	if fin := mustFinish(t, out, r2); fin.Result != "alive" {
		t.Errorf("after the cancel: result %q, want alive", fin.Result)
	}
	if got := a.currentCLI().p.PID(); got != pid {
		t.Errorf("the shell was restarted (pid %d, was %d): Ctrl-C should have been enough", got, pid)
	}
}

// TestGenericExit: a CLI that exits during a turn ends it with
// turn.failed{cli_exited} naming its exit status; the next turn starts it
// again and works.
func TestGenericExit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := agenttest.Provider(t)
	ws := testbin.Workspace(t, sandbox.DefaultUID, sandbox.DefaultGID)
	sb := agenttest.StartBox(ctx, t, p, ws)
	a := bash(t, sb, nil)

	out, r := run(ctx, t, a, "echo bye; exit 3")
	if out.Failed == nil || out.Failed.Kind != event.FailCLIExited || !strings.Contains(out.Failed.Error, "exit status 3") {
		t.Fatalf("turn ended with %+v, want turn.failed{%s} with exit status 3; events:\n  %s", out.Payload(), event.FailCLIExited, summarize(r.snapshot()))
	}
	if !strings.Contains(out.Failed.Error, "bye") {
		t.Errorf("the error does not show the screen: %q", out.Failed.Error)
	}
	out, r = run(ctx, t, a, "echo back")
	if fin := mustFinish(t, out, r); fin.Result != "back" {
		t.Errorf("after the exit: result %q, want back", fin.Result)
	}
}

// TestGenericIdleTimeout: without a done pattern, the timeout fallback ends
// the turn once the CLI has printed nothing for IdleTimeout, as finished
// with stop reason idle_timeout and what it printed as the result. The
// python REPL also shows readiness without a pattern (quiet output).
func TestGenericIdleTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := agenttest.Provider(t)
	ws := testbin.Workspace(t, sandbox.DefaultUID, sandbox.DefaultGID)
	sb := agenttest.StartBox(ctx, t, p, ws)
	a, err := New(ctx, Config{
		Box: sb, Command: []string{"python3", "-q", "-i"}, IdleTimeout: time.Second,
		Logger: testLogger(t),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	start := time.Now()
	out, r := run(ctx, t, a, "print(6*7, 'from python')")
	fin := mustFinish(t, out, r)
	if fin.StopReason != StopIdle || !strings.HasPrefix(fin.Result, "42 from python") {
		t.Errorf("result %q stop %q, want 42 from python by %s", fin.Result, fin.StopReason, StopIdle)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("the turn ended after %s, before the idle timeout", d)
	}
}

// TestGenericCancelEscalates: a command that ignores the cancel keys (and
// a shell that ignores SIGINT) is ended by the ladder: Ctrl-C, SIGINT after
// CancelGrace, then SIGKILL of the tree; the turn is turn.cancelled and the
// next turn starts a new shell.
func TestGenericCancelEscalates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := agenttest.Provider(t)
	ws := testbin.Workspace(t, sandbox.DefaultUID, sandbox.DefaultGID)
	sb := agenttest.StartBox(ctx, t, p, ws)
	a := bash(t, sb, func(c *Config) { c.CancelGrace = 300 * time.Millisecond })
	if out, r := run(ctx, t, a, "echo warm"); out.Finished == nil {
		mustFinish(t, out, r)
	}
	pid := a.currentCLI().p.PID()

	tctx, tcancel := context.WithCancel(ctx)
	defer tcancel()
	r := newRecorder()
	done := make(chan struct{})
	wctx, wcancel := context.WithCancel(ctx)
	var cancelled time.Time
	go func() {
		defer close(done)
		if r.wait(wctx, func() bool { return strings.Contains(r.screenText(), "\nSTARTED") }) {
			cancelled = time.Now()
			tcancel()
		}
	}()
	out := a.Turn(tctx, "trap '' INT; echo STAR''TED; sleep 600", r.emit)
	wcancel()
	<-done
	checkShape(t, r.snapshot(), out)
	if out.Cancelled == nil {
		t.Fatalf("turn ended with %+v, want turn.cancelled; events:\n  %s", out.Payload(), summarize(r.snapshot()))
	}
	d := time.Since(cancelled)
	t.Logf("the ladder took %s", d.Round(time.Millisecond))
	if d > 300*time.Millisecond+2*signalGrace {
		t.Errorf("the ladder took %s", d)
	}
	if a.currentCLI() != nil {
		t.Errorf("the killed shell is still the agent's CLI")
	}
	out, r = run(ctx, t, a, "echo fresh")
	if fin := mustFinish(t, out, r); fin.Result != "fresh" {
		t.Errorf("after the kill: result %q, want fresh", fin.Result)
	}
	if got := a.currentCLI().p.PID(); got == pid {
		t.Errorf("the shell was not restarted (pid %d)", got)
	}
	checkClosed(ctx, t, a, sb)
}

// checkClosed closes the agent and checks that nothing it started in the
// box still runs.
func checkClosed(ctx context.Context, t *testing.T, a *Agent, sb *sandbox.Sandbox) {
	t.Helper()
	if err := a.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	procs, err := sb.Ps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.Exit == nil {
			t.Errorf("still running after Close: pid %d %q", p.PID, p.Args)
		}
	}
}
