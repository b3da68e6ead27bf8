package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// PutPack records a pack; one already recorded is kept as it is, its
// time refreshed.
func (s *Store) PutPack(ctx context.Context, p *store.Pack) error {
	if p.Hash == "" || (p.Object == "") == (p.Data == nil) {
		return s.errorf("put pack %q: give a hash and either an object or the data", p.Hash)
	}
	data, size := p.Data, p.Size
	if data == nil {
		data = []byte{} // the column is NOT NULL: '' with an object
	} else {
		size = int64(len(data))
	}
	return s.write(ctx, "put pack "+p.Hash, func(tx Querier) error {
		now, nowArgs := s.leaseNow()
		if _, err := tx.Exec(ctx, `INSERT INTO workspace_packs (hash, data, object, size, created_at) VALUES (?, ?, ?, ?, `+now+`)
ON CONFLICT (hash) DO UPDATE SET created_at = excluded.created_at`,
			args([]any{p.Hash, data, p.Object, size}, nowArgs)...); err != nil {
			return s.errorf("put pack %s: %w", p.Hash, err)
		}
		return nil
	})
}

// GetPack returns where a pack is.
func (s *Store) GetPack(ctx context.Context, hash string) (*store.Pack, error) {
	p := &store.Pack{Hash: hash}
	err := s.reader().QueryRow(ctx, `SELECT object, size, data FROM workspace_packs WHERE hash = ?`, hash).Scan(&p.Object, &p.Size, &p.Data)
	if isNoRows(err) {
		return nil, fmt.Errorf("pack %s: %w", hash, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("get pack %s: %w", hash, err)
	}
	if p.Object != "" {
		p.Data = nil
	} else {
		p.Size = int64(len(p.Data))
	}
	return p, nil
}

// CarryObjects returns which of keys a pack or a checkpoint names.
func (s *Store) CarryObjects(ctx context.Context, keys []string) (map[string]bool, error) {
	named := map[string]bool{}
	if len(keys) == 0 {
		return named, nil
	}
	if len(keys) > 1000 {
		return nil, s.errorf("carry objects: %d keys, at most 1000 at a time", len(keys))
	}
	marks := strings.TrimSuffix(strings.Repeat("?, ", len(keys)), ", ")
	a := make([]any, 0, 2*len(keys))
	for range 2 {
		for _, k := range keys {
			a = append(a, k)
		}
	}
	rows, err := s.reader().Query(ctx, `SELECT object FROM workspace_packs WHERE object IN (`+marks+`)
UNION SELECT manifest_object FROM workspace_checkpoints WHERE manifest_object IN (`+marks+`)`, a...)
	found, err := collect(rows, err, func(r Row) (*string, error) {
		var k string
		return &k, r.Scan(&k)
	})
	if err != nil {
		return nil, s.errorf("carry objects: %w", err)
	}
	for _, k := range found {
		named[*k] = true
	}
	return named, nil
}

// packChunk bounds the packs one INSERT of PutCheckpoint names.
const packChunk = 500

// PutCheckpoint replaces the session's checkpoint under f.
func (s *Store) PutCheckpoint(ctx context.Context, f store.Fence, c *store.Checkpoint) error {
	if c.Session != f.Session {
		return s.errorf("put checkpoint of session %s under the fence of %s", c.Session, f.Session)
	}
	if (c.ManifestObject == "") == (c.Manifest == nil) {
		return s.errorf("put checkpoint of session %s: give either a manifest object or the manifest", c.Session)
	}
	manifest := c.Manifest
	if manifest == nil {
		manifest = []byte{} // the column is NOT NULL: '' with an object
	}
	packs := slices.Compact(slices.Sorted(slices.Values(c.Packs)))
	return s.write(ctx, "put checkpoint of session "+c.Session, func(tx Querier) error {
		if err := s.checkFences(ctx, tx, []store.Fence{f}); err != nil {
			return err
		}
		var replaced string
		err := tx.QueryRow(ctx, `SELECT manifest_object FROM workspace_checkpoints WHERE session = ?`, c.Session).Scan(&replaced)
		if err != nil && !isNoRows(err) {
			return s.errorf("put checkpoint of session %s: %w", c.Session, err)
		}
		now, nowArgs := s.leaseNow()
		var created Time
		err = tx.QueryRow(ctx, `INSERT INTO workspace_checkpoints (session, instance, node, turn, manifest, manifest_object, manifest_size, manifest_sha256, bytes, files, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, `+now+`)
ON CONFLICT (session) DO UPDATE SET instance = excluded.instance, node = excluded.node, turn = excluded.turn,
	manifest = excluded.manifest, manifest_object = excluded.manifest_object, manifest_size = excluded.manifest_size,
	manifest_sha256 = excluded.manifest_sha256, bytes = excluded.bytes, files = excluded.files, created_at = excluded.created_at
RETURNING created_at`, args([]any{c.Session, c.Instance, c.Node, c.Turn, manifest, c.ManifestObject, c.ManifestSize, c.ManifestSHA256, c.Bytes, c.Files}, nowArgs)...).Scan(&created)
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
		c.CreatedAt, c.Replaced = created.T, replaced
		return nil
	})
}

// GetCheckpoint returns the session's checkpoint.
func (s *Store) GetCheckpoint(ctx context.Context, session string) (*store.Checkpoint, error) {
	c := &store.Checkpoint{Session: session}
	var created Time
	err := s.reader().QueryRow(ctx, `SELECT instance, node, turn, manifest, manifest_object, manifest_size, manifest_sha256, bytes, files, created_at
FROM workspace_checkpoints WHERE session = ?`, session).
		Scan(&c.Instance, &c.Node, &c.Turn, &c.Manifest, &c.ManifestObject, &c.ManifestSize, &c.ManifestSHA256, &c.Bytes, &c.Files, &created)
	if isNoRows(err) {
		return nil, fmt.Errorf("checkpoint of session %s: %w", session, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("get checkpoint of session %s: %w", session, err)
	}
	if c.ManifestObject != "" {
		c.Manifest = nil
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
