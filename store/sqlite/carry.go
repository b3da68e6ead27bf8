package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/harvest-dev/harvest/store"
)

// PutPack stores a pack; one already stored is kept as it is.
func (s *Store) PutPack(ctx context.Context, hash string, data []byte) error {
	if hash == "" {
		return errors.New("sqlite: put pack: no hash")
	}
	return s.write(ctx, "sqlite: put pack "+hash, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO workspace_packs (hash, data, created_at) VALUES (?, ?, ?) ON CONFLICT (hash) DO NOTHING`,
			hash, data, ts(s.now())); err != nil {
			return fmt.Errorf("sqlite: put pack %s: %w", hash, err)
		}
		return nil
	})
}

// GetPack returns a pack.
func (s *Store) GetPack(ctx context.Context, hash string) ([]byte, error) {
	var data []byte
	err := s.r.QueryRowContext(ctx, `SELECT data FROM workspace_packs WHERE hash = ?`, hash).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("pack %s: %w", hash, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get pack %s: %w", hash, err)
	}
	return data, nil
}

// PutCheckpoint replaces the session's checkpoint under f.
func (s *Store) PutCheckpoint(ctx context.Context, f store.Fence, c *store.Checkpoint) error {
	if c.Session != f.Session {
		return fmt.Errorf("sqlite: put checkpoint of session %s under the fence of %s", c.Session, f.Session)
	}
	packs := slices.Compact(slices.Sorted(slices.Values(c.Packs)))
	now := s.now().UTC()
	err := s.write(ctx, "sqlite: put checkpoint of session "+c.Session, func(tx *sql.Tx) error {
		if err := checkFence(ctx, tx, f, ""); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO workspace_checkpoints (session, instance, node, turn, manifest, bytes, files, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (session) DO UPDATE SET instance = excluded.instance, node = excluded.node, turn = excluded.turn,
	manifest = excluded.manifest, bytes = excluded.bytes, files = excluded.files, created_at = excluded.created_at`,
			c.Session, c.Instance, c.Node, c.Turn, c.Manifest, c.Bytes, c.Files, ts(now)); err != nil {
			return fmt.Errorf("sqlite: put checkpoint of session %s: %w", c.Session, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM workspace_checkpoint_packs WHERE session = ?`, c.Session); err != nil {
			return fmt.Errorf("sqlite: put checkpoint of session %s: %w", c.Session, err)
		}
		for _, h := range packs {
			_, err := tx.ExecContext(ctx, `INSERT INTO workspace_checkpoint_packs (session, hash) VALUES (?, ?)`, c.Session, h)
			if code(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY {
				return fmt.Errorf("sqlite: put checkpoint of session %s: pack %s is not stored: %w", c.Session, h, store.ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("sqlite: put checkpoint of session %s: %w", c.Session, err)
			}
		}
		return nil
	})
	if err == nil {
		c.CreatedAt = now
	}
	return err
}

// GetCheckpoint returns the session's checkpoint.
func (s *Store) GetCheckpoint(ctx context.Context, session string) (*store.Checkpoint, error) {
	c := &store.Checkpoint{Session: session}
	var created int64
	err := s.r.QueryRowContext(ctx, `SELECT instance, node, turn, manifest, bytes, files, created_at FROM workspace_checkpoints WHERE session = ?`, session).
		Scan(&c.Instance, &c.Node, &c.Turn, &c.Manifest, &c.Bytes, &c.Files, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("checkpoint of session %s: %w", session, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get checkpoint of session %s: %w", session, err)
	}
	c.CreatedAt = tm(created)
	rows, err := s.r.QueryContext(ctx, `SELECT hash FROM workspace_checkpoint_packs WHERE session = ? ORDER BY hash`, session)
	if err != nil {
		return nil, fmt.Errorf("sqlite: get checkpoint of session %s: %w", session, err)
	}
	defer rows.Close()
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			return nil, fmt.Errorf("sqlite: get checkpoint of session %s: %w", session, err)
		}
		c.Packs = append(c.Packs, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: get checkpoint of session %s: %w", session, err)
	}
	return c, nil
}

// SweepPacks removes the packs no checkpoint references, stored before
// before.
func (s *Store) SweepPacks(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.write(ctx, "sqlite: sweep packs", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM workspace_packs WHERE created_at < ?
AND NOT EXISTS (SELECT 1 FROM workspace_checkpoint_packs r WHERE r.hash = workspace_packs.hash)`, ts(before))
		if err != nil {
			return fmt.Errorf("sqlite: sweep packs: %w", err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return int(n), err
}
