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
	"github.com/harvest-dev/harvest/store/sqlite"
)

// failingWith fails the first `fails` calls of AppendEventsWith without
// writing.
type failingWith struct {
	*sqlite.Store
	mu    sync.Mutex
	fails int
	calls int
}

func (f *failingWith) AppendEventsWith(ctx context.Context, evs []event.Event, msgs []*store.Message) error {
	f.mu.Lock()
	f.calls++
	fail := f.calls <= f.fails
	f.mu.Unlock()
	if fail {
		return errInjected
	}
	return f.Store.AppendEventsWith(ctx, evs, msgs)
}

// TestAppendMessage: a message appended with its event is stored in the
// event's commit, among other events in seq order, retried with it when the
// store fails, and given its Seq; a message the store refuses takes its
// event with it and leaves no gap.
func TestAppendMessage(t *testing.T) {
	ctx := testCtx(t)
	st := &failingWith{Store: newStore(t, "s"), fails: 2}
	j := newJournal(t, st, journal.Options{})
	sub, err := j.Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	var wg sync.WaitGroup
	for i := range 3 {
		if _, err := j.Append(msg("s", i)); err != nil {
			t.Fatal(err)
		}
	}
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := &store.Message{ID: fmt.Sprintf("m%d", i), Session: "s", Text: fmt.Sprintf("text %d", i), Key: fmt.Sprintf("k%d", i), KeyOwner: "o"}
			ev, err := j.AppendMessage(ctx, event.Event{Session: "s", Data: event.MessageQueued{MessageID: m.ID, Text: m.Text}}, m)
			if err == nil && (m.Seq == 0 || ev.Seq == 0) {
				err = fmt.Errorf("message %s: seq %d, event seq %d after AppendMessage", m.ID, m.Seq, ev.Seq)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if st.calls <= st.fails {
		t.Fatalf("AppendEventsWith was called %d times: the injected failures were not hit", st.calls)
	}
	msgs, err := st.Messages(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != n {
		t.Fatalf("%d messages stored, want %d", len(msgs), n)
	}
	queued := map[string]int64{}
	evs, err := st.Events(ctx, "s", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: a gap", i, ev.Seq)
		}
		if q, ok := ev.Data.(event.MessageQueued); ok {
			queued[q.MessageID] = ev.Seq
		}
	}
	for _, m := range msgs {
		if queued[m.ID] == 0 {
			t.Errorf("message %s was stored without its message.queued event", m.ID)
		}
	}

	// A key that is taken: neither the message nor its event is stored,
	// and the next event takes the seq.
	dup := &store.Message{ID: "dup", Session: "s", Text: "dup", Key: "k1", KeyOwner: "o"}
	if _, err := j.AppendMessage(ctx, event.Event{Session: "s", Data: event.MessageQueued{MessageID: "dup"}}, dup); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AppendMessage with a taken key: %v, want ErrConflict", err)
	}
	next, err := j.AppendSync(ctx, msg("s", 99))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len(evs) + 1); next.Seq != want {
		t.Fatalf("the event after a refused message got seq %d, want %d", next.Seq, want)
	}
	for seen := int64(0); seen < next.Seq; {
		ev, ok := <-sub.C
		if !ok {
			t.Fatalf("subscription ended after seq %d: %v", seen, sub.Err())
		}
		if ev.Seq != seen+1 {
			t.Fatalf("subscriber got seq %d after %d", ev.Seq, seen)
		}
		seen = ev.Seq
	}
}
