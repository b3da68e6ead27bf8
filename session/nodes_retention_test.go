package session

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
)

const month = 30 * 24 * time.Hour

// retainNow moves the clock by d and waits for the janitor's round at
// the new time (the tests leave it idle between rounds: the round the
// move fires is the one that ends next).
func retainNow(t testing.TB, e *env, d time.Duration) {
	t.Helper()
	target := e.Clock.Now().Add(d)
	e.Clock.Advance(d)
	// Done once a round that began after the clock moved has ended (a
	// round under way as it moved began before; the one after it is due
	// at once, d being at least CleanEvery).
	deadline := time.After(time.Minute)
	for {
		_, began, done := e.m.cleanRoundBegan()
		if !began.Before(target) {
			return
		}
		select {
		case <-done:
		case <-deadline:
			t.Fatalf("the janitor did not end a round begun after %v within a minute (the last began %v)", target, began)
		}
	}
}

// kept is evs without the bulky events and markers: the turn-level record.
func kept(evs []event.Event) []event.Event {
	var out []event.Event
	for _, ev := range evs {
		if !event.Bulky(ev.Type()) && ev.Type() != event.TypeEventsCompacted {
			out = append(out, ev)
		}
	}
	return out
}

// TestEventRetention: with a retention of 30 days, a session suspended
// for longer has its bulky events removed by the janitor, each run of
// them replaced by an events.compacted marker, its turn-level record
// kept as it was; a reader resuming inside a removed run gets the marker;
// a live session's events, however old, are all kept; and the compacted
// session, resumed by a message, goes on with the next seq.
func TestEventRetention(t *testing.T) {
	e := newEnv(t, withRetention(month))
	ctx := testbin.Context(t)
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	// A lifetime long enough to resume it after the retention.
	old := e.create("write a", func(r *CreateRequest) { r.Limits = store.Limits{MaxLifetime: 3 * month} })
	e.watch(old.ID).IdleAfter("t1")
	live := e.create("write a", func(r *CreateRequest) {
		r.Limits = store.Limits{IdleTimeout: 3 * month, MaxLifetime: 3 * month}
	})
	e.watch(live.ID).IdleAfter("t1")
	e.Clock.Advance(DefaultIdleTimeout)
	e.watch(old.ID).State(store.StateSuspended)

	before := stacktest.CheckGapless(t, e.st, old.ID)
	liveBefore := stacktest.CheckGapless(t, e.st, live.ID)
	firstBulky := int64(0)
	for _, ev := range before {
		if event.Bulky(ev.Type()) {
			firstBulky = ev.Seq
			break
		}
	}
	if firstBulky == 0 {
		t.Fatalf("the session has no bulky event to compact: %s", stacktest.Describe(before))
	}
	// Not yet 30 days: nothing is removed.
	retainNow(t, e, 29*24*time.Hour)
	if got := stacktest.CheckGapless(t, e.st, old.ID); len(got) != len(before) {
		t.Fatalf("29 days after: %d events, want all %d kept", len(got), len(before))
	}

	retainNow(t, e, 2*24*time.Hour)
	after := stacktest.CheckGapless(t, e.st, old.ID)
	markers, _ := stacktest.OfType[event.EventsCompacted](after)
	if len(markers) == 0 || len(after) >= len(before) {
		t.Fatalf("31 days after: %d events (%d markers), before %d: nothing compacted\n%s", len(after), len(markers), len(before), stacktest.Describe(after))
	}
	for _, ev := range after {
		if event.Bulky(ev.Type()) {
			t.Errorf("event %d (%s) survived compaction", ev.Seq, ev.Type())
		}
	}
	if k, kb := kept(after), kept(before); len(k) != len(kb) {
		t.Errorf("the turn-level record: %d events after, %d before", len(k), len(kb))
	} else {
		for i := range k {
			if k[i].Seq != kb[i].Seq || k[i].Type() != kb[i].Type() {
				t.Errorf("kept event %d: %d %s, was %d %s", i, k[i].Seq, k[i].Type(), kb[i].Seq, kb[i].Type())
			}
		}
	}
	if n := e.m.Retained(); n.Sessions != 1 || n.Events != int64(len(before)-len(kept(before))) || n.Bytes <= 0 {
		t.Errorf("Retained = %+v: want 1 session and its %d bulky events", n, len(before)-len(kept(before)))
	}
	if got := stacktest.CheckGapless(t, e.st, live.ID); len(got) != len(liveBefore) {
		t.Errorf("the live session, as old: %d events, want all %d kept", len(got), len(liveBefore))
	}
	last, err := e.st.LastSeq(ctx, old.ID)
	if err != nil || last != before[len(before)-1].Seq {
		t.Errorf("LastSeq after compaction = %d, %v; want %d", last, err, before[len(before)-1].Seq)
	}

	// A reader that had the events up to the first bulky one resumes: it
	// gets the marker of the run it was in, then the rest.
	sub, err := e.m.Subscribe(ctx, "", old.ID, firstBulky)
	if err != nil {
		t.Fatal(err)
	}
	first := <-sub.Events()
	sub.Close()
	if c, ok := first.Data.(event.EventsCompacted); !ok || c.From > firstBulky || first.Seq <= firstBulky || c.Missed(firstBulky) != first.Seq-firstBulky {
		t.Errorf("resuming after seq %d: first event %d %s %+v; want the marker of the run it is in", firstBulky, first.Seq, first.Type(), first.Data)
	}

	// The session comes back: its events go on from the last seq.
	e.send(old.ID, "msg again", "")
	w := e.watch(old.ID)
	w.IdleAfter("t2")
	evs := stacktest.CheckGapless(t, e.st, old.ID)
	if evs[len(after)].Seq != last+1 {
		t.Errorf("the first event after the resume has seq %d, want %d", evs[len(after)].Seq, last+1)
	}
	if msgs, turns := stacktest.OfType[event.AssistantMessage](evs[len(after):]); len(msgs) != 1 || turns[0] != "t2" {
		t.Errorf("the resumed turn's answer: %+v in turns %v", msgs, turns)
	}
}

