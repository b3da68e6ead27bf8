package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// AcquireLock takes key for holder until now+ttl. It succeeds if the key is
// free, expired, or held by holder (a renewal); otherwise it fails with a
// *store.LockError naming the holder. A ttl <= 0 gives a lock that is
// already expired: anyone may take it.
//
// One statement decides: an INSERT that, on a conflict, updates the row
// only if it is holder's or over, timed by Dialect.Now (PostgreSQL: the
// server's clock). On PostgreSQL ON CONFLICT locks the existing row either
// way, and on SQLite the one writer runs alone, so when nothing was
// updated the holder read next is the one that refused us.
func (s *Store) AcquireLock(ctx context.Context, key, holder string, ttl time.Duration) (store.Lock, error) {
	if key == "" || holder == "" {
		return store.Lock{}, s.errorf("acquire lock %q for %q: key and holder must not be empty", key, holder)
	}
	var out store.Lock
	err := s.write(ctx, "acquire lock "+key, func(tx Querier) error {
		now := s.now()
		until, untilArgs := s.d.After(ClockCall, now, ttl)
		cur, curArgs := s.d.Now(ClockCall, now)
		var expires Time
		err := tx.QueryRow(ctx, `INSERT INTO locks (key, holder, expires) VALUES (?, ?, `+until+`)
	ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, expires = excluded.expires
	WHERE locks.holder = excluded.holder OR locks.expires <= `+cur+`
	RETURNING expires`, append(append([]any{key, holder}, untilArgs...), curArgs...)...).Scan(&expires)
		if err == nil {
			out = store.Lock{Key: key, Holder: holder, Expires: expires.T}
			return nil
		}
		if !isNoRows(err) {
			return s.errorf("acquire lock %s: %w", key, err)
		}
		held := store.Lock{Key: key}
		if err := tx.QueryRow(ctx, `SELECT holder, expires FROM locks WHERE key = ?`, key).Scan(&held.Holder, &expires); err != nil {
			return s.errorf("acquire lock %s: reading its holder: %w", key, err)
		}
		held.Expires = expires.T
		return s.errorf("acquire lock %s for %s: %w", key, holder, &store.LockError{Lock: held})
	})
	if err != nil {
		return store.Lock{}, err
	}
	return out, nil
}

// ReleaseLock frees key if holder holds it; otherwise it does nothing.
func (s *Store) ReleaseLock(ctx context.Context, key, holder string) error {
	return s.write(ctx, "release lock "+key, func(tx Querier) error {
		if _, err := tx.Exec(ctx, `DELETE FROM locks WHERE key = ? AND holder = ?`, key, holder); err != nil {
			return s.errorf("release lock %s: %w", key, err)
		}
		return nil
	})
}

// ForceUnlock frees key whoever holds it (no error if it is free).
func (s *Store) ForceUnlock(ctx context.Context, key string) error {
	return s.write(ctx, "force unlock "+key, func(tx Querier) error {
		if _, err := tx.Exec(ctx, `DELETE FROM locks WHERE key = ?`, key); err != nil {
			return s.errorf("force unlock %s: %w", key, err)
		}
		return nil
	})
}

// GetLock returns the lock on key, or ErrNotFound when the key is free or
// its lock has expired.
func (s *Store) GetLock(ctx context.Context, key string) (store.Lock, error) {
	l := store.Lock{Key: key}
	var (
		expires Time
		live    bool
	)
	cur, curArgs := s.d.Now(ClockCall, s.now())
	err := s.reader().QueryRow(ctx, `SELECT holder, expires, expires > `+cur+` FROM locks WHERE key = ?`,
		append(curArgs, key)...).Scan(&l.Holder, &expires, &live)
	if isNoRows(err) {
		return store.Lock{}, fmt.Errorf("lock %s: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return store.Lock{}, s.errorf("get lock %s: %w", key, err)
	}
	l.Expires = expires.T
	if !live {
		return store.Lock{}, fmt.Errorf("lock %s: expired at %s: %w", key, l.Expires.Format(time.RFC3339), store.ErrNotFound)
	}
	return l, nil
}
