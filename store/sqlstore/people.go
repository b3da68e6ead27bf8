package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/harvest-dev/harvest/store"
)

const userCols = `id, name, role, disabled, created_at`

func scanUser(r Row) (*store.User, error) {
	var (
		u       store.User
		role    string
		created Time
	)
	if err := r.Scan(&u.ID, &u.Name, &role, &u.Disabled, &created); err != nil {
		return nil, err
	}
	u.Role, u.CreatedAt = store.Role(role), created.T
	return &u, nil
}

// checkUser is what every stored user satisfies.
func checkUser(u *store.User) error {
	switch {
	case !strings.HasPrefix(u.ID, "usr-") || len(u.ID) == len("usr-"):
		return fmt.Errorf("user id %q: it must start with usr-", u.ID)
	case strings.TrimSpace(u.Name) == "":
		return fmt.Errorf("user %s: the name must not be empty", u.ID)
	case !u.Role.Valid():
		return fmt.Errorf("user %s: role %q: it must be admin, member or viewer", u.ID, u.Role)
	}
	return nil
}

// insertUser inserts u in tx (a zero CreatedAt is now, set in u).
func (s *Store) insertUser(ctx context.Context, tx Querier, u *store.User) error {
	if err := checkUser(u); err != nil {
		return err
	}
	if u.CreatedAt.IsZero() {
		u.CreatedAt = s.now()
	}
	_, err := tx.Exec(ctx, `INSERT INTO users (`+userCols+`) VALUES (?, ?, ?, ?, ?)`,
		u.ID, u.Name, string(u.Role), u.Disabled, s.d.Time(u.CreatedAt))
	if s.d.IsDuplicate(err) {
		return fmt.Errorf("user %s exists: %w", u.ID, store.ErrConflict)
	}
	return err
}

// CreateUser stores u, with the context's audit entry.
func (s *Store) CreateUser(ctx context.Context, u *store.User) error {
	c := *u
	err := s.write(ctx, "create user "+u.ID, func(tx Querier) error {
		if err := s.insertUser(ctx, tx, &c); err != nil {
			return s.errorf("create user: %w", err)
		}
		return s.auditIn(ctx, tx)
	})
	if err == nil {
		*u = c
	}
	return err
}

