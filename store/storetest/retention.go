package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// retentionSession is a session's events as a turn leaves them: the
// turn-level record (kept) around text, thinking, tool calls and terminal
// bytes (bulky), ending with a bulky run.
func retentionSession(id string) []event.Event {
	ps := []event.Payload{
		event.SessionState{State: "idle"},                                   // 1
		event.MessageQueued{MessageID: "m1", Text: "fix it", Mode: "queue"}, // 2
		event.TurnStarted{Prompt: "fix it"},                                 // 3
		event.AssistantDelta{Text: "Let me look"},                           // 4
		event.AssistantMessage{Text: "Let me look"},                         // 5
		event.ToolStarted{CallID: "c1", Tool: "bash", Summary: "bash: ls"},  // 6
		event.ToolOutput{CallID: "c1", Text: "a\nb\n"},                      // 7
		event.ToolFinished{CallID: "c1", Tool: "bash", Output: "a\nb\n"},    // 8
		event.StepFinished{Step: 1, Usage: event.Usage{InputTokens: 10}},    // 9
		event.Thinking{Text: "hm"},                                          // 10
		event.TurnFinished{Result: "done", Steps: 1},                        // 11
		event.TerminalOutput{Data: []byte("xyz")},                           // 12
		event.ToolOutput{CallID: "c2", Text: "late"},                        // 13
	}
	out := make([]event.Event, len(ps))
	for i, p := range ps {
		out[i] = event.Event{Session: id, Seq: int64(i + 1), Time: base.Add(time.Duration(i) * time.Second), Turn: "t1", Data: p}
	}
	return out
}

// marker is the events.compacted event standing for seqs from..to.
func marker(id string, from, to int64, at time.Time) event.Event {
	return event.Event{Session: id, Seq: to, Time: at, Data: event.EventsCompacted{From: from, To: to, Reason: event.RetentionReason}}
}

// compactAll compacts session id in batches of batch until it is done,
// and returns the sums.
func compactAll(t *testing.T, st store.Store, id string, idleBefore time.Time, batch int) store.Compacted {
	t.Helper()
	var sum store.Compacted
	for range 100 {
		c, err := st.CompactEvents(context.Background(), id, idleBefore, batch)
		if err != nil {
			t.Fatalf("CompactEvents(%s, batch %d): %v", id, batch, err)
		}
		if c.Skipped != "" {
			t.Fatalf("CompactEvents(%s): skipped (%s)", id, c.Skipped)
		}
		sum.Removed += c.Removed
		sum.Markers += c.Markers
		sum.Bytes += c.Bytes
		sum.Through = c.Through
		if c.Done {
			sum.Done = true
			return sum
		}
	}
	t.Fatalf("CompactEvents(%s) not done after 100 batches of %d", id, batch)
	return sum
}

