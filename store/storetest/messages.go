package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

func testMessages(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	mustCreate(t, st, &store.Session{ID: "s1", Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})
	mustCreate(t, st, &store.Session{ID: "s2", Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})

	for i := 1; i <= 4; i++ {
		m := &store.Message{ID: fmt.Sprintf("m%d", i), Session: "s1", Text: fmt.Sprintf("message %d", i),
			Mode: "queue", State: store.MessageQueued, CreatedAt: base.Add(time.Duration(i) * time.Second)}
		if err := st.AddMessage(ctx, m); err != nil {
			t.Fatalf("AddMessage %d: %v", i, err)
		}
		if m.Seq != int64(i) {
			t.Errorf("AddMessage %d: Seq %d, want %d", i, m.Seq, i)
		}
	}
	// Seqs are per session.
	other := &store.Message{ID: "m1", Session: "s2", Text: "other", CreatedAt: base}
	if err := st.AddMessage(ctx, other); err != nil || other.Seq != 1 {
		t.Errorf("AddMessage to another session (same message id): seq %d, %v; want 1, nil", other.Seq, err)
	}

	if err := st.AddMessage(ctx, &store.Message{ID: "m2", Session: "s1", Text: "dup", CreatedAt: base}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AddMessage with an id the session has: %v, want ErrConflict", err)
	}
	if err := st.AddMessage(ctx, &store.Message{ID: "x", Session: "nope", Text: "x", CreatedAt: base}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AddMessage to a missing session: %v, want ErrNotFound", err)
	}

	if err := st.SetMessageState(ctx, "s1", "m1", store.MessageDelivered, "t1"); err != nil {
		t.Fatalf("SetMessageState: %v", err)
	}
	if err := st.SetMessageState(ctx, "s1", "m3", store.MessageDropped, ""); err != nil {
		t.Fatalf("SetMessageState: %v", err)
	}
	if err := st.SetMessageState(ctx, "s1", "nope", store.MessageDelivered, "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetMessageState(missing message): %v, want ErrNotFound", err)
	}
	if err := st.SetMessageState(ctx, "s2", "m2", store.MessageDelivered, "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetMessageState of a message of another session: %v, want ErrNotFound", err)
	}

	all, err := st.Messages(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 {
		t.Fatalf("Messages: %d, want 4", len(all))
	}
	for i, m := range all {
		want := fmt.Sprintf("m%d", i+1)
		if m.ID != want || m.Seq != int64(i+1) || m.Session != "s1" || m.Text != fmt.Sprintf("message %d", i+1) || m.Mode != "queue" {
			t.Errorf("Messages[%d] = %+v, want %s seq %d", i, m, want, i+1)
		}
		if !m.CreatedAt.Equal(base.Add(time.Duration(i+1) * time.Second)) {
			t.Errorf("Messages[%d].CreatedAt = %v", i, m.CreatedAt)
		}
	}
	if m := all[0]; m.State != store.MessageDelivered || m.Turn != "t1" || m.DeliveredAt.IsZero() {
		t.Errorf("delivered message = %+v, want state delivered, turn t1, DeliveredAt set", m)
	}
	if m := all[1]; m.State != store.MessageQueued || m.Turn != "" || !m.DeliveredAt.IsZero() {
		t.Errorf("queued message = %+v", m)
	}

	ids := func(ms []*store.Message) string {
		out := []string{}
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return fmt.Sprint(out)
	}
	if q, err := st.Messages(ctx, "s1", store.MessageQueued); err != nil || ids(q) != "[m2 m4]" {
		t.Errorf("queued messages = %s, %v; want [m2 m4]", ids(q), err)
	}
	if q, err := st.Messages(ctx, "s1", store.MessageDelivered, store.MessageDropped); err != nil || ids(q) != "[m1 m3]" {
		t.Errorf("delivered or dropped = %s, %v; want [m1 m3]", ids(q), err)
	}
	if q, err := st.Messages(ctx, "nope"); err != nil || len(q) != 0 {
		t.Errorf("Messages(missing session) = %v, %v; want none", q, err)
	}
}

// testMessagesConcurrent: concurrent AddMessage calls get distinct,
// gapless seqs.
func testMessagesConcurrent(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	mustCreate(t, st, &store.Session{ID: "s1", Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})
	const workers, each = 10, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := st.AddMessage(ctx, &store.Message{ID: fmt.Sprintf("w%d-%d", w, i), Session: "s1", Text: "x", CreatedAt: base}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent AddMessage: %v", err)
	}
	ms, err := st.Messages(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != workers*each {
		t.Fatalf("%d messages, want %d", len(ms), workers*each)
	}
	for i, m := range ms {
		if m.Seq != int64(i+1) {
			t.Fatalf("message %d has seq %d: seqs must be 1..%d", i, m.Seq, workers*each)
		}
	}
}
