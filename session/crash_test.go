package session

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sim"
	"github.com/harvest-dev/harvest/store"
)

// A crash, for real: a child process (this test binary, running
// TestCrashChild) runs a Manager on the test's store, sandboxes and sim,
// and is killed with SIGKILL in the middle of a turn. A new Manager on the
// same store recovers:
//
//   - session A was in a turn (a bash process tree) with two messages
//     queued: the turn is marked interrupted, its old box (and the tree)
//     destroyed, and the queued messages delivered in order in a new box;
//   - session B was idle: its box is reattached, not replaced;
//   - session C was suspended: it stays so, with no box;
//   - a box named for session A that no session owns (a crash between
//     starting a box and storing its handle) is destroyed; one named for a
//     session this store does not know (another server's) is left alone;
//   - every session's event seqs are 1..N with no gap.
func TestCrashRecovery(t *testing.T) { testCrashRecovery(t) }

func testCrashRecovery(t *testing.T, opts ...envOpt) {
	e := newEnv(t, append(opts, withoutManager)...)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
	cmd.Env = append(os.Environ(),
		"HARVEST_SESSION_CRASH_CHILD=1",
	)
	cmd.Env = append(cmd.Env, e.Environ()...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	ready := make(chan []string, 1)
	readerDone := make(chan struct{})
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
		<-readerDone
	})
	go func() {
		defer close(readerDone)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 6 && f[0] == "READY" {
				ready <- f[1:]
				break
			}
		}
		close(ready)
		for sc.Scan() {
		}
	}()
	var a, b, c, bBox, d string
	select {
	case f, ok := <-ready:
		if !ok {
			t.Fatalf("the child exited without getting ready: %v", cmd.Wait())
		}
		a, b, c, bBox, d = f[0], f[1], f[2], f[3], f[4]
	case <-time.After(stacktest.WaitTimeout):
		t.Fatal("the child did not get ready")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed = true
	_ = cmd.Wait()

	// The child's boxes outlive it; its turn's process tree runs on.
	if len(testbin.ProcsWithArgs("sleep", "31337")) == 0 {
		t.Fatal("session A's tool process died with the child: the test proves nothing")
	}
	// A box of session A that nobody owns.
	ctx := testbin.Context(t)
	orphan, err := e.Local.Start(ctx, sandbox.Spec{ID: newBoxID(a)})
	if err != nil {
		t.Fatal(err)
	}
	orphan.Close()
	// A box of another server sharing the run dir: a session this store
	// does not have. Not ours to reap.
	foreign, err := e.Local.Start(ctx, sandbox.Spec{ID: newBoxID(newSessionID())})
	if err != nil {
		t.Fatal(err)
	}
	foreign.Close()

	e.open()
	queued, err := e.st.Messages(ctx, a, store.MessageQueued)
	if err != nil {
		t.Fatal(err)
	}
	if len(queued) != 2 || queued[0].Text != "msg a1" || queued[1].Text != "msg a2" {
		t.Fatalf("session A's queue after the crash: %+v, want msg a1, msg a2", queued)
	}
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a, b, c} {
		if _, err := e.m.Get(ctx, "", id); err != nil {
			t.Fatalf("session %s after the crash: %v", id, err)
		}
	}

	wa := e.watch(a)
	f := stacktest.Typed[event.TurnFailed](wa, "t1", nil)
	if f.Kind != "interrupted" {
		t.Fatalf("A's t1: %+v, want kind interrupted", f)
	}
	for i, turn := range []string{"t2", "t3"} {
		d := stacktest.Typed[event.MessageDelivered](wa, turn, nil)
		if d.MessageID != queued[i].ID {
			t.Fatalf("A's %s took %s, want %s", turn, d.MessageID, queued[i].ID)
		}
		wa.Finished(turn)
	}
	testbin.WaitFor(t, 10*time.Second, "the interrupted turn's processes are gone", func() bool { return len(testbin.ProcsWithArgs("sleep", "31337")) == 0 })

	// D's interrupted turn kept its first step: the conversation (the next
	// turn's request carries it) and the step's usage.
	wd := e.watch(d)
	if f := stacktest.Typed[event.TurnFailed](wd, "t1", nil); f.Kind != "interrupted" || f.Usage.InputTokens != 100 || !strings.Contains(f.Error, "up to its last finished step") {
		t.Fatalf("D's t1: %+v, want interrupted, charged its first step (100 input tokens)", f)
	}
	wd.State(store.StateIdle)
	if s := e.get(d); s.Usage.InputTokens != 100 || s.CostUSD <= 0 {
		t.Errorf("D after recovery: usage %+v, $%v; want its first step's", s.Usage, s.CostUSD)
	}
	e.send(d, "msg d2", "")
	wd.Finished("t2")
	var last sim.Request
	for _, r := range e.Sim.Load().Requests() {
		if bytes.Contains(r.Body, []byte("msg d2")) {
			last = r
		}
	}
	for _, want := range []string{"step task", "echo step-one-output", "step-one-output\\n[exit code 0]"} {
		if !bytes.Contains(last.Body, []byte(want)) {
			t.Errorf("D's turn after the crash was not sent %q: the conversation was lost\n%.2000s", want, last.Body)
		}
	}
	testbin.WaitFor(t, 10*time.Second, "D's interrupted tool is gone", func() bool { return len(testbin.ProcsWithArgs("sleep", "31339")) == 0 })

	wb := e.watch(b)
	e.send(b, "msg b2", "")
	wb.Finished("t2")
	if h := handleOf(t, e, b); h != bBox {
		t.Fatalf("B runs in box %s, want its old box %s reattached", h, bBox)
	}
	if s := e.get(c); s.State != store.StateSuspended || s.Sandbox != nil {
		t.Fatalf("C after recovery: %s, box %s; want suspended with no box", s.State, s.Sandbox)
	}

	want := []string{handleOf(t, e, a), bBox, foreign.ID(), handleOf(t, e, d)}
	slices.Sort(want)
	if got := e.Boxes(); !slices.Equal(got, want) {
		t.Fatalf("boxes after recovery: %v, want only the sessions' %v", got, want)
	}
	for _, id := range []string{a, b, c, d} {
		stacktest.CheckGapless(t, e.st, id)
	}
}