func testRetention(t *testing.T, open func(*testing.T) store.Store) {
	ctx := context.Background()
	later := base.Add(time.Hour)
	for _, batch := range []int{1, 3, 1000} {
		t.Run(fmt.Sprintf("batch%d", batch), func(t *testing.T) {
			st := open(t)
			id := "s1"
			mustCreate(t, st, &store.Session{ID: id, Owner: "o", State: store.StateStopped, CreatedAt: base, UpdatedAt: base})
			all := retentionSession(id)
			if err := st.AppendEvents(ctx, all); err != nil {
				t.Fatal(err)
			}
			// Updated at or after idleBefore: nothing is done.
			if c, err := st.CompactEvents(ctx, id, base, batch); err != nil || c.Skipped != store.SkippedActive || c.Removed != 0 {
				t.Errorf("CompactEvents of a session updated at idleBefore = %+v, %v; want skipped (active)", c, err)
			}
			sum := compactAll(t, st, id, later, batch)
			if sum.Removed != 8 || sum.Markers != 3 || sum.Through != 13 || sum.Bytes <= 0 {
				t.Errorf("compacted %+v: want 8 removed, 3 markers, through 13, bytes > 0", sum)
			}
			want := []event.Event{all[0], all[1], all[2], marker(id, 4, 8, all[7].Time), all[8], marker(id, 10, 10, all[9].Time), all[10], marker(id, 12, 13, all[12].Time)}
			got, err := st.Events(ctx, id, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			stripTurn(want)
			checkEvents(t, "the compacted events", got, want)
			// A reader resuming inside a run gets its marker.
			got, err = st.Events(ctx, id, 5, 2)
			if err != nil {
				t.Fatal(err)
			}
			checkEvents(t, "Events(after 5, limit 2)", got, want[3:5])
			if n, err := st.LastSeq(ctx, id); err != nil || n != 13 {
				t.Errorf("LastSeq after compaction = %d, %v; want 13 (a compacted tail keeps its last seq)", n, err)
			}
			// Again: nothing to do.
			if c, err := st.CompactEvents(ctx, id, later, batch); err != nil || c.Removed != 0 || c.Markers != 0 || !c.Done {
				t.Errorf("CompactEvents again = %+v, %v; want nothing done", c, err)
			}
		})
	}

	t.Run("Resumed", func(t *testing.T) {
		st := open(t)
		id := "s1"
		mustCreate(t, st, &store.Session{ID: id, Owner: "o", State: store.StateSuspended, CreatedAt: base, UpdatedAt: base})
		all := retentionSession(id)
		if err := st.AppendEvents(ctx, all); err != nil {
			t.Fatal(err)
		}
		compactAll(t, st, id, later, 1000)
		// It comes back: live, so never compacted, and its events go on
		// from the last seq; the marker's seq is taken.
		if _, err := st.UpdateSession(ctx, id, func(s *store.Session) error { s.State = store.StateIdle; return nil }); err != nil {
			t.Fatal(err)
		}
		if err := st.AppendEvents(ctx, []event.Event{{Session: id, Seq: 13, Time: later, Data: event.SessionState{State: "idle"}}}); !errors.Is(err, store.ErrConflict) {
			t.Errorf("appending seq 13 (the marker's) = %v, want ErrConflict", err)
		}
		next := []event.Event{
			{Session: id, Seq: 14, Time: later, Turn: "t2", Data: event.ToolOutput{CallID: "c3", Text: "more"}},
			{Session: id, Seq: 15, Time: later, Turn: "t2", Data: event.TurnFinished{Result: "again"}},
		}
		if err := st.AppendEvents(ctx, next); err != nil {
			t.Fatalf("appending after the compacted tail: %v", err)
		}
		far := time.Now().Add(time.Hour) // after the update's time, whatever the store's clock
		if c, err := st.CompactEvents(ctx, id, far, 1000); err != nil || c.Skipped != store.SkippedLive || c.Removed != 0 {
			t.Errorf("CompactEvents of a live session = %+v, %v; want skipped (live)", c, err)
		}
		if got, err := st.Events(ctx, id, 13, 0); err != nil || len(got) != 2 {
			t.Errorf("the live session's new events = %d, %v; want both kept", len(got), err)
		}
		// It ends again: the new run joins the old tail's marker.
		if _, err := st.UpdateSession(ctx, id, func(s *store.Session) error { s.State = store.StateStopped; return nil }); err != nil {
			t.Fatal(err)
		}
		if c := compactAll(t, st, id, far, 1000); c.Removed != 1 || c.Markers != 0 {
			t.Errorf("compacting the new events: %+v, want 1 removed and the marker count unchanged (joined)", c)
		}
		got, err := st.Events(ctx, id, 11, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkEvents(t, "the events after seq 11", got, []event.Event{marker(id, 12, 14, later), {Session: id, Seq: 15, Time: later, Turn: "t2", Data: next[1].Data}})
	})

	t.Run("Candidates", func(t *testing.T) {
		st := open(t)
		states := map[string]store.State{
			"a": store.StateStopped, "b": store.StateFailed, "c": store.StateSuspended, "d": store.StateIdle,
			"e": store.StateStopped, "f": store.StateStopped, "g": store.StateWorking,
		}
		for i, id := range []string{"a", "b", "c", "d", "e", "f", "g"} {
			at := base.Add(time.Duration(i%3) * time.Minute) // ties on the time: ordered by id
			if id == "f" {
				at = later // not before the cutoff
			}
			mustCreate(t, st, &store.Session{ID: id, Owner: "o", State: states[id], CreatedAt: base, UpdatedAt: at})
			if id != "e" { // e has no events: nothing to compact
				if err := st.AppendEvents(ctx, retentionSession(id)); err != nil {
					t.Fatal(err)
				}
			}
		}
		// In (updated_at, id) order: a, d(live), g(live) at +0; b, e at
		// +1m; c at +2m.
		list := func(after store.RetentionKey, limit int) []store.RetentionCandidate {
			t.Helper()
			cs, err := st.RetentionCandidates(ctx, later, after, limit)
			if err != nil {
				t.Fatalf("RetentionCandidates: %v", err)
			}
			return cs
		}
		var ids []string
		var key store.RetentionKey
		for range 10 {
			page := list(key, 2)
			for _, c := range page {
				ids = append(ids, fmt.Sprintf("%s:%v", c.ID, c.Compacted))
				key = store.RetentionKey{UpdatedAt: c.UpdatedAt, ID: c.ID}
			}
			if len(page) < 2 {
				break
			}
		}
		if want := []string{"a:false", "b:false", "e:true", "c:false"}; !slices.Equal(ids, want) {
			t.Errorf("the candidates, paged by 2: %v, want %v", ids, want)
		}
		compactAll(t, st, "b", later, 1000)
		cs := list(store.RetentionKey{UpdatedAt: base, ID: "a"}, 10)
		if len(cs) != 3 || cs[0].ID != "b" || !cs[0].Compacted || !cs[0].UpdatedAt.Equal(base.Add(time.Minute)) {
			t.Errorf("the candidates after a: %+v; want b first, compacted, updated at +1m", cs)
		}
		if _, err := st.RetentionCandidates(ctx, later, store.RetentionKey{}, 0); err == nil {
			t.Error("RetentionCandidates with limit 0: no error")
		}
		if _, err := st.CompactEvents(ctx, "nope", later, 10); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("CompactEvents of a missing session = %v, want ErrNotFound", err)
		}
		// Deleting a compacted session takes its progress with it.
		if err := st.DeleteSession(ctx, "b"); err != nil {
			t.Fatalf("deleting a compacted session: %v", err)
		}
	})
}

// stripTurn clears the turn of markers (they span turns: they have none).
func stripTurn(evs []event.Event) {
	for i := range evs {
		if evs[i].Type() == event.TypeEventsCompacted {
			evs[i].Turn = ""
		}
	}
}
