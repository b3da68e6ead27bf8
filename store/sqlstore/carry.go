package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// PutPack stores a pack; one already stored is kept as it is.
func (s *Store) PutPack(ctx context.Context, hash string, data []byte) error {
	if hash == "" {
		return s.errorf("put pack: no hash")
	}
	return s.write(ctx, "put pack "+hash, func(tx Querier) error {
		now, nowArgs := s.leaseNow()
		if _, err := tx.Exec(ctx, `INSERT INTO workspace_packs (hash, data, created_at) VALUES (?, ?, `+now+`) ON CONFLICT (hash) DO NOTHING`,
			args([]any{hash, data}, nowArgs)...); err != nil {
			return s.errorf("put pack %s: %w", hash, err)
		}
		return nil
	})
}

// GetPack returns a pack.
func (s *Store) GetPack(ctx context.Context, hash string) ([]byte, error) {
	var data []byte
	err := s.reader().QueryRow(ctx, `SELECT data FROM workspace_packs WHERE hash = ?`, hash).Scan(&data)
	if isNoRows(err) {
		return nil, fmt.Errorf("pack %s: %w", hash, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("get pack %s: %w", hash, err)
	}
	return data, nil
}

// packChunk bounds the packs one INSERT of PutCheckpoint names.
const packChunk = 500

// PutCheckpoint replaces the session's checkpoint under f.
func (s *Store) PutCheckpoint(ctx context.Context, f store.Fence, c *store.Checkpoint) error {
	if c.Session != f.Session {
		return s.errorf("put checkpoint of session %s under the fence of %s", c.Session, f.Session)
	}
	packs := slices.Compact(slices.Sorted(slices.Values(c.Packs)))
	return s.write(ctx, "put checkpoint of session "+c.Session, func(tx Querier) error {
		if err := s.checkFences(ctx, tx, []store.Fence{f}); err != nil {
			return err
		}
		now, nowArgs := s.leaseNow()
		var created Time
		err := tx.QueryRow(ctx, `INSERT INTO workspace_checkpoints (session, instance, node, turn, manifest, bytes, files, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, `+now+`)
ON CONFLICT (session) DO UPDATE SET instance = excluded.instance, node = excluded.node, turn = excluded.turn,
	manifest = excluded.manifest, bytes = excluded.bytes, files = excluded.files, created_at = excluded.created_at
RETURNING created_at`, args([]any{c.Session, c.Instance, c.Node, c.Turn, c.Manifest, c.Bytes, c.Files}, nowArgs)...).Scan(&created)
		if err != nil {
			return s.errorf("put checkpoint of session %s: %w", c.Session, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM workspace_checkpoint_packs WHERE session = ?`, c.Session); err != nil {
			return s.errorf("put checkpoint of session %s: %w", c.Session, err)
		}
		for chunk := range slices.Chunk(packs, packChunk) {
			rows := make([]string, len(chunk))
			a := make([]any, 0, 2*len(chunk))
			for i, h := range chunk {
				rows[i] = "(?, ?)"
				a = append(a, c.Session, h)
			}
			_, err := tx.Exec(ctx, `INSERT INTO workspace_checkpoint_packs (session, hash) VALUES `+strings.Join(rows, ", "), a...)
			if s.d.IsMissingParent(err) {
				return s.errorf("put checkpoint of session %s: a pack it names is not stored: %w", c.Session, store.ErrNotFound)
			}
			if err != nil {
				return s.errorf("put checkpoint of session %s: %w", c.Session, err)
			}
		}
		c.CreatedAt = created.T
		return nil
	})
}

// GetCheckpoint returns the session's checkpoint.
func (s *Store) GetCheckpoint(ctx context.Context, session string) (*store.Checkpoint, error) {
	c := &store.Checkpoint{Session: session}
	var created Time
	err := s.reader().QueryRow(ctx, `SELECT instance, node, turn, manifest, bytes, files, created_at FROM workspace_checkpoints WHERE session = ?`, session).
		Scan(&c.Instance, &c.Node, &c.Turn, &c.Manifest, &c.Bytes, &c.Files, &created)
	if isNoRows(err) {
		return nil, fmt.Errorf("checkpoint of session %s: %w", session, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("get checkpoint of session %s: %w", session, err)
	}
	c.CreatedAt = created.T
	rows, err := s.reader().Query(ctx, `SELECT hash FROM workspace_checkpoint_packs WHERE session = ? ORDER BY hash`, session)
	hashes, err := collect(rows, err, func(r Row) (*string, error) {
		var h string
		return &h, r.Scan(&h)
	})
	if err != nil {
		return nil, s.errorf("get checkpoint of session %s: %w", session, err)
	}
	for _, h := range hashes {
		c.Packs = append(c.Packs, *h)
	}
	return c, nil
}

// SweepPacks removes the packs no checkpoint references, stored before
// before.
func (s *Store) SweepPacks(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.write(ctx, "sweep packs", func(tx Querier) error {
		var err error
		n, err = tx.Exec(ctx, `DELETE FROM workspace_packs WHERE created_at < ?
AND NOT EXISTS (SELECT 1 FROM workspace_checkpoint_packs r WHERE r.hash = workspace_packs.hash)`, s.d.Time(before))
		if err != nil {
			return s.errorf("sweep packs: %w", err)
		}
		return nil
	})
	return int(n), err
}
