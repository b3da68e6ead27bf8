package server_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// endedTurn runs a "long task" turn of a session of Alice's to its end
// and stops the session: a session with bulky events (a tool call, its
// output, text) that retention may compact. It returns the session's id.
func endedTurn(t *testing.T, e *apiEnv) string {
	t.Helper()
	ctx := testbin.Context(t)
	v := e.create(e.AliceC, "long task")
	waitRunning(t, e, v.ID)
	full, err := e.AdminC.GetSession(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	release(t, full)
	st := e.AliceC.Events(ctx, v.ID, client.StreamOptions{})
	defer st.Close()
	stacktest.ReadUntil(t, st, "the turn's end", stacktest.TurnEnded("t1"))
	if err := e.AliceC.Stop(ctx, v.ID, wire.StopRequest{Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	stacktest.ReadUntil(t, st, "the session stopped", stacktest.IsState(store.StateStopped))
	return v.ID
}

// compact compacts session id's events as retention does once the
// session has not been live for longer than the policy: idleBefore in the
// future stands for the policy's cutoff having passed its last update.
func compact(t *testing.T, e *apiEnv, id string) store.Compacted {
	t.Helper()
	var sum store.Compacted
	for {
		c, err := e.Store.CompactEvents(testbin.Context(t), id, time.Now().Add(time.Hour), 1000)
		if err != nil {
			t.Fatal(err)
		}
		if c.Skipped != "" {
			t.Fatalf("compacting session %s: skipped (%s)", id, c.Skipped)
		}
		sum.Removed += c.Removed
		if c.Done {
			return sum
		}
	}
}

// TestEventsCompactedOnTheAPI: once retention removed a session's bulky
// events, the log page, the SSE stream (from the start and with a
// Last-Event-ID inside a removed run) and the client's Stream give an
// events.compacted event in their place, with the seq of the run's last
// event, and last_seq does not move.
func TestEventsCompactedOnTheAPI(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	id := endedTurn(t, e)
	before, err := e.AliceC.EventLog(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var inRun int64 // a seq inside the first bulky run
	for _, ev := range before.Events {
		if event.Bulky(ev.Type()) {
			inRun = ev.Seq
			break
		}
	}
	if c := compact(t, e, id); c.Removed == 0 || inRun == 0 {
		t.Fatalf("nothing to compact: %+v\n%s", c, stacktest.Describe(before.Events))
	}

	after, err := e.AliceC.EventLog(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if after.LastSeq != before.LastSeq {
		t.Errorf("last_seq %d after compaction, %d before", after.LastSeq, before.LastSeq)
	}
	next := int64(1)
	markers := 0
	for _, ev := range after.Events {
		from := ev.Seq
		if c, ok := ev.Data.(event.EventsCompacted); ok {
			markers++
			from = c.From
		} else if event.Bulky(ev.Type()) {
			t.Errorf("event %d (%s) is still there", ev.Seq, ev.Type())
		}
		if from != next {
			t.Errorf("event %d (%s) stands for seqs from %d, want %d: a silent gap", ev.Seq, ev.Type(), from, next)
		}
		next = ev.Seq + 1
	}
	if markers == 0 {
		t.Fatalf("no events.compacted event in the log:\n%s", stacktest.Describe(after.Events))
	}

	// A page after a seq inside the run starts with its marker.
	page, err := e.AliceC.EventLog(ctx, id, inRun, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 1 {
		t.Fatalf("the page after seq %d: %d events", inRun, len(page.Events))
	}
	mark := page.Events[0]
	c, ok := mark.Data.(event.EventsCompacted)
	if !ok || c.From > inRun || mark.Seq < inRun || c.To != mark.Seq || c.Reason != event.RetentionReason {
		t.Fatalf("the page after seq %d starts with %d %s %+v; want the marker of its run", inRun, mark.Seq, mark.Type(), mark.Data)
	}

	// SSE, resumed with Last-Event-ID inside the run: the marker first,
	// on the wire as any event.
	raw := e.openRaw(e.Alice, id, http.Header{"Last-Event-ID": {strconv.FormatInt(inRun, 10)}}, "")
	first, err := raw.next()
	if err != nil {
		t.Fatal(err)
	}
	var wireMark struct {
		Seq  int64                 `json:"seq"`
		Type string                `json:"type"`
		Data event.EventsCompacted `json:"data"`
	}
	if err := json.Unmarshal([]byte(first.data), &wireMark); err != nil {
		t.Fatal(err)
	}
	if first.id != strconv.FormatInt(mark.Seq, 10) || first.typ != "events.compacted" || wireMark.Data != c || wireMark.Seq != mark.Seq {
		t.Errorf("SSE after Last-Event-ID %d: id %s, event %s, data %s; want id %d, events.compacted, %+v", inRun, first.id, first.typ, first.data, mark.Seq, c)
	}

	// The client's stream from the start: every event once, in order, the
	// marker where the run was.
	st := e.AliceC.Events(ctx, id, client.StreamOptions{})
	defer st.Close()
	got := stacktest.ReadUntil(t, st, "the last event", func(ev event.Event) bool { return ev.Seq == after.LastSeq })
	if len(got) != len(after.Events) {
		t.Errorf("the stream gave %d events, the log %d:\n%s", len(got), len(after.Events), stacktest.Describe(got))
	}
}
