package session

import (
	"testing"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
)

// TestRecoverRepairsLostEvents: a session left as a crash can leave it —
// its prompt stored with it but its message.queued never journaled, a turn
// that took the prompt (the message delivered) with nothing journaled
// after — is recovered with the lost events journaled, in order, before the
// turn is reported interrupted.
func TestRecoverRepairsLostEvents(t *testing.T) {
	e := newEnv(t)
	ctx := testbin.Context(t)
	v := e.create("msg one")
	e.watch(v.ID).IdleAfter("t1")
	tmpl := e.get(v.ID).Session

	s := *tmpl
	s.ID = newSessionID()
	s.State, s.Turns, s.Sandbox, s.AgentState = store.StateWorking, 1, nil, nil
	dir, err := WorkspaceDir(e.DataDir, Scope{Session: s.ID})
	if err != nil {
		t.Fatal(err)
	}
	s.Repos = []store.Repo{{Name: tmpl.Repos[0].Name, Source: tmpl.Repos[0].Source, Path: dir + "/" + tmpl.Repos[0].Name}}
	prompt := &store.Message{ID: newMessageID(), Session: s.ID, Text: "msg lost", Mode: ModeQueue, State: store.MessageDelivered, Turn: "t1", CreatedAt: s.CreatedAt}
	if err := e.st.CreateSession(ctx, &s, prompt); err != nil {
		t.Fatal(err)
	}

	e.closeAndReopen()
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	w := e.watch(s.ID)
	w.State(store.StateIdle)
	evs := stacktest.CheckGapless(t, e.st, s.ID)
	var got []string
	for _, ev := range evs {
		switch d := ev.Data.(type) {
		case event.MessageQueued:
			if d.MessageID == prompt.ID {
				got = append(got, "queued")
			}
		case event.MessageDelivered:
			if d.MessageID == prompt.ID && ev.Turn == "t1" {
				got = append(got, "delivered")
			}
		case event.TurnFailed:
			if ev.Turn == "t1" && d.Kind == "interrupted" {
				got = append(got, "interrupted")
			}
		}
	}
	if len(got) != 3 || got[0] != "queued" || got[1] != "delivered" || got[2] != "interrupted" {
		t.Fatalf("the recovered session's events: %v, want [queued delivered interrupted]", got)
	}

	// Another restart repairs nothing twice.
	e.closeAndReopen()
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	e.send(s.ID, "msg two", "")
	e.watch(s.ID).Finished("t2")
	queued, _ := stacktest.OfType[event.MessageQueued](stacktest.CheckGapless(t, e.st, s.ID))
	if len(queued) != 2 {
		t.Fatalf("%d message.queued events after a second restart, want 2 (the prompt's, msg two's)", len(queued))
	}
}
