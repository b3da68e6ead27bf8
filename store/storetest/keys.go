package storetest

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// testMessageKeys: a session has at most one message per (KeyOwner, Key),
// and MessageByKey finds it with its request hash.
func testMessageKeys(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	mustCreate(t, st, &store.Session{ID: "s1", Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})
	mustCreate(t, st, &store.Session{ID: "s2", Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})

	first := &store.Message{ID: "m1", Session: "s1", Text: "hello", Mode: "queue", CreatedAt: base, Key: "k1", KeyOwner: "tok-a", RequestHash: []byte{1, 2, 3}}
	if err := st.AddMessage(ctx, first); err != nil {
		t.Fatalf("AddMessage with a key: %v", err)
	}
	got, err := st.MessageByKey(ctx, "s1", "tok-a", "k1")
	if err != nil {
		t.Fatalf("MessageByKey: %v", err)
	}
	if got.ID != "m1" || got.Seq != 1 || got.Text != "hello" || got.Key != "k1" || got.KeyOwner != "tok-a" || !bytes.Equal(got.RequestHash, []byte{1, 2, 3}) {
		t.Errorf("MessageByKey = %+v, want m1 with its key, owner and hash", got)
	}
	if err := st.AddMessage(ctx, &store.Message{ID: "m2", Session: "s1", Text: "again", CreatedAt: base, Key: "k1", KeyOwner: "tok-a"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AddMessage with a key the session has for that owner: %v, want ErrConflict", err)
	}
	// The same key is another message's for another owner or session; no
	// key at all never collides.
	for _, m := range []*store.Message{
		{ID: "m3", Session: "s1", Text: "other owner", CreatedAt: base, Key: "k1", KeyOwner: "tok-b"},
		{ID: "m1", Session: "s2", Text: "other session", CreatedAt: base, Key: "k1", KeyOwner: "tok-a"},
		{ID: "m4", Session: "s1", Text: "no key", CreatedAt: base},
		{ID: "m5", Session: "s1", Text: "no key either", CreatedAt: base},
	} {
		if err := st.AddMessage(ctx, m); err != nil {
			t.Errorf("AddMessage %s of %s (key %q of %q): %v", m.ID, m.Session, m.Key, m.KeyOwner, err)
		}
	}
	if got, err := st.MessageByKey(ctx, "s1", "tok-b", "k1"); err != nil || got.ID != "m3" {
		t.Errorf("MessageByKey(tok-b) = %+v, %v; want m3", got, err)
	}
	if got, err := st.MessageByKey(ctx, "s2", "tok-a", "k1"); err != nil || got.ID != "m1" || got.Session != "s2" {
		t.Errorf("MessageByKey(s2) = %+v, %v; want s2's m1", got, err)
	}
	for _, k := range [][3]string{{"s1", "tok-a", "k2"}, {"s1", "tok-c", "k1"}, {"nope", "tok-a", "k1"}} {
		if _, err := st.MessageByKey(ctx, k[0], k[1], k[2]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("MessageByKey%v: %v, want ErrNotFound", k, err)
		}
	}
	all, err := st.Messages(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 || all[0].Key != "k1" || all[3].Key != "" {
		t.Errorf("Messages of s1: %d, want 4 with their keys", len(all))
	}
}

// testEventsWithMessages: AppendEventsWith stores messages and events
// together, or neither.
func testEventsWithMessages(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	mustCreate(t, st, &store.Session{ID: "s1", Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})
	if err := st.AddMessage(ctx, &store.Message{ID: "m0", Session: "s1", Text: "before", CreatedAt: base, Key: "k0", KeyOwner: "o"}); err != nil {
		t.Fatal(err)
	}
	queued := func(seq int64, id string) event.Event {
		return event.Event{Session: "s1", Seq: seq, Time: base, Data: event.MessageQueued{MessageID: id, Text: "x", Mode: "queue", Position: 1}}
	}
	m1 := &store.Message{ID: "m1", Session: "s1", Text: "one", Mode: "queue", CreatedAt: base, Key: "k1", KeyOwner: "o"}
	m2 := &store.Message{ID: "m2", Session: "s1", Text: "two", Mode: "queue", CreatedAt: base}
	if err := st.AppendEventsWith(ctx, []event.Event{queued(1, "m1"), queued(2, "m2")}, []*store.Message{m1, m2}); err != nil {
		t.Fatalf("AppendEventsWith: %v", err)
	}
	if m1.Seq != 2 || m2.Seq != 3 || m1.State != store.MessageQueued {
		t.Errorf("AppendEventsWith: seqs %d, %d, state %q; want 2, 3 (in order after m0), queued", m1.Seq, m2.Seq, m1.State)
	}
	// A message that cannot be stored (its key is taken) takes its events
	// with it, and the other messages too.
	m3 := &store.Message{ID: "m3", Session: "s1", Text: "three", CreatedAt: base}
	dup := &store.Message{ID: "m4", Session: "s1", Text: "dup", CreatedAt: base, Key: "k1", KeyOwner: "o"}
	if err := st.AppendEventsWith(ctx, []event.Event{queued(3, "m3"), queued(4, "m4")}, []*store.Message{m3, dup}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AppendEventsWith with a key taken: %v, want ErrConflict", err)
	}
	if m3.Seq != 0 {
		t.Errorf("a refused AppendEventsWith set a message's seq to %d", m3.Seq)
	}
	// An event that cannot be stored takes the messages with it.
	if err := st.AppendEventsWith(ctx, []event.Event{queued(2, "m3")}, []*store.Message{m3}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AppendEventsWith with a seq taken: %v, want ErrConflict", err)
	}
	// A missing session.
	if err := st.AppendEventsWith(ctx, nil, []*store.Message{{ID: "x", Session: "nope", Text: "x", CreatedAt: base}}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AppendEventsWith to a missing session: %v, want ErrNotFound", err)
	}
	msgs, err := st.Messages(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	if len(ids) != 3 || ids[0] != "m0" || ids[1] != "m1" || ids[2] != "m2" {
		t.Errorf("messages after the refused batches: %v, want [m0 m1 m2]", ids)
	}
	if n, err := st.LastSeq(ctx, "s1"); err != nil || n != 2 {
		t.Errorf("LastSeq after the refused batches: %d, %v; want 2", n, err)
	}
	// Messages alone, events alone.
	if err := st.AppendEventsWith(ctx, nil, []*store.Message{m3}); err != nil || m3.Seq != 4 {
		t.Errorf("AppendEventsWith(messages only): seq %d, %v; want 4, nil", m3.Seq, err)
	}
	if err := st.AppendEventsWith(ctx, []event.Event{queued(3, "m3")}, nil); err != nil {
		t.Errorf("AppendEventsWith(events only): %v", err)
	}
}
