package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// UserByWebSession joins a user's own web session to its user.
func (s *Store) UserByWebSession(ctx context.Context, hash []byte, now time.Time) (*store.WebSession, *store.User, error) {
	var (
		w                store.WebSession
		u                store.User
		role             string
		created, expires Time
		ucreated         Time
	)
	err := s.reader().QueryRow(ctx, `SELECT w.hash, w.user_id, w.via, w.created_at, w.expires_at,
	u.id, u.name, u.role, u.disabled, u.created_at
FROM web_sessions w JOIN users u ON u.id = w.user_id
WHERE w.hash = ? AND w.token_id = '' AND w.expires_at > ?`, hash, s.d.Time(now)).Scan(
		&w.Hash, &w.User, &w.Via, &created, &expires, &u.ID, &u.Name, &role, &u.Disabled, &ucreated)
	if isNoRows(err) {
		return nil, nil, fmt.Errorf("web session: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, nil, s.errorf("user by web session: %w", err)
	}
	w.CreatedAt, w.ExpiresAt = created.T, expires.T
	u.Role, u.CreatedAt = store.Role(role), ucreated.T
	return &w, &u, nil
}

// CreateSignInFlow stores f and drops the flows that have expired.
func (s *Store) CreateSignInFlow(ctx context.Context, f *store.SignInFlow) error {
	if len(f.Hash) == 0 || f.Provider == "" || f.ExpiresAt.IsZero() {
		return s.errorf("create sign-in flow: hash, provider and expiry must be set")
	}
	c := *f
	if c.CreatedAt.IsZero() {
		c.CreatedAt = s.now()
	}
	return s.write(ctx, "create sign-in flow", func(tx Querier) error {
		if _, err := tx.Exec(ctx, `DELETE FROM signin_flows WHERE expires_at <= ?`, s.d.Time(c.CreatedAt)); err != nil {
			return s.errorf("create sign-in flow: dropping expired ones: %w", err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO signin_flows (hash, provider, verifier, nonce, return_to, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			c.Hash, c.Provider, c.Verifier, c.Nonce, c.Return, s.d.Time(c.CreatedAt), s.d.Time(c.ExpiresAt))
		if s.d.IsDuplicate(err) {
			return s.errorf("create sign-in flow: it exists: %w", store.ErrConflict)
		}
		if err != nil {
			return s.errorf("create sign-in flow: %w", err)
		}
		return nil
	})
}

// TakeSignInFlow deletes the flow and returns it: the DELETE ...
// RETURNING is the one step two callbacks race on, so one gets it.
func (s *Store) TakeSignInFlow(ctx context.Context, hash []byte, now time.Time) (*store.SignInFlow, error) {
	var f store.SignInFlow
	found := false
	err := s.write(ctx, "take sign-in flow", func(tx Querier) error {
		var created, expires Time
		err := tx.QueryRow(ctx, `DELETE FROM signin_flows WHERE hash = ?
RETURNING hash, provider, verifier, nonce, return_to, created_at, expires_at`, hash).Scan(
			&f.Hash, &f.Provider, &f.Verifier, &f.Nonce, &f.Return, &created, &expires)
		if isNoRows(err) {
			return nil
		}
		if err != nil {
			return s.errorf("take sign-in flow: %w", err)
		}
		f.CreatedAt, f.ExpiresAt = created.T, expires.T
		found = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !found || !f.ExpiresAt.After(now) {
		return nil, fmt.Errorf("sign-in flow: %w", store.ErrNotFound)
	}
	return &f, nil
}

// PutOAuthGrant stores g over the user's grant of its provider.
func (s *Store) PutOAuthGrant(ctx context.Context, g *store.OAuthGrant) error {
	if g.User == "" || g.Provider == "" || len(g.Access) == 0 {
		return s.errorf("put oauth grant: user, provider and access token must be set")
	}
	c := *g
	if c.UpdatedAt.IsZero() {
		c.UpdatedAt = s.now()
	}
	return s.write(ctx, "put oauth grant", func(tx Querier) error {
		_, err := tx.Exec(ctx, `INSERT INTO oauth_grants (user_id, provider, access, refresh, expires_at, refresh_expires_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (user_id, provider) DO UPDATE SET access = excluded.access, refresh = excluded.refresh,
	expires_at = excluded.expires_at, refresh_expires_at = excluded.refresh_expires_at, updated_at = excluded.updated_at`,
			c.User, c.Provider, c.Access, nonNilBytes(c.Refresh), s.d.Time(c.ExpiresAt), s.d.Time(c.RefreshExpiresAt), s.d.Time(c.UpdatedAt))
		if err != nil {
			return s.errorf("put oauth grant: %w", err)
		}
		return nil
	})
}

// OAuthGrant reads a user's grant of a provider.
func (s *Store) OAuthGrant(ctx context.Context, user, provider string) (*store.OAuthGrant, error) {
	var (
		g                         store.OAuthGrant
		expires, rexpires, update Time
	)
	err := s.reader().QueryRow(ctx, `SELECT user_id, provider, access, refresh, expires_at, refresh_expires_at, updated_at
FROM oauth_grants WHERE user_id = ? AND provider = ?`, user, provider).Scan(
		&g.User, &g.Provider, &g.Access, &g.Refresh, &expires, &rexpires, &update)
	if isNoRows(err) {
		return nil, fmt.Errorf("oauth grant of %s at %s: %w", user, provider, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("oauth grant: %w", err)
	}
	if len(g.Refresh) == 0 {
		g.Refresh = nil
	}
	g.ExpiresAt, g.RefreshExpiresAt, g.UpdatedAt = expires.T, rexpires.T, update.T
	return &g, nil
}

// nonNilBytes: a NOT NULL bytes column gets an empty value, not NULL.
func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
