package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Op is a box operation an Observer hears of.
type Op string

// The operations Observe measures.
const (
	OpCreate  Op = "create"  // Provider.Start: a box made and connected
	OpRecover Op = "recover" // Provider.Recover: a box reattached
	OpStop    Op = "stop"    // Provider.Stop
	OpDestroy Op = "destroy" // Provider.Destroy (and Sandbox.Destroy)
	OpExec    Op = "exec"    // Sandbox.Start: a command started in a box, one round trip
)

// Ops lists every Op.
var Ops = []Op{OpCreate, OpRecover, OpStop, OpDestroy, OpExec}

// Observer hears how long each box operation took and how it ended
// (package telemetry counts them). BoxOp runs on the caller's goroutine,
// after the operation, and must return at once.
type Observer interface {
	BoxOp(backend string, op Op, d time.Duration, err error)
}

// PoolStats describe a backend's warm pool (Pooler).
type PoolStats struct {
	// Size is how many warm boxes the pool keeps; Ready how many are
	// ready now.
	Size, Ready int
	// Hits counts the boxes started from a warm one; Misses those that
	// were prepared on the spot because none could serve (the pool was
	// empty, or the box wanted another user or HOME).
	Hits, Misses uint64
}

// Pooler is implemented by providers that keep warm boxes (the local
// backend with a pool).
type Pooler interface {
	PoolStats() PoolStats
}

// Observe returns p with every Start, Recover, Stop and Destroy reported
// to o, and every command started in its boxes (Sandbox.Start, and
// so Run). The boxes it returns are p's, whose Destroy and Stop go
// through it. The optional interfaces of the backends (Lister, Pooler,
// Close, Caveats) pass through; Unwrap returns p.
func Observe(p Provider, o Observer) Provider {
	if o == nil {
		return p
	}
	return &observed{p: p, o: o}
}

type observed struct {
	p Provider
	o Observer
}

var (
	_ Provider = (*observed)(nil)
	_ Lister   = (*observed)(nil)
	_ Pooler   = (*observed)(nil)
)

// Unwrap returns the provider Observe was given.
func (w *observed) Unwrap() Provider { return w.p }

func (w *observed) Name() string { return w.p.Name() }

func (w *observed) Available(ctx context.Context) error { return w.p.Available(ctx) }

func (w *observed) Start(ctx context.Context, spec Spec) (*Sandbox, error) {
	start := time.Now()
	sb, err := w.p.Start(ctx, spec)
	w.o.BoxOp(w.p.Name(), OpCreate, time.Since(start), err)
	if err != nil {
		return nil, err
	}
	w.adopt(sb)
	return sb, nil
}

func (w *observed) Recover(ctx context.Context, h Handle) (*Sandbox, error) {
	start := time.Now()
	sb, err := w.p.Recover(ctx, h)
	w.o.BoxOp(w.p.Name(), OpRecover, time.Since(start), err)
	if err != nil {
		return nil, err
	}
	w.adopt(sb)
	return sb, nil
}

// adopt makes sb's Stop and Destroy go through w, and its commands
// reported. Called before sb is handed to anyone.
func (w *observed) adopt(sb *Sandbox) {
	sb.provider = w
	sb.obs = w.o
}

func (w *observed) Stop(ctx context.Context, h Handle, grace time.Duration) error {
	start := time.Now()
	err := w.p.Stop(ctx, h, grace)
	w.o.BoxOp(w.p.Name(), OpStop, time.Since(start), err)
	return err
}

func (w *observed) Destroy(ctx context.Context, h Handle) error {
	start := time.Now()
	err := w.p.Destroy(ctx, h)
	w.o.BoxOp(w.p.Name(), OpDestroy, time.Since(start), err)
	return err
}

// List is p's; a provider that cannot list says so (errors.ErrUnsupported).
func (w *observed) List(ctx context.Context) ([]Handle, error) {
	l, ok := w.p.(Lister)
	if !ok {
		return nil, fmt.Errorf("the %s backend cannot list its boxes: %w", w.p.Name(), errors.ErrUnsupported)
	}
	return l.List(ctx)
}

// PoolStats is p's (zero when it keeps no warm boxes).
func (w *observed) PoolStats() PoolStats {
	if pl, ok := w.p.(Pooler); ok {
		return pl.PoolStats()
	}
	return PoolStats{}
}

// Close closes p if it can be closed.
func (w *observed) Close() error {
	if c, ok := w.p.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

// Caveats are p's.
func (w *observed) Caveats() []string {
	if c, ok := w.p.(interface{ Caveats() []string }); ok {
		return c.Caveats()
	}
	return nil
}
