package session

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
)

// TestStop: Stop ends a session in a turn (the turn is cancelled, the
// event asked for is journaled, queued messages are dropped, the box is
// destroyed, the workspace kept) and a suspended one (woken for it); a
// second Stop is a conflict, and a message to a stopped session too.
func TestStop(t *testing.T) {
	e := newEnv(t)
	v := e.create("tree task")
	w := e.watch(v.ID)
	stacktest.Typed[event.ToolStarted](w, "t1", nil)
	e.send(v.ID, "msg queued behind", "")
	start := time.Now()
	if err := e.m.Stop(testbin.Context(t), "owner-1", v.ID, StopRequest{Reason: "the pull request was merged",
		Event: event.PRMerged{Repo: "acme/app", Number: 7, By: "ada"}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("stop during a turn: %s", time.Since(start))
	stacktest.Typed[event.TurnCancelled](w, "t1", nil)
	m := stacktest.Typed[event.PRMerged](w, "", nil)
	if m.Number != 7 || m.By != "ada" {
		t.Errorf("pr.merged %+v", m)
	}
	w.State(store.StateStopped)
	s := e.get(v.ID)
	if s.State != store.StateStopped || s.Sandbox != nil || len(s.Queue) != 0 {
		t.Fatalf("after Stop: %s, sandbox %s, %d queued; want stopped, no box, nothing queued", s.State, s.Sandbox, len(s.Queue))
	}
	if boxes := e.Boxes(); len(boxes) != 0 {
		t.Errorf("boxes after Stop: %v", boxes)
	}
	if len(testbin.ProcsWithArgs("sleep", "31337")) != 0 {
		t.Errorf("the turn's processes outlived Stop")
	}
	if err := e.m.Stop(testbin.Context(t), "owner-1", v.ID, StopRequest{}); !errors.Is(err, ErrConflict) {
		t.Errorf("a second Stop: %v, want ErrConflict", err)
	}
	if _, err := e.m.Send(testbin.Context(t), "owner-1", v.ID, "hello?", ""); !errors.Is(err, ErrConflict) {
		t.Errorf("a message to a stopped session: %v, want ErrConflict", err)
	}

	// A suspended session: woken to be stopped, no box started.
	v2 := e.create("msg hi")
	w2 := e.watch(v2.ID)
	w2.IdleAfter("t1")
	e.Clock.Advance(DefaultIdleTimeout)
	w2.State(store.StateSuspended)
	testbin.WaitFor(t, 10*time.Second, "the suspended session's runner to exit", func() bool {
		e.m.mu.Lock()
		defer e.m.mu.Unlock()
		return e.m.runners[v2.ID] == nil
	})
	if err := e.m.Stop(testbin.Context(t), "owner-1", v2.ID, StopRequest{Reason: "closed", Event: event.PRClosed{Repo: "acme/app", Number: 8}}); err != nil {
		t.Fatal(err)
	}
	st := w2.State(store.StateStopped)
	if !strings.Contains(st.Reason, "closed") {
		t.Errorf("the stop's reason: %q", st.Reason)
	}
	if s := e.get(v2.ID); s.State != store.StateStopped {
		t.Errorf("the suspended session after Stop: %s", s.State)
	}
	if boxes := e.Boxes(); len(boxes) != 0 {
		t.Errorf("boxes after stopping a suspended session: %v", boxes)
	}
}
