package journal_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/store"
)

// TestReplayThenLive: subscribers joining at many points while a producer
// appends get every event after their starting point exactly once.
func TestReplayThenLive(t *testing.T) {
	ctx := testCtx(t)
	st := newStore(t, "s")
	// Small pages make the replay take many reads while events arrive; a
	// small buffer makes the live queue overflow during the replay.
	j := newJournal(t, st, journal.Options{ReplayPage: 50, Buffer: 64, MaxBatch: 32})
	const before, during = 500, 3000
	for i := range before {
		if _, err := j.Append(msg("s", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Flush(ctx, "s"); err != nil {
		t.Fatal(err)
	}

	const total = before + during
	var producer sync.WaitGroup
	producer.Add(1)
	go func() {
		defer producer.Done()
		for i := range during {
			if _, err := j.Append(msg("s", before+i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()

	// Subscribers from different points, started while the producer runs.
	var subs sync.WaitGroup
	for _, after := range []int64{0, 1, 250, 499, 500, 1200, 2000} {
		sub, err := j.Subscribe(ctx, "s", after)
		if err != nil {
			t.Fatal(err)
		}
		subs.Add(1)
		go func() {
			defer subs.Done()
			defer func() { sub.Close() }() // the last one, after resubscribing
			var got []event.Event
			for len(got) == 0 || got[len(got)-1].Seq < total {
				select {
				case ev, ok := <-sub.C:
					if !ok {
						// A subscriber that was too slow resubscribes, as
						// an SSE client would with Last-Event-ID.
						if !errors.Is(sub.Err(), journal.ErrTooSlow) {
							t.Errorf("subscription after %d ended: %v", after, sub.Err())
							return
						}
						var err error
						if sub, err = j.Subscribe(ctx, "s", after+int64(len(got))); err != nil {
							t.Error(err)
							return
						}
						continue
					}
					got = append(got, ev)
				case <-ctx.Done():
					t.Errorf("subscriber after %d: got %d events: %v", after, len(got), ctx.Err())
					return
				}
			}
			if len(got) != int(total-after) {
				t.Errorf("subscriber after %d got %d events, want %d", after, len(got), total-after)
			}
			for i, ev := range got {
				if ev.Seq != after+1+int64(i) {
					t.Errorf("subscriber after %d: event %d has seq %d, want %d", after, i, ev.Seq, after+1+int64(i))
					return
				}
				if want := fmt.Sprintf("message %d", ev.Seq-1); ev.Data.(event.AssistantMessage).Text != want {
					t.Errorf("subscriber after %d: seq %d is %q, want %q", after, ev.Seq, ev.Data.(event.AssistantMessage).Text, want)
					return
				}
			}
		}()
	}
	producer.Wait()
	subs.Wait()
}

// TestSlowSubscriberCutOff: a subscriber that reads nothing is cut off; a
// fast one gets everything; the producer never waits for either.
func TestSlowSubscriberCutOff(t *testing.T) {
	ctx := testCtx(t)
	st := newStore(t, "s")
	j := newJournal(t, st, journal.Options{Buffer: 16})
	slow, err := j.Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := j.Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()

	// The producer appends an event only once the fast subscriber has the
	// previous one, so the fast one is never far behind; the slow one never
	// reads. Were Append to wait for a subscriber, this would hang.
	const n = 300
	done := make(chan error, 1)
	var got []event.Event
	go func() {
		for i := range n {
			if _, err := j.Append(msg("s", i)); err != nil {
				done <- err
				return
			}
			select {
			case ev, ok := <-fast.C:
				if !ok {
					done <- fmt.Errorf("the fast subscriber ended after %d events: %w", len(got), fast.Err())
					return
				}
				got = append(got, ev)
			case <-ctx.Done():
				done <- ctx.Err()
				return
			}
		}
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	gapless(t, "fast subscriber", got, 1)
	if len(got) != n {
		t.Fatalf("fast subscriber got %d events, want %d", len(got), n)
	}

	// The slow one gets a gapless prefix, then ErrTooSlow.
	prefix := drain(t, ctx, slow)
	if !errors.Is(slow.Err(), journal.ErrTooSlow) {
		t.Fatalf("slow subscriber ended with %v, want ErrTooSlow", slow.Err())
	}
	if len(prefix) == 0 || len(prefix) >= n {
		t.Fatalf("slow subscriber got %d events before the cut-off", len(prefix))
	}
	gapless(t, "slow subscriber before the cut-off", prefix, 1)
	// The journal's counts say so: n stored, one subscriber cut off, the
	// fast one still running.
	if st := j.Stats(); st.Stored != uint64(n) || st.CutOff != 1 || st.Subscribers != 1 || st.Commits == 0 || st.Commits > uint64(n) {
		t.Fatalf("Stats = %+v: want %d stored, 1 cut off, 1 subscriber, 1..%d commits", st, n, n)
	}
	// It resubscribes from where it got to and loses nothing.
	again, err := j.Subscribe(ctx, "s", lastSeq(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	rest := recvUntil(t, ctx, again, n)
	gapless(t, "slow subscriber, resubscribed", rest, lastSeq(prefix)+1)
}

// TestCoalescing: a subscriber behind on a stream of deltas loses only
// deltas; every other event arrives, in order. It is behind for certain:
// it is live (past its replay) and reads nothing until all 2000 events
// are committed and fanned out (Flush returns after the fan-out), far more
// than its queue and C can hold, so deltas must have been coalesced. The
// journal stores every delta here (StoreEvery < 0); live pieces are
// live_test.go's.
func TestCoalescing(t *testing.T) {
	ctx := testCtx(t)
	st := newStore(t, "s")
	j := newJournal(t, st, journal.Options{Buffer: 32, MaxBatch: 64, StoreEvery: -1})
	sub, err := j.Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := journal.WaitLive(ctx, sub); err != nil {
		t.Fatal(err)
	}

	// 2000 deltas and 20 messages: far more than the subscriber can hold,
	// fewer must-deliver events than its buffer, so it is never cut off.
	var all []event.Event
	for i := range 2000 {
		ev := delta("s", fmt.Sprintf("%d,", i))
		if i%100 == 99 {
			ev = msg("s", i)
		}
		seq, err := j.Append(ev)
		if err != nil {
			t.Fatal(err)
		}
		ev.Seq = seq
		all = append(all, ev)
	}
	if err := j.Flush(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	got := recvUntil(t, ctx, sub, 2000)
	if sub.Dropped() == 0 || len(got) >= 2000 {
		t.Fatalf("nothing was coalesced: %d events delivered of 2000, %d dropped", len(got), sub.Dropped())
	}
	if int64(len(got))+sub.Dropped() != 2000 {
		t.Errorf("%d delivered + %d dropped, want 2000 in all", len(got), sub.Dropped())
	}
	var msgs int
	for i, ev := range got {
		if i > 0 && ev.Seq <= got[i-1].Seq {
			t.Fatalf("seq %d after %d", ev.Seq, got[i-1].Seq)
		}
		orig := all[ev.Seq-1]
		if ev.Type() != orig.Type() {
			t.Fatalf("seq %d delivered as %s, appended as %s", ev.Seq, ev.Type(), orig.Type())
		}
		if ev.Type() == event.TypeAssistantMessage {
			msgs++
		}
		// A delivered delta is its own text, or the merged text of the
		// deltas after the previous delivered event.
		if d, ok := ev.Data.(event.AssistantDelta); ok {
			var prev int64
			if i > 0 {
				prev = got[i-1].Seq
			}
			var want string
			for _, o := range all[prev:ev.Seq] {
				if od, ok := o.Data.(event.AssistantDelta); ok {
					want += od.Text
				}
			}
			if d.Text != want && d.Text != all[ev.Seq-1].Data.(event.AssistantDelta).Text && !suffixOf(d.Text, want) {
				t.Fatalf("delta at seq %d = %q: not its own text nor a merge of the deltas before it (%q)", ev.Seq, d.Text, want)
			}
		}
	}
	// Skipped seqs are deltas only.
	for i := 1; i < len(got); i++ {
		for seq := got[i-1].Seq + 1; seq < got[i].Seq; seq++ {
			if typ := all[seq-1].Type(); typ != event.TypeAssistantDelta {
				t.Fatalf("seq %d (%s) was not delivered: only coalescable events may be", seq, typ)
			}
		}
	}
	if msgs != 20 {
		t.Fatalf("%d assistant.message events delivered, want all 20", msgs)
	}
	t.Logf("%d events delivered of 2000; %d coalesced", len(got), sub.Dropped())
}

func suffixOf(s, of string) bool { return len(s) <= len(of) && of[len(of)-len(s):] == s }

func TestForget(t *testing.T) {
	ctx := testCtx(t)
	st := newStore(t, "s", "other")
	j := newJournal(t, st, journal.Options{})
	for i := range 10 {
		if _, err := j.AppendSync(ctx, msg("s", i)); err != nil {
			t.Fatal(err)
		}
	}
	live, err := j.Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	recvUntil(t, ctx, live, 10)
	other, err := j.Subscribe(ctx, "other", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	if err := st.DeleteSession(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	j.Forget("s")
	drain(t, ctx, live)
	if !errors.Is(live.Err(), journal.ErrDeleted) {
		t.Errorf("subscription of a forgotten session ended with %v, want ErrDeleted", live.Err())
	}
	// Events for it are not stored; the store says why.
	if _, err := j.AppendSync(ctx, msg("s", 11)); !errors.Is(err, journal.ErrDeleted) {
		t.Errorf("AppendSync to a deleted session: %v, want ErrDeleted", err)
	}
	if err := j.Flush(ctx, "s"); !errors.Is(err, journal.ErrDeleted) {
		t.Errorf("Flush of a deleted session after an append: %v, want ErrDeleted", err)
	}
	if err := j.Flush(ctx, "s"); err != nil {
		t.Errorf("Flush again: %v, want nil (already reported)", err)
	}
	if _, err := j.Subscribe(ctx, "s", 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Subscribe to a deleted session: %v, want ErrNotFound", err)
	}
	// The other session is unaffected.
	if _, err := j.AppendSync(ctx, msg("other", 1)); err != nil {
		t.Fatal(err)
	}
	recvUntil(t, ctx, other, 1)
}

// TestSubscriptionEnds: Close and the context end a subscription.
func TestSubscriptionEnds(t *testing.T) {
	ctx := testCtx(t)
	st := newStore(t, "s")
	j := newJournal(t, st, journal.Options{})
	sub, err := j.Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	drain(t, ctx, sub)
	if sub.Err() != nil {
		t.Errorf("Err after Close = %v, want nil", sub.Err())
	}
	cctx, cancel := context.WithCancel(ctx)
	sub, err = j.Subscribe(cctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	drain(t, ctx, sub)
	if !errors.Is(sub.Err(), context.Canceled) {
		t.Errorf("Err after the context ended = %v, want context.Canceled", sub.Err())
	}
}
