package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// CreateWebSession stores w and drops the web sessions that have expired,
// so the table holds only live sign-ins.
func (s *Store) CreateWebSession(ctx context.Context, w *store.WebSession) error {
	if len(w.Hash) == 0 || (w.TokenID == "") == (w.User == "") || w.ExpiresAt.IsZero() {
		return s.errorf("create web session: hash, expiry and one of token and user must be set")
	}
	c := *w
	if c.CreatedAt.IsZero() {
		c.CreatedAt = s.now()
	}
	return s.write(ctx, "create web session", func(tx Querier) error {
		if _, err := tx.Exec(ctx, `DELETE FROM web_sessions WHERE expires_at <= ?`, s.d.Time(c.CreatedAt)); err != nil {
			return s.errorf("create web session: dropping expired ones: %w", err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO web_sessions (hash, token_id, user_id, via, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)`,
			c.Hash, c.TokenID, c.User, c.Via, s.d.Time(c.CreatedAt), s.d.Time(c.ExpiresAt))
		if s.d.IsDuplicate(err) {
			return s.errorf("create web session: it exists: %w", store.ErrConflict)
		}
		if err != nil {
			return s.errorf("create web session: %w", err)
		}
		return nil
	})
}

// TokenByWebSession joins the web session to its token (and the token to
// its user, as TokenByHash): a deleted token ends its sign-ins with it.
func (s *Store) TokenByWebSession(ctx context.Context, hash []byte, now time.Time) (*store.Token, error) {
	t, err := scanToken(s.reader().QueryRow(ctx, `SELECT `+tokenCols+`
FROM web_sessions w JOIN tokens t ON t.id = w.token_id LEFT JOIN users u ON u.id = t.user_id
WHERE w.hash = ? AND w.expires_at > ?`, hash, s.d.Time(now)))
	if isNoRows(err) {
		return nil, fmt.Errorf("web session: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("token by web session: %w", err)
	}
	return t, nil
}

// DeleteWebSession signs a browser out.
func (s *Store) DeleteWebSession(ctx context.Context, hash []byte) error {
	return s.write(ctx, "delete web session", func(tx Querier) error {
		if _, err := tx.Exec(ctx, `DELETE FROM web_sessions WHERE hash = ?`, hash); err != nil {
			return s.errorf("delete web session: %w", err)
		}
		return nil
	})
}
