package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// Sequential collaboration (seed 004): one run at a time works in a
// session's workspace. The lock is a lease in the store, key
// "session/{id}", held by the run's id; the holder renews it while it
// works, so a run that died (a crashed server, a killed CLI) blocks the
// session for at most the lease's TTL. Leases are store-side, so every
// process sharing the store sees the same lock.

//
// A session runner is one run for a streak of turns: it takes the lock for
// the first turn of the streak (run "{session}/t{N}"), keeps it while
// queued messages follow one another, and releases it when the queue is
// empty (or paused), the box goes, or the runner stops. So another run
// gets the workspace between streaks, never in the middle of one. A
// holder named "{session}/..." is always a runner of the session itself:
// a new runner (after a crash) takes such a lock over at once instead of
// waiting for it to expire.

// lease is a held session lock.
type lease struct {
	st      store.Locker
	key     string
	holder  string
	ttl     time.Duration
	renewed time.Time // on the Manager's clock
}

// acquireLock takes the lock key (the session's, or its workflow's: see
// lockKeyOf) for run, or fails with a *store.LockError naming the holder.
func acquireLock(ctx context.Context, st store.Locker, key, run string, ttl time.Duration, now time.Time) (*lease, error) {
	l := &lease{st: st, key: key, holder: run, ttl: ttl, renewed: now}
	if _, err := st.AcquireLock(ctx, l.key, run, ttl); err != nil {
		return nil, err
	}
	return l, nil
}

// renew extends the lease. Losing it (it expired and someone else took it)
// is an error naming the new holder.
func (l *lease) renew(ctx context.Context, now time.Time) error {
	_, err := l.st.AcquireLock(ctx, l.key, l.holder, l.ttl)
	if err != nil {
		return fmt.Errorf("renewing the session lock of run %s: %w", l.holder, err)
	}
	l.renewed = now
	return nil
}

// renewAt is when the lease should be renewed: a third of its TTL after
// the last renewal, so two renewals can fail before it expires.
func (l *lease) renewAt() time.Time { return l.renewed.Add(l.ttl / 3) }

// takeOver releases the locks s's runs take (lockKeyOf, and its
// workflow's) if a run of the session itself holds them: one that died
// with the previous server.
func takeOver(ctx context.Context, st store.Locker, s *store.Session) error {
	if err := takeOverKey(ctx, st, lockKey(s.ID), s.ID); err != nil {
		return err
	}
	if s.Collab.Workflow == "" {
		return nil
	}
	return takeOverKey(ctx, st, workflowLockKey(s.Owner, s.Collab.Workflow), s.ID)
}

// takeOverKey releases lock key if a run of session holds it.
func takeOverKey(ctx context.Context, st store.Locker, key, session string) error {
	l, err := st.GetLock(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if strings.HasPrefix(l.Holder, session+"/") {
		return st.ReleaseLock(ctx, l.Key, l.Holder)
	}
	return nil
}

func (l *lease) release(ctx context.Context) error {
	return l.st.ReleaseLock(ctx, l.key, l.holder)
}

// lockedBy returns the lock error in err, if that is what it is.
func lockedBy(err error) (*store.LockError, bool) {
	var le *store.LockError
	if errors.As(err, &le) {
		return le, true
	}
	return nil, false
}
