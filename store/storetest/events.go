package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// evs makes events from seq to seq `to` of session, of assorted types.
func evs(session string, from, to int64) []event.Event {
	var out []event.Event
	for seq := from; seq <= to; seq++ {
		out = append(out, event.Event{Session: session, Seq: seq, Time: base.Add(time.Duration(seq) * time.Millisecond),
			Turn: "t1", Data: event.AssistantDelta{Text: fmt.Sprintf("delta %d", seq)}})
	}
	return out
}

func testEvents(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	mustCreate(t, st, &store.Session{ID: "s1", Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})
	mustCreate(t, st, &store.Session{ID: "s2", Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})

	if n, err := st.LastSeq(ctx, "s1"); err != nil || n != 0 {
		t.Errorf("LastSeq of a session without events = %d, %v; want 0", n, err)
	}
	// One event of each kind of payload, with every envelope field.
	want := []event.Event{
		{Session: "s1", Seq: 1, Time: base, Data: event.SessionState{State: "idle", Reason: "created"}},
		{Session: "s1", Seq: 2, Time: base.Add(time.Second), Turn: "t1", Agent: "builtin", Repo: "api",
			Data: event.ToolStarted{CallID: "c1", Tool: "bash", Input: json.RawMessage(`{"command":"go test ./..."}`), Summary: "bash: go test"}},
		{Session: "s1", Seq: 3, Time: base.Add(2 * time.Second), Turn: "t1", Data: event.TerminalOutput{Data: []byte{0, 1, 2, 0xff, '\n'}}},
		{Session: "s1", Seq: 4, Time: base.Add(3 * time.Second), Turn: "t1",
			Data: event.TurnFinished{Result: "done", StopReason: "end_turn", Steps: 2, Usage: event.Usage{InputTokens: 10, OutputTokens: 2}, CostUSD: 0.01, DurationMS: 1500}},
		{Session: "s1", Seq: 5, Time: base.Add(4 * time.Second), Data: event.TodoUpdated{Items: []event.TodoItem{{Content: "a", Status: "completed"}}}},
	}
	// Interleaved with another session's events, in one batch.
	batch := append([]event.Event{}, want[:3]...)
	batch = append(batch, evs("s2", 1, 2)...)
	batch = append(batch, want[3:]...)
	if err := st.AppendEvents(ctx, batch); err != nil {
		t.Fatalf("AppendEvents: %v", err)
	}
	if err := st.AppendEvents(ctx, nil); err != nil {
		t.Errorf("AppendEvents(nil): %v", err)
	}
	got, err := st.Events(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	checkEvents(t, "Events(s1, 0, 0)", got, want)

	got, err = st.Events(ctx, "s1", 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkEvents(t, "Events(after 2)", got, want[2:])
	got, err = st.Events(ctx, "s1", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	checkEvents(t, "Events(after 1, limit 2)", got, want[1:3])
	if got, err := st.Events(ctx, "s1", 5, 0); err != nil || len(got) != 0 {
		t.Errorf("Events after the last = %v, %v; want none", got, err)
	}
	if got, err := st.Events(ctx, "nope", 0, 0); err != nil || len(got) != 0 {
		t.Errorf("Events(missing session) = %v, %v; want none", got, err)
	}
	if n, err := st.LastSeq(ctx, "s1"); err != nil || n != 5 {
		t.Errorf("LastSeq(s1) = %d, %v; want 5", n, err)
	}
	if n, err := st.LastSeq(ctx, "s2"); err != nil || n != 2 {
		t.Errorf("LastSeq(s2) = %d, %v; want 2", n, err)
	}

	// Many events, in several batches, come back in order.
	for from := int64(3); from <= 1000; from += 100 {
		if err := st.AppendEvents(ctx, evs("s2", from, from+99)); err != nil {
			t.Fatalf("AppendEvents(s2 %d..): %v", from, err)
		}
	}
	all, err := st.Events(ctx, "s2", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1002 {
		t.Fatalf("s2 has %d events, want 1002", len(all))
	}
	for i, ev := range all {
		if ev.Seq != int64(i+1) {
			t.Fatalf("s2 event %d has seq %d", i, ev.Seq)
		}
	}
}

func checkEvents(t *testing.T, what string, got, want []event.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d events, want %d", what, len(got), len(want))
		return
	}
	for i := range got {
		g, w := got[i], want[i]
		if !g.Time.Equal(w.Time) {
			t.Errorf("%s[%d]: time %v, want %v", what, i, g.Time, w.Time)
		}
		g.Time = w.Time
		// Payloads compare by their JSON (RawMessage may be re-spaced).
		gj, _ := json.Marshal(g.Data)
		wj, _ := json.Marshal(w.Data)
		if string(gj) != string(wj) || reflect.TypeOf(g.Data) != reflect.TypeOf(w.Data) {
			t.Errorf("%s[%d]: payload %T %s, want %T %s", what, i, g.Data, gj, w.Data, wj)
		}
		g.Data, w.Data = nil, nil
		if g != w {
			t.Errorf("%s[%d]: envelope %+v, want %+v", what, i, g, w)
		}
	}
}

// testEventConflicts: a batch with a seq that exists is refused whole.
func testEventConflicts(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	mustCreate(t, st, &store.Session{ID: "s1", Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})
	mustCreate(t, st, &store.Session{ID: "s2", Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})
	if err := st.AppendEvents(ctx, evs("s1", 1, 5)); err != nil {
		t.Fatal(err)
	}

	// New seqs 6..8 of s1 and 1..2 of s2, then 5 again: nothing is written.
	bad := append(evs("s1", 6, 8), evs("s2", 1, 2)...)
	bad = append(bad, evs("s1", 5, 5)...)
	err := st.AppendEvents(ctx, bad)
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AppendEvents with an existing seq: %v, want ErrConflict", err)
	}
	if n, _ := st.LastSeq(ctx, "s1"); n != 5 {
		t.Errorf("after a refused batch LastSeq(s1) = %d, want 5: part of the batch was written", n)
	}
	if n, _ := st.LastSeq(ctx, "s2"); n != 0 {
		t.Errorf("after a refused batch LastSeq(s2) = %d, want 0: part of the batch was written", n)
	}

	// A seq repeated inside one batch.
	dup := append(evs("s1", 6, 7), evs("s1", 7, 7)...)
	if err := st.AppendEvents(ctx, dup); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AppendEvents repeating a seq: %v, want ErrConflict", err)
	}
	if n, _ := st.LastSeq(ctx, "s1"); n != 5 {
		t.Errorf("LastSeq(s1) = %d, want 5", n)
	}

	// A missing session fails the batch too.
	if err := st.AppendEvents(ctx, append(evs("s1", 6, 6), evs("nope", 1, 1)...)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AppendEvents to a missing session: %v, want ErrNotFound", err)
	}
	if n, _ := st.LastSeq(ctx, "s1"); n != 5 {
		t.Errorf("LastSeq(s1) = %d, want 5", n)
	}

	// And the good part goes through on its own.
	if err := st.AppendEvents(ctx, evs("s1", 6, 8)); err != nil {
		t.Errorf("AppendEvents after the conflicts: %v", err)
	}
	got, _ := st.Events(ctx, "s1", 0, 0)
	checkEvents(t, "s1 after conflicts", got, evs("s1", 1, 8))
}
