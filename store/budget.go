package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// A store call's budget: how long a call made for an API request may
// wait for the store before it gives up. Without one, a request reaching
// a database that hangs (a frozen PostgreSQL, a network that drops its
// packets, a SQLite file another process holds locked) hangs as long as
// the database does; with one, it fails with a *TimeoutError, which is
// ErrUnavailable (the API's 503 with Retry-After), within the budget.
//
// The budget rides on the request's context (WithBudget), not on the
// store: the same store serves the runners, the journal's writer and the
// keeper, whose writes must wait for a database that comes back rather
// than fail (a turn's events are retried until stored). Bounded is the
// store that applies it: every call made with a context that carries a
// budget gets a deadline of the budget from when the call starts. Once
// one call of a request ran out of budget, the request's later calls fail
// at once (the store does not answer: waiting again would only double
// the request's time), so a request spends at most about one budget
// waiting for the store, however many calls it makes.

// Budget is a request's store budget (WithBudget).
type Budget struct {
	d     time.Duration
	spent atomic.Bool // a call ran out: the later ones fail at once
}

type budgetKey struct{}

// WithBudget returns ctx with a store budget of d for every store call
// made with it or a context derived from it (context.WithoutCancel keeps
// it too). d <= 0 returns ctx unchanged. A budget already on ctx is kept
// when it is shorter.
func WithBudget(ctx context.Context, d time.Duration) context.Context {
	if d <= 0 {
		return ctx
	}
	if b, ok := ctx.Value(budgetKey{}).(*Budget); ok && b.d <= d {
		return ctx
	}
	return context.WithValue(ctx, budgetKey{}, &Budget{d: d})
}

// BudgetOf is ctx's store budget (0: none).
func BudgetOf(ctx context.Context) time.Duration {
	if b, ok := ctx.Value(budgetKey{}).(*Budget); ok {
		return b.d
	}
	return 0
}

// Call bounds one store call (or a wait for the store, such as the
// journal's for a commit) made with ctx by ctx's budget, if it has one:
// call the store with the returned context, then done with what the call
// returned (done cancels the context; call it exactly once). done turns a
// call the budget cut into a *TimeoutError naming op, and leaves every
// other error as it is (the caller's own context ending is the caller's).
func Call(ctx context.Context, op string) (context.Context, func(error) error) {
	b, ok := ctx.Value(budgetKey{}).(*Budget)
	if !ok {
		return ctx, func(err error) error { return err }
	}
	d := b.d
	if b.spent.Load() {
		d = 0 // the store did not answer this request: fail at once
	}
	cctx, cancel := context.WithTimeoutCause(ctx, d, errBudget)
	return cctx, func(err error) error {
		cut := err != nil && context.Cause(cctx) == errBudget && ctx.Err() == nil
		cancel()
		if !cut {
			return err
		}
		b.spent.Store(true)
		return &TimeoutError{Op: op, Budget: b.d, Err: err}
	}
}

// errBudget is the cause of a call's context that its budget cut.
var errBudget = errors.New("the store call's budget ran out")

// TimeoutError is a store call that did not answer within its budget
// (WithBudget): the database hangs or is cut off. It is ErrUnavailable.
type TimeoutError struct {
	Op     string        // the Store method, or the wait
	Budget time.Duration // the budget it ran out of
	Err    error         // what the call returned when cut
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("the store did not answer %s within %s (harvest serve --store-timeout): %v", e.Op, e.Budget, e.Err)
}

// Is makes a TimeoutError ErrUnavailable. It is not
// context.DeadlineExceeded: the caller's own deadline did not pass.
func (e *TimeoutError) Is(target error) bool { return target == ErrUnavailable }

// Bounded returns s with every call made with a context that carries a
// budget (WithBudget) bounded by it (Call); calls without one pass
// through unchanged. TestBoundedCoversStore fails when a method of Store
// is not bounded here.
func Bounded(s Store) Store { return &bounded{Store: s} }

// bounded bounds every method of Store (bounded.go). It embeds the Store
// so that Close passes through.
type bounded struct{ Store }
