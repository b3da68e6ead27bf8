package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// AcquireLock takes key for holder until now+ttl. It succeeds if the key is
// free, expired, or held by holder (a renewal); otherwise it fails with a
// *store.LockError naming the holder. A ttl <= 0 gives a lock that is
// already expired: anyone may take it.
func (s *Store) AcquireLock(ctx context.Context, key, holder string, ttl time.Duration) (store.Lock, error) {
	if key == "" || holder == "" {
		return store.Lock{}, fmt.Errorf("sqlite: acquire lock %q for %q: key and holder must not be empty", key, holder)
	}
	var out store.Lock
	err := s.write(ctx, "sqlite: acquire lock "+key, func(tx *sql.Tx) error {
		now := s.now()
		var (
			cur     store.Lock
			expires int64
		)
		err := tx.QueryRowContext(ctx, `SELECT holder, expires FROM locks WHERE key = ?`, key).Scan(&cur.Holder, &expires)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return fmt.Errorf("sqlite: acquire lock %s: %w", key, err)
		default:
			cur.Key, cur.Expires = key, tm(expires)
			if cur.Holder != holder && cur.Expires.After(now) {
				return fmt.Errorf("sqlite: acquire lock %s for %s: %w", key, holder, &store.LockError{Lock: cur})
			}
		}
		out = store.Lock{Key: key, Holder: holder, Expires: now.Add(ttl).UTC()}
		if _, err := tx.ExecContext(ctx, `INSERT INTO locks (key, holder, expires) VALUES (?, ?, ?)
	ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, expires = excluded.expires`, key, holder, ts(out.Expires)); err != nil {
			return fmt.Errorf("sqlite: acquire lock %s: %w", key, err)
		}
		return nil
	})
	if err != nil {
		return store.Lock{}, err
	}
	return out, nil
}

// ReleaseLock frees key if holder holds it; otherwise it does nothing.
func (s *Store) ReleaseLock(ctx context.Context, key, holder string) error {
	return s.write(ctx, "sqlite: release lock "+key, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM locks WHERE key = ? AND holder = ?`, key, holder); err != nil {
			return fmt.Errorf("sqlite: release lock %s: %w", key, err)
		}
		return nil
	})
}

// ForceUnlock frees key whoever holds it (no error if it is free).
func (s *Store) ForceUnlock(ctx context.Context, key string) error {
	return s.write(ctx, "sqlite: force unlock "+key, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM locks WHERE key = ?`, key); err != nil {
			return fmt.Errorf("sqlite: force unlock %s: %w", key, err)
		}
		return nil
	})
}

// GetLock returns the lock on key, or ErrNotFound when the key is free or
// its lock has expired.
func (s *Store) GetLock(ctx context.Context, key string) (store.Lock, error) {
	l := store.Lock{Key: key}
	var expires int64
	err := s.r.QueryRowContext(ctx, `SELECT holder, expires FROM locks WHERE key = ?`, key).Scan(&l.Holder, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Lock{}, fmt.Errorf("lock %s: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return store.Lock{}, fmt.Errorf("sqlite: get lock %s: %w", key, err)
	}
	l.Expires = tm(expires)
	if !l.Expires.After(s.now()) {
		return store.Lock{}, fmt.Errorf("lock %s: expired at %s: %w", key, l.Expires.Format(time.RFC3339), store.ErrNotFound)
	}
	return l, nil
}
