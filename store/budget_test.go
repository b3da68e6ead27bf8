package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
	"github.com/harvest-dev/harvest/store/storetest"
)

// TestBoundedConformance: a bounded store is still a store.
func TestBoundedConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := sqlite.Open(filepath.Join(t.TempDir(), "harvest.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return store.Bounded(s)
	})
}

// TestBudgetSQLiteLocked: a write to a SQLite file another process holds
// locked (here another connection: harvest store migrate's HoldWrites)
// waits for the lock no longer than its budget, and fails as
// ErrUnavailable, naming the budget; the request's next call fails at
// once; a call without a budget still waits for the lock (and gets it
// once it is released).
func TestBudgetSQLiteLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "harvest.db")
	raw, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	s := store.Bounded(raw)
	other, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	release, err := other.HoldWrites(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	const budget = 300 * time.Millisecond
	ctx := store.WithBudget(t.Context(), budget)
	start := time.Now()
	err = s.CreateToken(ctx, &store.Token{ID: "tok-000000000001", Name: "a", Hash: []byte("h1")})
	took := time.Since(start)
	var te *store.TimeoutError
	if !errors.As(err, &te) || !errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a write to a locked file, budget %s: %v (%T), want a *store.TimeoutError that is ErrUnavailable", budget, err, err)
	}
	if te.Op != "CreateToken" || te.Budget != budget {
		t.Errorf("the error names %q and %s, want CreateToken and %s", te.Op, te.Budget, budget)
	}
	t.Logf("a write to a locked SQLite file, budget %s: gave up after %s", budget, took.Round(time.Millisecond))
	if took > budget+time.Second {
		t.Errorf("the write gave up %s after it began, its budget is %s", took, budget)
	}
	start = time.Now()
	if _, err := s.GetSession(ctx, "s-missing"); !errors.As(err, &te) {
		t.Errorf("the request's next call, after its budget ran out: %v, want a *store.TimeoutError at once", err)
	}
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Errorf("the request's next call took %s: after one call ran out of budget the others fail at once", took)
	}
	// Without a budget: waits, and succeeds once the lock is released.
	done := make(chan error, 1)
	go func() {
		done <- s.CreateToken(t.Context(), &store.Token{ID: "tok-000000000002", Name: "b", Hash: []byte("h2")})
	}()
	select {
	case err := <-done:
		t.Fatalf("a write without a budget returned while the file is locked: %v", err)
	case <-time.After(2 * budget):
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("a write without a budget, the lock released: %v", err)
	}
	// A fresh request's budget is whole again.
	if err := s.CreateToken(store.WithBudget(t.Context(), budget), &store.Token{ID: "tok-000000000003", Name: "c", Hash: []byte("h3")}); err != nil {
		t.Fatalf("a write with a budget, the file free: %v", err)
	}
}

// TestBudgetCallerContext: the caller's own context ending is the
// caller's error, not a timeout; a shorter budget on ctx is kept.
func TestBudgetCallerContext(t *testing.T) {
	ctx, cancel := context.WithCancel(store.WithBudget(t.Context(), time.Minute))
	cctx, done := store.Call(ctx, "X")
	cancel()
	<-cctx.Done()
	if err := done(cctx.Err()); !errors.Is(err, context.Canceled) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a call whose caller went away: %v, want context.Canceled", err)
	}
	short := store.WithBudget(t.Context(), time.Second)
	if got := store.BudgetOf(store.WithBudget(short, time.Minute)); got != time.Second {
		t.Errorf("a longer budget over a shorter one: %s, want the shorter (1s)", got)
	}
	if got := store.BudgetOf(store.WithBudget(short, 10*time.Millisecond)); got != 10*time.Millisecond {
		t.Errorf("a shorter budget over a longer one: %s, want 10ms", got)
	}
	if got := store.BudgetOf(context.WithoutCancel(short)); got != time.Second {
		t.Errorf("context.WithoutCancel drops the budget: %s", got)
	}
}

// TestBoundedCoversStore fails when Store gains a method that bounded*.go
// do not bound (the embedded Store would pass it through unbounded).
func TestBoundedCoversStore(t *testing.T) {
	defined := methodsIn(t, "bounded*.go", "bounded")
	st := reflect.TypeFor[store.Store]()
	for i := range st.NumMethod() {
		name := st.Method(i).Name
		if name == "Close" {
			continue
		}
		if !defined[name] {
			t.Errorf("store.Store.%s is not bounded by store.Bounded: add it to bounded.go", name)
		}
	}
}