func handleOf(t testing.TB, e *env, id string) string {
	t.Helper()
	s, err := e.st.GetSession(testbin.Context(t), id)
	if err != nil {
		t.Fatal(err)
	}
	h, err := decodeHandle(s.Sandbox)
	if err != nil {
		t.Fatal(err)
	}
	return h.ID
}

// TestCrashChild is TestCrashRecovery's victim: it sets sessions up, says
// READY with their ids and waits to be killed.
func TestCrashChild(t *testing.T) {
	if os.Getenv("HARVEST_SESSION_CRASH_CHILD") == "" {
		t.Skip("run by TestCrashRecovery in a child process")
	}
	s, ok := stacktest.Inherit(t, tempRoots)
	if !ok {
		t.Fatal("HARVEST_SESSION_CRASH_CHILD is set, but not the parent's stack")
	}
	e := &env{Stack: s}
	e.open()

	// C: suspended (its idle timeout is shorter than anyone's).
	c := e.create("msg c", func(r *CreateRequest) { r.Limits.IdleTimeout = time.Minute })
	wc := e.watch(c.ID)
	wc.IdleAfter("t1")
	e.Clock.Advance(time.Minute)
	wc.State(store.StateSuspended)

	// B: idle in its box.
	b := e.create("msg b")
	wb := e.watch(b.ID)
	wb.IdleAfter("t1")

	// A: in a turn, two messages queued.
	a := e.create("tree task")
	wa := e.watch(a.ID)
	stacktest.Typed[event.ToolStarted](wa, "t1", nil)
	testbin.WaitFor(t, 10*time.Second, "A's tool runs", func() bool { return len(testbin.ProcsWithArgs("sleep", "31337")) > 0 })
	e.send(a.ID, "msg a1", "")
	e.send(a.ID, "msg a2", "")

	// D: in the second step of a turn, its first step finished.
	d := e.create("step task")
	wd := e.watch(d.ID)
	stacktest.Typed[event.StepFinished](wd, "t1", nil)
	testbin.WaitFor(t, 10*time.Second, "D's second tool runs", func() bool { return len(testbin.ProcsWithArgs("sleep", "31339")) > 0 })

	fmt.Printf("READY %s %s %s %s %s\n", a.ID, b.ID, c.ID, handleOf(t, e, b.ID), d.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	<-ctx.Done()
	t.Fatal("TestCrashChild was not killed")
}
