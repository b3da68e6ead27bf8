package session

import (
	"slices"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
)

// TestStopBoxesOnExit: a Manager with StopBoxesOnExit takes the boxes with
// it when it closes. An idle session, and one whose turn Close
// interrupted, are suspended without a box (their workspaces kept); the
// next server starts no box for them, and a message resumes one on its
// kept workspace. Without the option (the other tests) the boxes stay for
// the next server to reattach.
func TestStopBoxesOnExit(t *testing.T) {
	e := newEnv(t, withStopBoxes)
	ctx := testbin.Context(t)
	idle := e.create("msg one")
	wi := e.watch(idle.ID)
	wi.Finished("t1")
	wi.State(store.StateIdle)
	busy := e.create("long task")
	wb := e.watch(busy.ID)
	stacktest.Typed[event.ToolStarted](wb, "t1", nil)
	if n := len(e.Boxes()); n != 2 {
		t.Fatalf("%d boxes before the stop, want 2", n)
	}

	e.closeAndReopen()
	if left := e.Boxes(); len(left) != 0 {
		t.Fatalf("boxes left by a Manager stopped with StopBoxesOnExit: %v", left)
	}
	for _, id := range []string{idle.ID, busy.ID} {
		s, err := e.st.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if s.State != store.StateSuspended || len(s.Sandbox) != 0 {
			t.Errorf("session %s after the stop: %s with handle %q, want suspended without a box", id, s.State, s.Sandbox)
		}
		evs := stacktest.CheckGapless(t, e.st, id)
		states, _ := stacktest.OfType[event.SessionState](evs)
		if !slices.ContainsFunc(states, func(st event.SessionState) bool {
			return st.State == string(store.StateSuspended) && strings.Contains(st.Reason, "--stop-boxes-on-exit")
		}) {
			t.Errorf("session %s: no session.state suspended saying why: %+v", id, states)
		}
	}
	if failed, _ := stacktest.OfType[event.TurnFailed](stacktest.CheckGapless(t, e.st, busy.ID)); len(failed) != 1 || failed[0].Kind != "interrupted" {
		t.Errorf("the turn Close interrupted: %+v, want one turn.failed kind interrupted", failed)
	}

	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.get(idle.ID).State; got != store.StateSuspended {
		t.Fatalf("after the next start the session is %s, want suspended until a message", got)
	}
	if left := e.Boxes(); len(left) != 0 {
		t.Fatalf("the next start made boxes for suspended sessions: %v", left)
	}
	e.send(idle.ID, "msg two", "")
	w := e.watch(idle.ID)
	w.Finished("t2")
	if n := len(e.Boxes()); n != 1 {
		t.Errorf("%d boxes once the message resumed the session, want 1", n)
	}
}
