package stacktest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/store"
)

// Subscribe opens a session's events after seq after (a Manager's
// Subscribe, bound to the session).
type Subscribe func(after int64) (*journal.Subscription, error)

// Watcher reads a session's events as they are committed, through a
// journal subscription. A subscription cut off as too slow is reopened
// where it stopped, so a watcher sees every event once.
type Watcher struct {
	t         testing.TB
	id        string
	subscribe Subscribe
	// Sub is the subscription read now (a new one after a cut-off).
	Sub *journal.Subscription
	// Seen is every event read so far, in order.
	Seen []event.Event
}

// Watch subscribes to session id's events from the start; the
// subscription is closed when the test ends.
func Watch(t testing.TB, id string, subscribe Subscribe) *Watcher {
	t.Helper()
	w := &Watcher{t: t, id: id, subscribe: subscribe}
	w.resubscribe(0)
	t.Cleanup(func() { w.Sub.Close() })
	return w
}

func (w *Watcher) resubscribe(after int64) {
	w.t.Helper()
	sub, err := w.subscribe(after)
	if err != nil {
		w.t.Fatal(err)
	}
	w.Sub = sub
}

// Until reads events until one satisfies pred and returns it, failing the
// test if the stream ends or none comes within WaitTimeout.
func (w *Watcher) Until(what string, pred func(event.Event) bool) event.Event {
	w.t.Helper()
	deadline := time.NewTimer(WaitTimeout)
	defer deadline.Stop()
	for {
		select {
		case ev, ok := <-w.Sub.C:
			if !ok {
				err := w.Sub.Err()
				if errors.Is(err, journal.ErrTooSlow) {
					w.resubscribe(w.lastSeq())
					continue
				}
				w.t.Fatalf("session %s: the event stream ended (%v) while waiting for %s; seen: %s", w.id, err, what, Describe(w.Seen))
			}
			w.Seen = append(w.Seen, ev)
			if pred(ev) {
				return ev
			}
		case <-deadline.C:
			w.t.Fatalf("session %s: no %s within %s; seen: %s", w.id, what, WaitTimeout, Describe(w.Seen))
		}
	}
}

func (w *Watcher) lastSeq() int64 {
	if len(w.Seen) == 0 {
		return 0
	}
	return w.Seen[len(w.Seen)-1].Seq
}

// Typed waits for a payload of type T (in turn, if not "") matching pred
// (any, if nil).
func Typed[T event.Payload](w *Watcher, turn string, pred func(T) bool) T {
	w.t.Helper()
	var zero T
	ev := w.Until(fmt.Sprintf("%s in turn %q", zero.EventType(), turn), func(ev event.Event) bool {
		p, ok := ev.Data.(T)
		return ok && (turn == "" || ev.Turn == turn) && (pred == nil || pred(p))
	})
	return ev.Data.(T)
}

// State waits for the session to enter st.
func (w *Watcher) State(st store.State) event.SessionState {
	w.t.Helper()
	return Typed(w, "", func(p event.SessionState) bool { return p.State == string(st) })
}

// Finished waits for turn to finish.
func (w *Watcher) Finished(turn string) event.TurnFinished {
	w.t.Helper()
	return Typed[event.TurnFinished](w, turn, nil)
}

// IdleAfter waits for turn to end (finished, failed or cancelled) and
// then for the session to be idle.
func (w *Watcher) IdleAfter(turn string) {
	w.t.Helper()
	w.Until("the end of turn "+turn, TurnEnded(turn))
	w.State(store.StateIdle)
}

// ReadUntil reads an API event stream until a stored event satisfies
// pred and returns every stored event read, failing the test if the
// stream ends first. Live pieces (event/live.go: token deltas and output
// sent as they come, never stored) are skipped: the stored event that
// joins them follows, with the next seq, so what is returned is the
// durable record, seqs without gaps.
func ReadUntil(t testing.TB, st *client.Stream, what string, pred func(event.Event) bool) []event.Event {
	t.Helper()
	var seen []event.Event
	for {
		ev, err := st.Next()
		if err != nil {
			t.Fatalf("waiting for %s: %v; seen:%s", what, err, Describe(seen))
		}
		if ev.Live > 0 {
			continue
		}
		seen = append(seen, ev)
		if pred(ev) {
			return seen
		}
	}
}

// TurnEnded holds for the event that ends turn: finished, failed or
// cancelled.
func TurnEnded(turn string) func(event.Event) bool {
	return func(ev event.Event) bool {
		switch ev.Data.(type) {
		case event.TurnFinished, event.TurnFailed, event.TurnCancelled:
			return ev.Turn == turn
		}
		return false
	}
}

// IsState holds for the session.state event that enters s.
func IsState(s store.State) func(event.Event) bool {
	return func(ev event.Event) bool {
		p, ok := ev.Data.(event.SessionState)
		return ok && p.State == string(s)
	}
}

// OfType returns the payloads of type T among evs, with their turns.
func OfType[T event.Payload](evs []event.Event) (out []T, turns []string) {
	for _, ev := range evs {
		if p, ok := ev.Data.(T); ok {
			out = append(out, p)
			turns = append(turns, ev.Turn)
		}
	}
	return out, turns
}

// Describe is evs one a line (seq, turn, type, the payload cut short), for
// a failure message.
func Describe(evs []event.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		s := fmt.Sprintf("%+v", ev.Data)
		if len(s) > 160 {
			s = s[:160] + "..."
		}
		fmt.Fprintf(&b, "\n  %d %s %s %s", ev.Seq, ev.Turn, ev.Type(), s)
	}
	return b.String()
}

// CheckGapless reads all of a session's events from the store, checks
// their seqs are 1, 2, 3... with no gap or repeat (an events.compacted
// event stands for the seqs from its From to its own: event/retention.go),
// and returns them.
func CheckGapless(t testing.TB, st store.Store, id string) []event.Event {
	t.Helper()
	evs, err := st.Events(testbin.Context(t), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	next := int64(1)
	for i, ev := range evs {
		from := ev.Seq
		if c, ok := ev.Data.(event.EventsCompacted); ok {
			if c.To != ev.Seq {
				t.Fatalf("session %s: the events.compacted event at seq %d says it ends at %d", id, ev.Seq, c.To)
			}
			from = c.From
		}
		if from != next {
			t.Fatalf("session %s: event %d (%s) stands for seqs %d to %d, want from %d: the seqs have a gap or a repeat", id, i+1, ev.Type(), from, ev.Seq, next)
		}
		next = ev.Seq + 1
	}
	return evs
}