// TestEventRetentionFencedByResume: a session resumed while the janitor
// compacts it (between two batches) keeps every event from then on: the
// next batch finds it live and removes nothing, and its new turn's
// events are all stored.
func TestEventRetentionFencedByResume(t *testing.T) {
	e := newEnv(t, withRetention(month))
	ctx := testbin.Context(t)
	old := e.create("write a", func(r *CreateRequest) { r.Limits = store.Limits{MaxLifetime: 3 * month} })
	e.m.ret.batch = 2
	var once sync.Once
	resumed := make(chan error, 1)
	// After the first batch that removed something, a message resumes the
	// session; the janitor goes on once the session's row says it is live
	// (its session.state event is journaled after the row is written).
	e.m.ret.between = func(id string) {
		if e.m.Retained().Events == 0 {
			return
		}
		once.Do(func() {
			resumed <- func() error {
				last, err := e.st.LastSeq(ctx, id)
				if err != nil {
					return err
				}
				sub, err := e.m.Subscribe(ctx, "", id, last)
				if err != nil {
					return err
				}
				defer sub.Close()
				if _, err := e.m.Send(ctx, "owner-1", id, "msg again", ""); err != nil {
					return err
				}
				for ev := range sub.Events() {
					if p, ok := ev.Data.(event.SessionState); ok && p.State != string(store.StateSuspended) {
						return nil
					}
				}
				return fmt.Errorf("the event stream ended (%v) before the session left suspended", sub.Err())
			}()
		})
	}
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	e.watch(old.ID).IdleAfter("t1")
	e.Clock.Advance(DefaultIdleTimeout)
	e.watch(old.ID).State(store.StateSuspended)
	before := stacktest.CheckGapless(t, e.st, old.ID)

	retainNow(t, e, month+time.Hour)
	select {
	case err := <-resumed:
		if err != nil {
			t.Fatalf("resuming the session between two batches: %v", err)
		}
	default:
		t.Fatal("the janitor did not compact the session in batches (no call between two)")
	}
	e.watch(old.ID).IdleAfter("t2")
	n := e.m.Retained()
	if n.Skipped != 1 || n.Sessions != 0 || n.Events == 0 {
		t.Errorf("Retained = %+v: want one batch done, then the session skipped (live)", n)
	}
	evs := stacktest.CheckGapless(t, e.st, old.ID)
	bulky := 0
	for _, ev := range evs {
		if event.Bulky(ev.Type()) {
			bulky++
		}
	}
	wantBulky := len(before) - len(kept(before)) - int(n.Events)
	if _, turns := stacktest.OfType[event.AssistantMessage](evs); len(turns) == 0 || turns[len(turns)-1] != "t2" || evs[len(evs)-1].Seq <= before[len(before)-1].Seq {
		t.Errorf("the resumed turn's events are not all there: %s", stacktest.Describe(evs))
	}
	// Everything t2 wrote is there, and of t1's only the first batch's
	// bulky events are gone.
	t2 := 0
	for _, ev := range evs {
		if ev.Turn == "t2" && event.Bulky(ev.Type()) {
			t2++
		}
	}
	if bulky != wantBulky+t2 {
		t.Errorf("%d bulky events after, want %d of t1 kept and t2's %d", bulky, wantBulky, t2)
	}
}

// TestEventRetentionOneNodeAtATime: while another node holds the
// retention lock, this node's janitor compacts nothing; once it is
// released, the next round does.
func TestEventRetentionOneNodeAtATime(t *testing.T) {
	e := newEnv(t, withRetention(month))
	ctx := testbin.Context(t)
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	v := e.create("write a")
	e.watch(v.ID).IdleAfter("t1")
	e.Clock.Advance(DefaultIdleTimeout)
	e.watch(v.ID).State(store.StateSuspended)
	before := stacktest.CheckGapless(t, e.st, v.ID)
	rounds := e.m.Retained().Rounds // the round at Recover's
	if _, err := e.st.AcquireLock(ctx, retentionLock, "node:other", time.Hour); err != nil {
		t.Fatal(err)
	}
	retainNow(t, e, month+time.Hour)
	if n := e.m.Retained(); n.Rounds != rounds || n.Events != 0 {
		t.Errorf("Retained = %+v while another node holds the lock: want nothing", n)
	}
	if got := stacktest.CheckGapless(t, e.st, v.ID); len(got) != len(before) {
		t.Errorf("%d events while another node holds the lock, want all %d", len(got), len(before))
	}
	if err := e.st.ReleaseLock(ctx, retentionLock, "node:other"); err != nil {
		t.Fatal(err)
	}
	retainNow(t, e, DefaultCleanEvery)
	if n := e.m.Retained(); n.Rounds != rounds+1 || n.Sessions != 1 {
		t.Errorf("Retained = %+v after the lock was released: want one round that compacted the session", n)
	}
	if _, err := e.st.GetLock(ctx, retentionLock); err == nil {
		t.Error("the retention lock is still held after the round")
	}
}
