package sqlstore

import (
	"context"
	"fmt"

	"github.com/harvest-dev/harvest/store"
)

// CreateToken stores t (ID and Hash set by the caller; a zero CreatedAt is
// set to now). An id or hash that exists is ErrConflict. A token with no
// user that is not a node's becomes a user of its own, in the same
// transaction (store.UserIDForToken); a user that does not exist is
// ErrNotFound.
func (s *Store) CreateToken(ctx context.Context, t *store.Token) error {
	if t.ID == "" || len(t.Hash) == 0 {
		return s.errorf("create token %q: id and hash must not be empty", t.Name)
	}
	c := *t
	if c.CreatedAt.IsZero() {
		c.CreatedAt = s.now()
	}
	own := c.User == "" && !store.IsNodeToken(c.Name)
	if own {
		c.User = store.UserIDForToken(c.ID)
	}
	c.Role, c.Disabled = "", false
	err := s.write(ctx, "create token "+t.ID, func(tx Querier) error {
		switch {
		case own:
			role := store.RoleMember
			if c.Admin {
				role = store.RoleAdmin
			}
			u := &store.User{ID: c.User, Name: c.Name, Role: role, CreatedAt: c.CreatedAt}
			if err := s.insertUser(ctx, tx, u); err != nil {
				return s.errorf("create token %s: its user: %w", c.ID, err)
			}
			c.Role = role
		case c.User != "":
			u, err := scanUser(tx.QueryRow(ctx, `SELECT `+userCols+` FROM users WHERE id = ?`, c.User))
			if isNoRows(err) {
				return fmt.Errorf("create token %s: user %s: %w", c.ID, c.User, store.ErrNotFound)
			}
			if err != nil {
				return s.errorf("create token %s: reading user %s: %w", c.ID, c.User, err)
			}
			c.Role, c.Disabled = u.Role, u.Disabled
		}
		_, err := tx.Exec(ctx, `INSERT INTO tokens (id, name, hash, admin, created_at, user_id) VALUES (?, ?, ?, ?, ?, ?)`,
			c.ID, c.Name, c.Hash, c.Admin, s.d.Time(c.CreatedAt), c.User)
		if s.d.IsDuplicate(err) {
			return s.errorf("create token %s (%s): a token with this id or secret exists: %w", c.ID, c.Name, store.ErrConflict)
		}
		if err != nil {
			return s.errorf("create token %s: %w", c.ID, err)
		}
		return s.auditIn(ctx, tx)
	})
	if err == nil {
		*t = c
	}
	return err
}

// tokenCols are a token's columns with its user's role and disabled, of
// tokens t LEFT JOIN users u (a node's token has no user).
const tokenCols = `t.id, t.name, t.hash, t.admin, t.created_at, t.user_id, COALESCE(u.role, ''), COALESCE(u.disabled, false)`

// tokenFrom is what tokenCols are selected from.
const tokenFrom = ` FROM tokens t LEFT JOIN users u ON u.id = t.user_id`

func scanToken(r Row) (*store.Token, error) {
	var (
		t       store.Token
		created Time
		role    string
	)
	if err := r.Scan(&t.ID, &t.Name, &t.Hash, &t.Admin, &created, &t.User, &role, &t.Disabled); err != nil {
		return nil, err
	}
	t.CreatedAt, t.Role = created.T, store.Role(role)
	return &t, nil
}

// TokenByHash finds the token whose secret has SHA-256 hash, with its
// user's role and disabled, or ErrNotFound.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	t, err := scanToken(s.reader().QueryRow(ctx, `SELECT `+tokenCols+tokenFrom+` WHERE t.hash = ?`, hash))
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
	rows, err := s.reader().Query(ctx, `SELECT `+tokenCols+tokenFrom+` ORDER BY t.created_at, t.id`)
	out, err := collect(rows, err, scanToken)
	if err != nil {
		return nil, s.errorf("list tokens: %w", err)
	}
	return out, nil
}

// UserTokens lists the tokens of a user, oldest first.
func (s *Store) UserTokens(ctx context.Context, user string) ([]*store.Token, error) {
	rows, err := s.reader().Query(ctx, `SELECT `+tokenCols+tokenFrom+` WHERE t.user_id = ? ORDER BY t.created_at, t.id`, user)
	out, err := collect(rows, err, scanToken)
	if err != nil {
		return nil, s.errorf("tokens of user %s: %w", user, err)
	}
	return out, nil
}

// DeleteToken removes the token id, its user secrets, its own memory
// (every repository's) and its web sessions, in one transaction, or fails
// with ErrNotFound. Its user stays.
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
		return s.auditIn(ctx, tx)
	})
}
