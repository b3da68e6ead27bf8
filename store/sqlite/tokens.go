package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/harvest-dev/harvest/store"
)

// CreateToken stores t (ID and Hash set by the caller; a zero CreatedAt is
// set to now). An id or hash that exists is ErrConflict.
func (s *Store) CreateToken(ctx context.Context, t *store.Token) error {
	if t.ID == "" || len(t.Hash) == 0 {
		return fmt.Errorf("sqlite: create token %q: id and hash must not be empty", t.Name)
	}
	c := *t
	if c.CreatedAt.IsZero() {
		c.CreatedAt = s.now().UTC()
	}
	err := s.write(ctx, "sqlite: create token "+t.ID, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO tokens (id, name, hash, admin, created_at) VALUES (?, ?, ?, ?, ?)`,
			c.ID, c.Name, c.Hash, c.Admin, ts(c.CreatedAt))
		if isDuplicate(err) {
			return fmt.Errorf("sqlite: create token %s (%s): a token with this id or secret exists: %w", c.ID, c.Name, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("sqlite: create token %s: %w", c.ID, err)
		}
		return nil
	})
	if err == nil {
		*t = c
	}
	return err
}

const tokenCols = `id, name, hash, admin, created_at`

func scanToken(r scanner) (*store.Token, error) {
	var (
		t       store.Token
		created int64
	)
	if err := r.Scan(&t.ID, &t.Name, &t.Hash, &t.Admin, &created); err != nil {
		return nil, err
	}
	t.CreatedAt = tm(created)
	return &t, nil
}

// TokenByHash finds the token whose secret has SHA-256 hash, or ErrNotFound.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	t, err := scanToken(s.r.QueryRowContext(ctx, `SELECT `+tokenCols+` FROM tokens WHERE hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("token: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: token by hash: %w", err)
	}
	return t, nil
}

// ListTokens lists every token, oldest first.
func (s *Store) ListTokens(ctx context.Context) ([]*store.Token, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+tokenCols+` FROM tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list tokens: %w", err)
	}
	defer rows.Close()
	var out []*store.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list tokens: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list tokens: %w", err)
	}
	return out, nil
}

// DeleteToken removes the token id and its user secrets, or fails with
// ErrNotFound.
func (s *Store) DeleteToken(ctx context.Context, id string) error {
	return s.write(ctx, "sqlite: delete token "+id, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM tokens WHERE id = ?`, id)
		if err != nil {
			return fmt.Errorf("sqlite: delete token %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("token %s: %w", id, store.ErrNotFound)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM secrets WHERE scope = ?`, "user:"+id); err != nil {
			return fmt.Errorf("sqlite: delete token %s: its secrets: %w", id, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM memory_entities WHERE owner = ?`, id); err != nil {
			return fmt.Errorf("sqlite: delete token %s: its memory: %w", id, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM memory_seeded WHERE owner = ?`, id); err != nil {
			return fmt.Errorf("sqlite: delete token %s: its memory: %w", id, err)
		}
		// Its sign-ins: dead already (a read joins tokens), gone now, so a
		// token id that came back could never revive them.
		if _, err := tx.ExecContext(ctx, `DELETE FROM web_sessions WHERE token_id = ?`, id); err != nil {
			return fmt.Errorf("sqlite: delete token %s: its web sessions: %w", id, err)
		}
		return nil
	})
}
