package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-dev/harvest/store"
)

// Leases are timed by the database server's clock (clock_timestamp()), not
// the caller's: every harvest node sharing the database then agrees on
// when a lease is over, whatever their clocks say.

// AcquireLock takes key for holder until now+ttl. It succeeds if the key is
// free, expired, or held by holder (a renewal); otherwise it fails with a
// *store.LockError naming the holder. A ttl <= 0 gives a lock that is
// already expired: anyone may take it.
//
// One statement decides: an INSERT that, on a conflict, updates the row
// only if it is holder's or over. ON CONFLICT locks the existing row
// either way, so when nothing was updated the holder read next is the one
// that refused us.
func (s *Store) AcquireLock(ctx context.Context, key, holder string, ttl time.Duration) (store.Lock, error) {
	if key == "" || holder == "" {
		return store.Lock{}, fmt.Errorf("postgres: acquire lock %q for %q: key and holder must not be empty", key, holder)
	}
	var out store.Lock
	err := s.write(ctx, "acquire lock "+key, func(tx pgx.Tx) error {
		var expires time.Time
		err := tx.QueryRow(ctx, `INSERT INTO locks (key, holder, expires) VALUES ($1, $2, clock_timestamp() + $3 * interval '1 microsecond')
	ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, expires = excluded.expires
	WHERE locks.holder = excluded.holder OR locks.expires <= clock_timestamp()
	RETURNING expires`, key, holder, ttl.Microseconds()).Scan(&expires)
		if err == nil {
			out = store.Lock{Key: key, Holder: holder, Expires: expires.UTC()}
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("postgres: acquire lock %s: %w", key, err)
		}
		cur := store.Lock{Key: key}
		if err := tx.QueryRow(ctx, `SELECT holder, expires FROM locks WHERE key = $1`, key).Scan(&cur.Holder, &expires); err != nil {
			return fmt.Errorf("postgres: acquire lock %s: reading its holder: %w", key, err)
		}
		cur.Expires = expires.UTC()
		return fmt.Errorf("postgres: acquire lock %s for %s: %w", key, holder, &store.LockError{Lock: cur})
	})
	if err != nil {
		return store.Lock{}, err
	}
	return out, nil
}

// ReleaseLock frees key if holder holds it; otherwise it does nothing.
func (s *Store) ReleaseLock(ctx context.Context, key, holder string) error {
	return s.write(ctx, "release lock "+key, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM locks WHERE key = $1 AND holder = $2`, key, holder); err != nil {
			return fmt.Errorf("postgres: release lock %s: %w", key, err)
		}
		return nil
	})
}

// ForceUnlock frees key whoever holds it (no error if it is free).
func (s *Store) ForceUnlock(ctx context.Context, key string) error {
	return s.write(ctx, "force unlock "+key, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM locks WHERE key = $1`, key); err != nil {
			return fmt.Errorf("postgres: force unlock %s: %w", key, err)
		}
		return nil
	})
}

// GetLock returns the lock on key, or ErrNotFound when the key is free or
// its lock has expired.
func (s *Store) GetLock(ctx context.Context, key string) (store.Lock, error) {
	l := store.Lock{Key: key}
	var (
		expires time.Time
		live    bool
	)
	err := s.pool.QueryRow(ctx, `SELECT holder, expires, expires > clock_timestamp() FROM locks WHERE key = $1`, key).Scan(&l.Holder, &expires, &live)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Lock{}, fmt.Errorf("lock %s: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return store.Lock{}, fmt.Errorf("postgres: get lock %s: %w", key, err)
	}
	l.Expires = expires.UTC()
	if !live {
		return store.Lock{}, fmt.Errorf("lock %s: expired at %s: %w", key, l.Expires.Format(time.RFC3339), store.ErrNotFound)
	}
	return l, nil
}
