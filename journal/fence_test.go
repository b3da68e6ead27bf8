package journal_test

import (
	"errors"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/store"
)

// TestFence: two nodes' journals on one store, each fencing the session
// with the lease it holds. The owner's events are stored; once another
// node took the session over, the old owner's append is refused with
// ErrLeaseLost (nothing stored), its lost function is called once, and
// the new owner's seqs go on from the store without a gap.
func TestFence(t *testing.T) {
	ctx := testCtx(t)
	st := newStore(t, "s", "u")
	ja := newJournal(t, st, journal.Options{})
	jb := newJournal(t, st, journal.Options{})

	// A's lease is over at once (ttl 0), so B can take it without a wait.
	la, err := st.AcquireLease(ctx, "s", "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	lost := make(chan error, 2)
	if err := ja.Fence(la.Fence(), func(err error) { lost <- err }); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if ev, err := ja.AppendSync(ctx, msg("s", i)); err != nil || ev.Seq != int64(i+1) {
			t.Fatalf("owner's append %d: seq %d, %v", i, ev.Seq, err)
		}
	}
	// Another session in the same journal, unfenced, is not affected.
	if _, err := ja.AppendSync(ctx, msg("u", 0)); err != nil {
		t.Fatal(err)
	}

	lb, err := st.AcquireLease(ctx, "s", "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Epoch != la.Epoch+1 {
		t.Fatalf("B's epoch %d, want %d", lb.Epoch, la.Epoch+1)
	}
	if err := jb.Fence(lb.Fence(), nil); err != nil {
		t.Fatal(err)
	}
	if ev, err := jb.AppendSync(ctx, msg("s", 3)); err != nil || ev.Seq != 4 {
		t.Fatalf("new owner's append: seq %d, %v; want 4", ev.Seq, err)
	}
	if _, err := ja.AppendSync(ctx, msg("s", 99)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("stale owner's append: %v, want ErrLeaseLost", err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("lost called with %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the stale owner was not told its lease is lost")
	}
	// A's later appends are refused at once, never written unfenced into
	// a free seq; an append under an explicit stale fence is refused by
	// the store. The owner's go on.
	if _, err := ja.Append(msg("s", 98)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("append after the lease was lost: %v, want ErrLeaseLost", err)
	}
	if _, err := ja.AppendSyncFenced(ctx, la.Fence(), msg("s", 97)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("append under a stale fence: %v, want ErrLeaseLost", err)
	}
	if ev, err := jb.AppendSync(ctx, msg("s", 4)); err != nil || ev.Seq != 5 {
		t.Fatalf("new owner's second append: seq %d, %v; want 5", ev.Seq, err)
	}
	if len(lost) != 0 {
		t.Fatal("lost called twice")
	}
	// Unfence (a lease given up) refuses too; a new Fence writes again,
	// after the others' seqs.
	jb.Unfence("s")
	if _, err := jb.Append(msg("s", 96)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("append after Unfence: %v, want ErrLeaseLost", err)
	}
	evs, err := st.Events(ctx, "s", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("stored seqs: %d at %d", ev.Seq, i)
		}
	}
	if len(evs) != 5 {
		t.Fatalf("%d events stored, want 5 (the stale one refused)", len(evs))
	}
}