// GetUser reads a user, or ErrNotFound.
func (s *Store) GetUser(ctx context.Context, id string) (*store.User, error) {
	u, err := scanUser(s.reader().QueryRow(ctx, `SELECT `+userCols+` FROM users WHERE id = ?`, id))
	if isNoRows(err) {
		return nil, fmt.Errorf("user %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("get user %s: %w", id, err)
	}
	return u, nil
}

// ListUsers lists every user, oldest first.
func (s *Store) ListUsers(ctx context.Context) ([]*store.User, error) {
	rows, err := s.reader().Query(ctx, `SELECT `+userCols+` FROM users ORDER BY created_at, id`)
	out, err := collect(rows, err, scanUser)
	if err != nil {
		return nil, s.errorf("list users: %w", err)
	}
	return out, nil
}

// UpdateUser reads the user with its row locked, calls fn and writes it
// back with the context's audit entry, in one transaction. fn runs once
// (DB.WriteOnce).
func (s *Store) UpdateUser(ctx context.Context, id string, fn func(*store.User) error) (*store.User, error) {
	var out *store.User
	err := s.db.WriteOnce(ctx, "update user "+id, func(tx Querier) error {
		u, err := scanUser(tx.QueryRow(ctx, `SELECT `+userCols+` FROM users WHERE id = ?`+s.d.Lock(LockNoKeyUpdate), id))
		if isNoRows(err) {
			return fmt.Errorf("user %s: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return s.errorf("update user %s: %w", id, err)
		}
		created := u.CreatedAt
		if err := fn(u); err != nil {
			return err
		}
		if u.ID != id || !u.CreatedAt.Equal(created) {
			return s.errorf("update user %s: the update changed its id or creation time; they are fixed", id)
		}
		if err := checkUser(u); err != nil {
			return s.errorf("update user: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE users SET name = ?, role = ?, disabled = ? WHERE id = ?`,
			u.Name, string(u.Role), u.Disabled, id); err != nil {
			return s.errorf("update user %s: %w", id, err)
		}
		out = u
		return s.auditIn(ctx, tx)
	})
	return out, err
}

const identityCols = `user_id, kind, issuer, subject, login, email, created_at`

func scanIdentity(r Row) (*store.Identity, error) {
	var (
		i       store.Identity
		created Time
	)
	if err := r.Scan(&i.User, &i.Kind, &i.Issuer, &i.Subject, &i.Login, &i.Email, &created); err != nil {
		return nil, err
	}
	i.CreatedAt = created.T
	return &i, nil
}

func checkIdentity(i *store.Identity) error {
	switch i.Kind {
	case store.IdentityGitHub, store.IdentityOIDC, store.IdentitySlack:
	default:
		return fmt.Errorf("identity kind %q: it must be github, oidc or slack", i.Kind)
	}
	if i.Subject == "" {
		return fmt.Errorf("a %s identity needs its subject", i.Kind)
	}
	return nil
}

// insertIdentity inserts i in tx (a zero CreatedAt is now, set in i).
func (s *Store) insertIdentity(ctx context.Context, tx Querier, i *store.Identity) error {
	if err := checkIdentity(i); err != nil {
		return err
	}
	if i.CreatedAt.IsZero() {
		i.CreatedAt = s.now()
	}
	_, err := tx.Exec(ctx, `INSERT INTO identities (`+identityCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		i.User, i.Kind, i.Issuer, i.Subject, i.Login, i.Email, s.d.Time(i.CreatedAt))
	switch {
	case s.d.IsDuplicate(err):
		return fmt.Errorf("the %s identity %s is someone's already: %w", i.Kind, i.Subject, store.ErrConflict)
	case s.d.IsMissingParent(err):
		return fmt.Errorf("user %s: %w", i.User, store.ErrNotFound)
	}
	return err
}

// AddIdentity gives i.User the identity i.
func (s *Store) AddIdentity(ctx context.Context, i *store.Identity) error {
	c := *i
	err := s.write(ctx, "add identity", func(tx Querier) error {
		// SQLite checks foreign keys; so does PostgreSQL: a missing user
		// is IsMissingParent in both.
		if err := s.insertIdentity(ctx, tx, &c); err != nil {
			return s.errorf("add identity: %w", err)
		}
		return nil
	})
	if err == nil {
		*i = c
	}
	return err
}

// Identities lists a user's identities, by kind, issuer and subject.
func (s *Store) Identities(ctx context.Context, user string) ([]*store.Identity, error) {
	rows, err := s.reader().Query(ctx, `SELECT `+identityCols+` FROM identities WHERE user_id = ? ORDER BY kind, issuer, subject`, user)
	out, err := collect(rows, err, scanIdentity)
	if err != nil {
		return nil, s.errorf("identities of %s: %w", user, err)
	}
	return out, nil
}

// UserByIdentity finds the user of an identity, or ErrNotFound.
func (s *Store) UserByIdentity(ctx context.Context, kind, issuer, subject string) (*store.User, error) {
	u, err := scanUser(s.reader().QueryRow(ctx, `SELECT u.id, u.name, u.role, u.disabled, u.created_at
FROM identities i JOIN users u ON u.id = i.user_id WHERE i.kind = ? AND i.issuer = ? AND i.subject = ?`, kind, issuer, subject))
	if isNoRows(err) {
		return nil, fmt.Errorf("the user of %s identity %s: %w", kind, subject, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("user by identity: %w", err)
	}
	return u, nil
}

// UserForIdentity finds i's user, or makes u with i. Of two callers that
// both see i first, one creates u; the other's insert conflicts, and it
// reads the winner's user.
func (s *Store) UserForIdentity(ctx context.Context, i *store.Identity, u *store.User) (*store.User, bool, error) {
	if err := checkIdentity(i); err != nil {
		return nil, false, s.errorf("user for identity: %w", err)
	}
	for range 2 {
		var (
			out     *store.User
			created bool
		)
		err := s.write(ctx, "user for identity", func(tx Querier) error {
			out, created = nil, false
			found, err := scanUser(tx.QueryRow(ctx, `SELECT u.id, u.name, u.role, u.disabled, u.created_at
FROM identities i JOIN users u ON u.id = i.user_id WHERE i.kind = ? AND i.issuer = ? AND i.subject = ?`, i.Kind, i.Issuer, i.Subject))
			switch {
			case err == nil:
				if _, err := tx.Exec(ctx, `UPDATE identities SET login = ?, email = ? WHERE kind = ? AND issuer = ? AND subject = ? AND (login <> ? OR email <> ?)`,
					i.Login, i.Email, i.Kind, i.Issuer, i.Subject, i.Login, i.Email); err != nil {
					return s.errorf("user for identity: updating its login: %w", err)
				}
				out = found
				return nil
			case !isNoRows(err):
				return s.errorf("user for identity: %w", err)
			}
			c := *u
			if err := s.insertUser(ctx, tx, &c); err != nil {
				return s.errorf("user for identity: %w", err)
			}
			idn := *i
			idn.User = c.ID
			if err := s.insertIdentity(ctx, tx, &idn); err != nil {
				return s.errorf("user for identity: %w", err)
			}
			out, created = &c, true
			return nil
		})
		if err == nil {
			return out, created, nil
		}
		if !errors.Is(err, store.ErrConflict) || ctx.Err() != nil {
			return nil, false, err
		}
		// Another caller created the identity meanwhile: read it.
	}
	return nil, false, s.errorf("user for identity %s %s: it conflicted twice", i.Kind, i.Subject)
}
