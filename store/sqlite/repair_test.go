package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// TestMigrationRepairsMessageQueued: a database written when a message and
// its message.queued event were two commits, with events lost between
// them, gets them at the next Open: after the session's last event, in
// message order, once; messages with their event and dropped ones get none.
func TestMigrationRepairsMessageQueued(t *testing.T) {
	path := filepath.Join(t.TempDir(), "harvest.db")
	s := open(t, path)
	ctx := context.Background()
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, id := range []string{"s1", "s2"} {
		if err := s.CreateSession(ctx, &store.Session{ID: id, Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base}, nil); err != nil {
			t.Fatal(err)
		}
	}
	add := func(m *store.Message) {
		t.Helper()
		if err := s.AddMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// s1: m1 delivered (its event lost), m2 with its event, m3 queued
	// (lost), m4 dropped (lost: not repaired), m5 queued (lost).
	add(&store.Message{ID: "m1", Session: "s1", Text: "one", Mode: "queue", State: store.MessageDelivered, CreatedAt: base})
	if err := s.AppendEventsWith(ctx, []event.Event{
		{Session: "s1", Seq: 1, Time: base, Data: event.SessionState{State: "idle"}},
		{Session: "s1", Seq: 2, Time: base, Data: event.MessageQueued{MessageID: "m2", Text: "two", Mode: "queue", Position: 1}},
	}, []*store.Message{{ID: "m2", Session: "s1", Text: "two", Mode: "queue", State: store.MessageQueued, CreatedAt: base}}); err != nil {
		t.Fatal(err)
	}
	add(&store.Message{ID: "m3", Session: "s1", Text: "three", Mode: "interrupt", CreatedAt: base.Add(time.Second)})
	add(&store.Message{ID: "m4", Session: "s1", Text: "four", Mode: "queue", State: store.MessageDropped, CreatedAt: base})
	add(&store.Message{ID: "m5", Session: "s1", Text: "five", Mode: "queue", CreatedAt: base})
	// s2: no events at all, one lost message.
	add(&store.Message{ID: "m1", Session: "s2", Text: "other", Mode: "queue", CreatedAt: base})

	// As if written before the repair: forget it ran, and open again.
	if _, err := s.w.Exec(`DELETE FROM schema_migrations WHERE name = 'repair-message-queued'`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, path)

	evs, err := s.Events(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []event.MessageQueued{
		{MessageID: "m2", Text: "two", Mode: "queue", Position: 1},
		{MessageID: "m1", Text: "one", Mode: "queue", Position: 0},
		{MessageID: "m3", Text: "three", Mode: "interrupt", Position: 2},
		{MessageID: "m5", Text: "five", Mode: "queue", Position: 3},
	}
	if len(evs) != 5 {
		t.Fatalf("s1 has %d events after the repair, want 5: %+v", len(evs), evs)
	}
	for i, w := range want {
		ev := evs[i+1]
		if ev.Seq != int64(i+2) || ev.Data != w {
			t.Errorf("s1 event %d: seq %d %+v, want seq %d %+v", i+2, ev.Seq, ev.Data, i+2, w)
		}
	}
	if !evs[3].Time.Equal(base.Add(time.Second)) {
		t.Errorf("the repaired event of m3 has time %v, want the message's %v", evs[3].Time, base.Add(time.Second))
	}
	if evs, err := s.Events(ctx, "s2", 0, 0); err != nil || len(evs) != 1 || evs[0].Seq != 1 {
		t.Errorf("s2 after the repair: %+v, %v; want one message.queued at seq 1", evs, err)
	}
	// Once only.
	if _, err := s.w.Exec(`DELETE FROM schema_migrations WHERE name = 'repair-message-queued'`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, path)
	if n, err := s.LastSeq(ctx, "s1"); err != nil || n != 5 {
		t.Errorf("s1 after a second repair: last seq %d, %v; want 5", n, err)
	}
}
