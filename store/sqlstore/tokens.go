package sqlstore

import (
	"context"
	"fmt"

	"github.com/harvest-dev/harvest/store"
)

// CreateToken stores t (ID and Hash set by the caller; a zero CreatedAt is
// set to now). An id or hash that exists is ErrConflict.
func (s *Store) CreateToken(ctx context.Context, t *store.Token) error {
	if t.ID == "" || len(t.Hash) == 0 {
		return s.errorf("create token %q: id and hash must not be empty", t.Name)
	}
	c := *t
	if c.CreatedAt.IsZero() {
		c.CreatedAt = s.now()
	}
	err := s.write(ctx, "create token "+t.ID, func(tx Querier) error {
		_, err := tx.Exec(ctx, `INSERT INTO tokens (id, name, hash, admin, created_at) VALUES (?, ?, ?, ?, ?)`,
			c.ID, c.Name, c.Hash, c.Admin, s.d.Time(c.CreatedAt))
		if s.d.IsDuplicate(err) {
			return s.errorf("create token %s (%s): a token with this id or secret exists: %w", c.ID, c.Name, store.ErrConflict)
		}
		if err != nil {
			return s.errorf("create token %s: %w", c.ID, err)
		}
		return nil
	})
	if err == nil {
		*t = c
	}
	return err
}

const tokenCols = `id, name, hash, admin, created_at`

func scanToken(r Row) (*store.Token, error) {
	var (
		t       store.Token
		created Time
	)
	if err := r.Scan(&t.ID, &t.Name, &t.Hash, &t.Admin, &created); err != nil {
		return nil, err
	}
	t.CreatedAt = created.T
	return &t, nil
}

// TokenByHash finds the token whose secret has SHA-256 hash, or ErrNotFound.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	t, err := scanToken(s.reader().QueryRow(ctx, `SELECT `+tokenCols+` FROM tokens WHERE hash = ?`, hash))
	if isNoRows(err) {
		return nil, fmt.Errorf("token: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("token by hash: %w", err)
	}
	return t, nil
}

// ListTokens lists every token, oldest first.
func (s *Store) ListTokens(ctx context.Context) ([]*store.Token, error) {
	rows, err := s.reader().Query(ctx, `SELECT `+tokenCols+` FROM tokens ORDER BY created_at, id`)
	out, err := collect(rows, err, scanToken)
	if err != nil {
		return nil, s.errorf("list tokens: %w", err)
	}
	return out, nil
}

// DeleteToken removes the token id, its user secrets, its own memory
// (every repository's) and its web sessions, in one transaction, or fails
// with ErrNotFound.
func (s *Store) DeleteToken(ctx context.Context, id string) error {
	return s.write(ctx, "delete token "+id, func(tx Querier) error {
		n, err := tx.Exec(ctx, `DELETE FROM tokens WHERE id = ?`, id)
		if err != nil {
			return s.errorf("delete token %s: %w", id, err)
		}
		if n == 0 {
			return fmt.Errorf("token %s: %w", id, store.ErrNotFound)
		}
		for _, del := range []struct{ what, query, arg string }{
			{"its secrets", `DELETE FROM secrets WHERE scope = ?`, "user:" + id},
			{"its memory", `DELETE FROM memory_entities WHERE owner = ?`, id},
			{"its memory", `DELETE FROM memory_seeded WHERE owner = ?`, id},
			// Its sign-ins: dead already (a read joins tokens), gone now,
			// so a token id that came back could never revive them.
			{"its web sessions", `DELETE FROM web_sessions WHERE token_id = ?`, id},
		} {
			if _, err := tx.Exec(ctx, del.query, del.arg); err != nil {
				return s.errorf("delete token %s: %s: %w", id, del.what, err)
			}
		}
		return nil
	})
}
