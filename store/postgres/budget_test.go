package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
)

// TestBudgetFrozenServer: with the server frozen (it accepts
// connections and reads nothing), calls with a budget give up within it
// as a *store.TimeoutError (ErrUnavailable): reads, writes, and calls
// that wait for a connection of the pool (more calls than connections).
// pgx cuts a call by its context: the connection's deadline, then the
// connection is closed, so the pool keeps no connection with a
// half-read answer; after the thaw every call works at once, and a
// call made without a budget during the freeze (a runner's write) waits
// and is stored.
func TestBudgetFrozenServer(t *testing.T) {
	pg := testbin.PostgresServer(t)
	raw := open(t, pg.Database())
	s := store.Bounded(raw)
	ctx := testbin.Context(t)
	if err := s.CreateSession(ctx, &store.Session{ID: "s1", Owner: "o", State: store.StateWorking}, nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { s.GetSession(ctx, "s1") }) // connections in the pool
	}
	wg.Wait()

	thaw := pg.Freeze()
	frozen := time.Now()
	// A write without a budget, made during the freeze: it waits.
	unbounded := make(chan error, 1)
	go func() {
		unbounded <- s.AppendEvents(ctx, []event.Event{{Session: "s1", Seq: 1, Data: event.AssistantDelta{Text: "x"}}})
	}()
	const budget = 500 * time.Millisecond
	const calls = 12 // more than the pool's connections
	type result struct {
		what string
		took time.Duration
		err  error
	}
	results := make(chan result, calls)
	for i := range calls {
		wg.Go(func() {
			bctx := store.WithBudget(ctx, budget)
			start := time.Now()
			var err error
			what := "GetSession"
			switch i % 3 {
			case 0:
				_, err = s.GetSession(bctx, "s1")
			case 1:
				what = "CreateToken"
				err = s.CreateToken(bctx, &store.Token{ID: fmt.Sprintf("tok-%012d", i), Name: "t", Hash: []byte{byte(i)}})
			case 2:
				what = "Events"
				_, err = s.Events(bctx, "s1", 0, 10)
			}
			results <- result{what, time.Since(start), err}
		})
	}
	wg.Wait()
	close(results)
	var slowest time.Duration
	for r := range results {
		var te *store.TimeoutError
		if !errors.As(r.err, &te) || !errors.Is(r.err, store.ErrUnavailable) || te.Op != r.what {
			t.Errorf("%s, the server frozen, budget %s: %v, want a *store.TimeoutError of %s", r.what, budget, r.err, r.what)
		}
		slowest = max(slowest, r.took)
	}
	t.Logf("%d calls with a budget of %s, the server frozen: the slowest gave up after %s", calls, budget, slowest.Round(time.Millisecond))
	if slowest > budget+time.Second {
		t.Errorf("a call with a budget of %s gave up after %s", budget, slowest)
	}
	select {
	case err := <-unbounded:
		t.Fatalf("a write without a budget returned while the server is frozen: %v", err)
	default:
	}
	stat := raw.pool.Stat()
	t.Logf("the pool, frozen: %d connections (%d acquired or being made)", stat.TotalConns(), stat.AcquiredConns())

	thaw()
	thawed := time.Now()
	if err := <-unbounded; err != nil {
		t.Errorf("a write without a budget made during the freeze, after the thaw: %v", err)
	}
	t.Logf("the write without a budget was stored %s after the thaw (%s after the freeze)", time.Since(thawed).Round(time.Millisecond), time.Since(frozen).Round(time.Millisecond))
	// Every connection of the pool works: no cut call left one
	// half-read.
	for i := range 8 {
		wg.Go(func() {
			bctx := store.WithBudget(ctx, 5*time.Second)
			if _, err := s.GetSession(bctx, "s1"); err != nil {
				t.Errorf("a read after the thaw: %v", err)
			}
			if err := s.CreateToken(bctx, &store.Token{ID: fmt.Sprintf("tok-%012d", 100+i), Name: "t", Hash: []byte{byte(100 + i)}}); err != nil {
				t.Errorf("a write after the thaw: %v", err)
			}
		})
	}
	wg.Wait()
	if evs, err := s.Events(context.Background(), "s1", 0, 10); err != nil || len(evs) != 1 {
		t.Errorf("the events after the thaw: %v %v, want the one written during the freeze", evs, err)
	}
}
