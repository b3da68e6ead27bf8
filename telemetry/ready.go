package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// The checks of GET /readyz that harvest serve gives the server
// (server.Config.Ready), besides draining. Their errors are shown to
// anyone who asks (probes carry no token): they say what failed and what
// to do, and name no secret and no address; the cause goes to the log.

// readyProbe is the session id the store check reads: no session has it
// (ids are s- and 16 letters), so the read is one index lookup.
const readyProbe = "s-readyzprobe0000"

// StoreReady checks that the store answers a read.
func StoreReady(st interface {
	GetSession(ctx context.Context, id string) (*store.Session, error)
}, log *slog.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := st.GetSession(ctx, readyProbe)
		if err == nil || errors.Is(err, store.ErrNotFound) {
			return nil
		}
		log.Warn("readiness: the store did not answer", "err", err)
		if te, ok := errors.AsType[*store.TimeoutError](err); ok {
			return fmt.Errorf("the store does not answer: a read took longer than %s (--store-timeout); API requests that need it answer 503 until it does", te.Budget)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return errors.New("the store did not answer within the check's deadline (the server's log has the cause)")
		}
		return errors.New("the store cannot be reached (the server's log has the cause)")
	}
}

// BackendReady checks that a sandbox backend can run boxes here
// (Provider.Available, which may start a throwaway box: its answer is
// kept for ttl).
func BackendReady(p func() (sandbox.Provider, error), ttl time.Duration) func(context.Context) error {
	var mu sync.Mutex
	var at time.Time
	var last error
	return func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && time.Since(at) < ttl {
			return last
		}
		pr, err := p()
		if err == nil {
			err = pr.Available(ctx)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the backend did not answer within the check's deadline: %w", err) // not kept
		}
		at, last = time.Now(), err
		return err
	}
}

// DiskReady checks that the data directory's filesystem is not below the
// floor of free space below which the Manager refuses new work
// (harvest serve --min-free; usage is Manager.DiskUsage).
func DiskReady(usage func(context.Context) (session.DiskUsage, error), log *slog.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		u, err := usage(ctx)
		if err != nil && u.Size == 0 {
			log.Warn("readiness: the data directory's free space cannot be read", "err", err)
			return errors.New("the free space of the data directory's filesystem cannot be read (the server's log has the cause)")
		}
		if u.Below() {
			return fmt.Errorf("%s free on the data directory's filesystem, below the floor of %s (--min-free): new sessions, resumes and builds are refused until space is freed (delete ended sessions, or give the data directory more)", session.Approx(u.Free), session.Approx(u.Floor))
		}
		return nil
	}
}
