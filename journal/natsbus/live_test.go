package natsbus_test

import (
	"fmt"
	"testing"

	"github.com/harvest-dev/harvest/event"
)

// TestFollowLivePieces: a follower on another node gets a reply's live
// pieces over NATS as they come, in the row of their run, and every
// stored event once with no seq skipped; a Joiner over what it got shows
// the text once.
func TestFollowLivePieces(t *testing.T) {
	ctx := testCtx(t)
	ns := startNATS(t)
	db := dbWith(t, "s")
	a := newNode(t, db, config(ns.url(), t), nil)
	b := newNode(t, db, config(ns.url(), t), nil)

	f, err := b.bus.Follow(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A first event, read: the follower is past its catch-up, at seq 1.
	if _, err := a.j.Append(event.Event{Session: "s", Turn: "t", Data: event.TurnStarted{}}); err != nil {
		t.Fatal(err)
	}
	expect(t, f, 1, 1)
	var text string
	for i := range 300 {
		w := fmt.Sprintf("w%d ", i)
		text += w
		if _, err := a.j.Append(event.Event{Session: "s", Turn: "t", Data: event.AssistantDelta{Text: w}}); err != nil {
			t.Fatal(err)
		}
		if i == 150 {
			if _, err := a.j.Append(event.Event{Session: "s", Turn: "t", Data: event.ToolStarted{CallID: "c"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := a.j.Append(event.Event{Session: "s", Turn: "t", Data: event.AssistantMessage{Text: text}}); err != nil {
		t.Fatal(err)
	}
	if err := a.j.Flush(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	stored, err := a.st.Events(ctx, "s", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 5 { // turn.started, deltas, tool.started, deltas, message
		t.Fatalf("%d events stored, want 5", len(stored))
	}

	var got []event.Event
	for len(got) == 0 || got[len(got)-1].Seq != 5 || got[len(got)-1].Live != 0 {
		select {
		case ev, ok := <-f.C:
			if !ok {
				t.Fatalf("the follower ended: %v", f.Err())
			}
			got = append(got, ev)
		case <-ctx.Done():
			t.Fatalf("waiting for seq 5: got %d events: %v", len(got), ctx.Err())
		}
	}
	last := int64(1)
	next, live := 1, 0
	var j event.Joiner
	shown := ""
	for i, ev := range got {
		if ev.Live > 0 {
			if ev.Seq != last || ev.Live != next {
				t.Fatalf("event %d: live piece %d at seq %d, want piece %d at seq %d", i, ev.Live, ev.Seq, next, last)
			}
			next++
			live++
		} else {
			if ev.Seq != last+1 {
				t.Fatalf("event %d: seq %d after %d", i, ev.Seq, last)
			}
			last, next = ev.Seq, 1
		}
		if ev, ok := j.Next(ev); ok {
			if d, ok := ev.Data.(event.AssistantDelta); ok {
				shown += d.Text
			}
		}
	}
	if shown != text {
		t.Fatalf("a Joiner over the follower's events shows %q, want %q", shown, text)
	}
	if live != 300 {
		t.Errorf("%d live pieces came over NATS, want 300", live)
	}
}
