package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// CreateWebSession stores w and drops the web sessions that have expired,
// so the table holds only live sign-ins.
func (s *Store) CreateWebSession(ctx context.Context, w *store.WebSession) error {
	if len(w.Hash) == 0 || w.TokenID == "" || w.ExpiresAt.IsZero() {
		return errors.New("sqlite: create web session: hash, token and expiry must be set")
	}
	c := *w
	if c.CreatedAt.IsZero() {
		c.CreatedAt = s.now().UTC()
	}
	return s.write(ctx, "sqlite: create web session", func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM web_sessions WHERE expires_at <= ?`, ts(c.CreatedAt)); err != nil {
			return fmt.Errorf("sqlite: create web session: dropping expired ones: %w", err)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO web_sessions (hash, token_id, created_at, expires_at) VALUES (?, ?, ?, ?)`,
			c.Hash, c.TokenID, ts(c.CreatedAt), ts(c.ExpiresAt))
		if isDuplicate(err) {
			return fmt.Errorf("sqlite: create web session: it exists: %w", store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("sqlite: create web session: %w", err)
		}
		return nil
	})
}

// TokenByWebSession joins the web session to its token: a deleted token
// ends its sign-ins with it.
func (s *Store) TokenByWebSession(ctx context.Context, hash []byte, now time.Time) (*store.Token, error) {
	t, err := scanToken(s.r.QueryRowContext(ctx, `SELECT t.id, t.name, t.hash, t.admin, t.created_at
FROM web_sessions w JOIN tokens t ON t.id = w.token_id WHERE w.hash = ? AND w.expires_at > ?`, hash, ts(now)))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("web session: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: token by web session: %w", err)
	}
	return t, nil
}

// DeleteWebSession signs a browser out.
func (s *Store) DeleteWebSession(ctx context.Context, hash []byte) error {
	return s.write(ctx, "sqlite: delete web session", func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM web_sessions WHERE hash = ?`, hash); err != nil {
			return fmt.Errorf("sqlite: delete web session: %w", err)
		}
		return nil
	})
}
