package postgres

import (
	"errors"
	"sync"
	"testing"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
)

// TestServerRestart: while the server is down, reads and writes fail
// with store.ErrUnavailable; once it is back, the first of each works,
// though every connection the pool had is dead (on reads, a begin, and
// statements from several goroutines at once).
func TestServerRestart(t *testing.T) {
	pg := testbin.PostgresServer(t)
	s := open(t, pg.Database())
	ctx := testbin.Context(t)
	if err := s.CreateSession(ctx, &store.Session{ID: "s1", Owner: "o", State: store.StateWorking}, nil); err != nil {
		t.Fatal(err)
	}
	// Fill the pool with connections that the restart kills.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { s.GetSession(ctx, "s1") })
	}
	wg.Wait()

	pg.Stop()
	if _, err := s.GetSession(ctx, "s1"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a read, the server down: %v, want ErrUnavailable", err)
	}
	if err := s.AppendEvents(ctx, []event.Event{{Session: "s1", Seq: 1, Data: event.AssistantDelta{Text: "x"}}}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a write, the server down: %v, want ErrUnavailable", err)
	}
	pg.Start()

	// Each kind of statement, first after a restart, with every pooled
	// connection dead.
	seq := int64(0)
	for _, c := range []struct {
		what string
		op   func() error
	}{
		{"a read (QueryRow)", func() error { _, err := s.GetSession(ctx, "s1"); return err }},
		{"a query (Query)", func() error { _, err := s.Events(ctx, "s1", 0, 10); return err }},
		{"a write (BeginTx)", func() error {
			seq++
			return s.AppendEvents(ctx, []event.Event{{Session: "s1", Seq: seq, Data: event.AssistantDelta{Text: "x"}}})
		}},
	} {
		for range 4 {
			wg.Go(func() { s.GetSession(ctx, "s1") })
		}
		wg.Wait()
		pg.Stop()
		pg.Start()
		if err := c.op(); err != nil {
			t.Errorf("%s, first after a restart: %v", c.what, err)
		}
	}
	evs, err := s.Events(ctx, "s1", 0, 10)
	if err != nil || len(evs) != 1 {
		t.Errorf("the events after the restarts: %v %v", evs, err)
	}
}
