package sandboxtest

import (
	"errors"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
)

// testFence: the box's fence (the dead-man's switch of package agentd's
// "Fence"). It only moves later; disarmed it does not fire; left alone it
// ends the box, every process in it, at its deadline.
func (s *suite) testFence(t *testing.T) {
	spec, _ := withWorkspace(t)
	sb := s.start(t, spec)
	ctx := ctxFor(t)
	p, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	if left, err := sb.Fence(ctx, time.Now().Add(time.Minute)); err != nil || left < 50*time.Second {
		t.Fatalf("arming the fence a minute ahead: %s %v", left, err)
	}
	if left, err := sb.Fence(ctx, time.Now().Add(100*time.Millisecond)); err != nil || left < 50*time.Second {
		t.Fatalf("an earlier deadline moved the fence back: %s left, %v", left, err)
	}
	// Disarmed: a deadline that passes while a command runs ends nothing.
	if _, err := sb.Fence(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if left, err := sb.Fence(ctx, time.Time{}); err != nil || left != -1 {
		t.Fatalf("disarming: %s %v, want -1", left, err)
	}
	mustOK(t, sb, "sleep", "0.5")
	if _, err := sb.Info(ctx); err != nil {
		t.Fatalf("a disarmed box ended: %v", err)
	}

	deadline := time.Now().Add(300 * time.Millisecond)
	if _, err := sb.Fence(ctx, deadline); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait(ctx)
	killed := time.Since(deadline)
	if err == nil && st.Signal == 0 {
		t.Errorf("the command the fence ended: %v, want killed", st)
	}
	if err := waitGone(t, sb); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("after the fence's deadline: %v", err)
	}
	gone := time.Since(deadline)
	t.Logf("%s: the fence's deadline passed: its command ended %s later, the box %s later", s.b.Name, killed.Round(time.Millisecond), gone.Round(time.Millisecond))
	if gone > time.Second {
		t.Errorf("the box ended %s after its fence's deadline, want within 1s", gone)
	}
	if _, err := s.p.Recover(ctxFor(t), sb.Handle()); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Recover after the fence ended the box: %v", err)
	}
}

// testFenceFromBox: a process in the box can neither arm nor disarm the
// fence (every unix socket it can see is tried) nor read the agent's
// memory (the check ptrace makes too: the agent is not dumpable).
func testFenceFromBox(t *testing.T, sb *sandbox.Sandbox, pr string) {
	v := probe(t, sb, pr, "fence", sb.ID())
	t.Logf("disarming the fence from inside: %s", v)
	denied(t, "disarm the box's fence from inside", v)
	denied(t, "read the agent's memory", probe(t, sb, pr, "read", "/proc/1/mem"))
}
