package journal_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/journal"
)

// recorder is a Publisher that keeps what it is given.
type recorder struct {
	mu  sync.Mutex
	evs []event.Event
}

func (r *recorder) Publish(evs []event.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, evs...)
	r.mu.Unlock()
}

func (r *recorder) seqs(session string) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int64
	for _, ev := range r.evs {
		if ev.Session == session {
			out = append(out, ev.Seq)
		}
	}
	return out
}

// TestPublisherGetsCommittedEvents: the Publisher is handed every
// committed event, in seq order, with its typed payload, and never one the
// store refused.
func TestPublisherGetsCommittedEvents(t *testing.T) {
	ctx := testCtx(t)
	st := newStore(t, "s1", "s2")
	rec := &recorder{}
	j := journal.New(st, journal.Options{Logger: logTo(t), Publisher: rec})
	defer j.Close(context.Background())

	for i := range 50 {
		if _, err := j.Append(event.Event{Session: []string{"s1", "s2"}[i%2], Data: event.AssistantMessage{Text: "x"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := j.Append(event.Event{Session: "gone", Data: event.AssistantMessage{Text: "x"}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s1", "s2"} {
		if err := j.Flush(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Flush(ctx, "gone"); err == nil {
		t.Fatal("flushing a session the store does not have: no error")
	}
	want := make([]int64, 25)
	for i := range want {
		want[i] = int64(i + 1)
	}
	for _, id := range []string{"s1", "s2"} {
		if got := rec.seqs(id); !slices.Equal(got, want) {
			t.Errorf("published seqs of %s = %v, want %v", id, got, want)
		}
	}
	if got := rec.seqs("gone"); len(got) != 0 {
		t.Errorf("published events the store refused: %v", got)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if d, ok := rec.evs[0].Data.(event.AssistantMessage); !ok || d.Text != "x" {
		t.Errorf("published payload = %#v, want the typed event.AssistantMessage", rec.evs[0].Data)
	}
}
