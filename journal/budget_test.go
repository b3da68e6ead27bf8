package journal_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/store"
)

// TestBudgetedAppendMessage: with the store's file locked by another
// process, an API request's AppendMessage gives up within its store
// budget (a *store.TimeoutError), and what it queued is committed once
// the lock is released: the message is stored once, with its event.
func TestBudgetedAppendMessage(t *testing.T) {
	ctx := testCtx(t)
	path := filepath.Join(t.TempDir(), "harvest.db")
	st := openStore(t, path, "s")
	j := newJournal(t, store.Bounded(st), journal.Options{})
	if _, err := j.AppendSync(ctx, msg("s", 0)); err != nil { // the seq is loaded
		t.Fatal(err)
	}
	release, err := openStore(t, path).HoldWrites(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const budget = 300 * time.Millisecond
	m := &store.Message{ID: "m1", Session: "s", Text: "hello", Key: "k1", KeyOwner: "o"}
	start := time.Now()
	_, err = j.AppendMessage(store.WithBudget(ctx, budget), event.Event{Session: "s", Data: event.MessageQueued{MessageID: m.ID, Text: m.Text}}, m)
	took := time.Since(start)
	var te *store.TimeoutError
	if !errors.As(err, &te) || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("AppendMessage with the file locked, budget %s: %v, want a *store.TimeoutError", budget, err)
	}
	if took > budget+time.Second {
		t.Errorf("AppendMessage gave up after %s, its budget is %s", took, budget)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := j.Flush(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	got, err := st.MessageByKey(ctx, "s", "o", "k1")
	if err != nil || got.ID != "m1" {
		t.Fatalf("the message queued before the budget ran out, after the release: %+v %v", got, err)
	}
	evs, err := st.Events(ctx, "s", 0, 0)
	if err != nil || len(evs) != 2 || evs[1].Type() != event.TypeMessageQueued {
		t.Fatalf("the events: %v %v, want the first and the message's", evs, err)
	}
}
