package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// testSlackInbox: a pending event keeps its payload until done, is
// listed (oldest first) and dumped with it, counts as seen (a second
// record of its id is ErrConflict), and is not pruned while pending;
// once done its id stays (seen) and goes with a prune.
func testSlackInbox(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	if err := st.AddSlackEventPending(ctx, "EvB", []byte(`{"b":1}`), base.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := st.AddSlackEventPending(ctx, "EvA", []byte(`{"a":1}`), base); err != nil {
		t.Fatal(err)
	}
	if err := st.AddSlackEvent(ctx, "EvA", base); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AddSlackEvent of a pending id: %v, want ErrConflict", err)
	}
	if err := st.AddSlackEventPending(ctx, "EvA", []byte(`{"a":2}`), base); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AddSlackEventPending of a pending id: %v, want ErrConflict", err)
	}
	if err := st.AddSlackEventPending(ctx, "EvC", nil, base); err == nil {
		t.Error("AddSlackEventPending without a payload: no error")
	}
	ps, err := st.PendingSlackEvents(ctx)
	if err != nil || len(ps) != 2 || ps[0].ID != "EvA" || string(ps[0].Payload) != `{"a":1}` || !ps[0].ReceivedAt.Equal(base) || ps[1].ID != "EvB" {
		t.Fatalf("PendingSlackEvents: %+v, %v; want EvA then EvB with their payloads", ps, err)
	}
	if n, err := st.PruneSlackEvents(ctx, base.Add(time.Hour)); err != nil || n != 0 {
		t.Errorf("PruneSlackEvents of pending events: %d, %v; want 0", n, err)
	}
	if err := st.SlackEventDone(ctx, "EvA"); err != nil {
		t.Fatal(err)
	}
	if err := st.SlackEventDone(ctx, "EvA"); err != nil {
		t.Errorf("SlackEventDone again: %v", err)
	}
	if err := st.SlackEventDone(ctx, "never"); err != nil {
		t.Errorf("SlackEventDone of an id not recorded: %v", err)
	}
	if ps, err := st.PendingSlackEvents(ctx); err != nil || len(ps) != 1 || ps[0].ID != "EvB" {
		t.Errorf("PendingSlackEvents after EvA is done: %+v, %v; want EvB", ps, err)
	}
	if err := st.AddSlackEventPending(ctx, "EvA", []byte(`{"a":1}`), base); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AddSlackEventPending of a done id: %v, want ErrConflict", err)
	}
	if cp, ok := st.(store.Copier); ok {
		evs, err := cp.DumpSlackEvents(ctx)
		if err != nil || len(evs) != 2 || evs[0].ID != "EvA" || evs[0].Payload != nil || string(evs[1].Payload) != `{"b":1}` {
			t.Errorf("DumpSlackEvents: %+v, %v; want EvA done (no payload), EvB pending with its payload", evs, err)
		}
	}
	if n, err := st.PruneSlackEvents(ctx, base.Add(time.Hour)); err != nil || n != 1 {
		t.Errorf("PruneSlackEvents: %d, %v; want 1 (EvA, done)", n, err)
	}
}
