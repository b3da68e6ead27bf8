package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harvest-dev/harvest/store"
)

// PutPack stores a pack; one already stored is kept as it is.
func (s *Store) PutPack(ctx context.Context, hash string, data []byte) error {
	if hash == "" {
		return errors.New("postgres: put pack: no hash")
	}
	return s.write(ctx, "put pack "+hash, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO workspace_packs (hash, data) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING`, hash, data); err != nil {
			return fmt.Errorf("postgres: put pack %s: %w", hash, err)
		}
		return nil
	})
}

// GetPack returns a pack.
func (s *Store) GetPack(ctx context.Context, hash string) ([]byte, error) {
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM workspace_packs WHERE hash = $1`, hash).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pack %s: %w", hash, store.ErrNotFound)
	}
	if err != nil {
		return nil, unavailable(fmt.Errorf("postgres: get pack %s: %w", hash, err))
	}
	return data, nil
}

// PutCheckpoint replaces the session's checkpoint under f.
func (s *Store) PutCheckpoint(ctx context.Context, f store.Fence, c *store.Checkpoint) error {
	if c.Session != f.Session {
		return fmt.Errorf("postgres: put checkpoint of session %s under the fence of %s", c.Session, f.Session)
	}
	packs := slices.Compact(slices.Sorted(slices.Values(c.Packs)))
	return s.write(ctx, "put checkpoint of session "+c.Session, func(tx pgx.Tx) error {
		if err := checkFences(ctx, tx, []store.Fence{f}); err != nil {
			return err
		}
		var now time.Time
		err := tx.QueryRow(ctx, `INSERT INTO workspace_checkpoints (session, instance, node, turn, manifest, bytes, files, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, statement_timestamp())
ON CONFLICT (session) DO UPDATE SET instance = EXCLUDED.instance, node = EXCLUDED.node, turn = EXCLUDED.turn,
	manifest = EXCLUDED.manifest, bytes = EXCLUDED.bytes, files = EXCLUDED.files, created_at = EXCLUDED.created_at
RETURNING created_at`, c.Session, c.Instance, c.Node, c.Turn, c.Manifest, c.Bytes, c.Files).Scan(&now)
		if err != nil {
			return fmt.Errorf("postgres: put checkpoint of session %s: %w", c.Session, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM workspace_checkpoint_packs WHERE session = $1`, c.Session); err != nil {
			return fmt.Errorf("postgres: put checkpoint of session %s: %w", c.Session, err)
		}
		if len(packs) > 0 {
			_, err := tx.Exec(ctx, `INSERT INTO workspace_checkpoint_packs (session, hash) SELECT $1, unnest($2::text[])`, c.Session, packs)
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "23503" { // foreign_key_violation
				return fmt.Errorf("postgres: put checkpoint of session %s: a pack it names is not stored: %w", c.Session, store.ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("postgres: put checkpoint of session %s: %w", c.Session, err)
			}
		}
		c.CreatedAt = now.UTC()
		return nil
	})
}

// GetCheckpoint returns the session's checkpoint.
func (s *Store) GetCheckpoint(ctx context.Context, session string) (*store.Checkpoint, error) {
	c := &store.Checkpoint{Session: session}
	err := s.pool.QueryRow(ctx, `SELECT instance, node, turn, manifest, bytes, files, created_at FROM workspace_checkpoints WHERE session = $1`, session).
		Scan(&c.Instance, &c.Node, &c.Turn, &c.Manifest, &c.Bytes, &c.Files, &c.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("checkpoint of session %s: %w", session, store.ErrNotFound)
	}
	if err != nil {
		return nil, unavailable(fmt.Errorf("postgres: get checkpoint of session %s: %w", session, err))
	}
	c.CreatedAt = c.CreatedAt.UTC()
	rows, err := s.pool.Query(ctx, `SELECT hash FROM workspace_checkpoint_packs WHERE session = $1 ORDER BY hash`, session)
	if err != nil {
		return nil, unavailable(fmt.Errorf("postgres: get checkpoint of session %s: %w", session, err))
	}
	c.Packs, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, unavailable(fmt.Errorf("postgres: get checkpoint of session %s: %w", session, err))
	}
	return c, nil
}

// SweepPacks removes the packs no checkpoint references, stored before
// before.
func (s *Store) SweepPacks(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.write(ctx, "sweep packs", func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM workspace_packs p WHERE p.created_at < $1
AND NOT EXISTS (SELECT 1 FROM workspace_checkpoint_packs r WHERE r.hash = p.hash)`, before)
		if err != nil {
			return fmt.Errorf("postgres: sweep packs: %w", err)
		}
		n = tag.RowsAffected()
		return nil
	})
	return int(n), err
}
