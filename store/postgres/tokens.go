package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-dev/harvest/store"
)

// CreateToken stores t (ID and Hash set by the caller; a zero CreatedAt is
// set to now). An id or hash that exists is ErrConflict.
func (s *Store) CreateToken(ctx context.Context, t *store.Token) error {
	if t.ID == "" || len(t.Hash) == 0 {
		return fmt.Errorf("postgres: create token %q: id and hash must not be empty", t.Name)
	}
	c := *t
	if c.CreatedAt.IsZero() {
		c.CreatedAt = s.now()
	}
	err := s.write(ctx, "create token "+t.ID, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO tokens (id, name, hash, admin, created_at) VALUES ($1, $2, $3, $4, $5)`,
			c.ID, c.Name, c.Hash, c.Admin, c.CreatedAt)
		if isDuplicate(err) {
			return fmt.Errorf("postgres: create token %s (%s): a token with this id or secret exists: %w", c.ID, c.Name, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("postgres: create token %s: %w", c.ID, err)
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
		created time.Time
	)
	if err := r.Scan(&t.ID, &t.Name, &t.Hash, &t.Admin, &created); err != nil {
		return nil, err
	}
	t.CreatedAt = created.UTC()
	return &t, nil
}

// TokenByHash finds the token whose secret has SHA-256 hash, or ErrNotFound.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	t, err := scanToken(s.pool.QueryRow(ctx, `SELECT `+tokenCols+` FROM tokens WHERE hash = $1`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("token: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: token by hash: %w", err)
	}
	return t, nil
}

// ListTokens lists every token, oldest first.
func (s *Store) ListTokens(ctx context.Context) ([]*store.Token, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+tokenCols+` FROM tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list tokens: %w", err)
	}
	out, err := collect(rows, scanToken)
	if err != nil {
		return nil, fmt.Errorf("postgres: list tokens: %w", err)
	}
	return out, nil
}

// DeleteToken removes the token id, its user secrets, its own memory
// (every repository's) and its web sessions, in one transaction, or fails
// with ErrNotFound.
func (s *Store) DeleteToken(ctx context.Context, id string) error {
	return s.write(ctx, "delete token "+id, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM tokens WHERE id = $1`, id)
		if err != nil {
			return fmt.Errorf("postgres: delete token %s: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("token %s: %w", id, store.ErrNotFound)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM secrets WHERE scope = $1`, "user:"+id); err != nil {
			return fmt.Errorf("postgres: delete token %s: its secrets: %w", id, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM memory_entities WHERE owner = $1`, id); err != nil {
			return fmt.Errorf("postgres: delete token %s: its memory: %w", id, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM memory_seeded WHERE owner = $1`, id); err != nil {
			return fmt.Errorf("postgres: delete token %s: its memory: %w", id, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM web_sessions WHERE token_id = $1`, id); err != nil {
			return fmt.Errorf("postgres: delete token %s: its web sessions: %w", id, err)
		}
		return nil
	})
}
