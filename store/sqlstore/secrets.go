package sqlstore

import (
	"context"
	"fmt"

	"github.com/harvest-dev/harvest/store"
)

const secretCols = `scope, name, ciphertext, key_id, session, set_by, created_at, updated_at, set_by_user`

func scanSecret(r Row) (*store.Secret, error) {
	var (
		x                store.Secret
		created, updated Time
	)
	if err := r.Scan(&x.Scope, &x.Name, &x.Ciphertext, &x.KeyID, &x.Session, &x.SetBy, &created, &updated, &x.SetByUser); err != nil {
		return nil, err
	}
	x.CreatedAt, x.UpdatedAt = created.T, updated.T
	return &x, nil
}

// PutSecret stores x, replacing the secret of its scope and name (whose
// creation time it keeps); x is updated to what was stored.
func (s *Store) PutSecret(ctx context.Context, x *store.Secret) error {
	if x.Scope == "" || x.Name == "" || len(x.Ciphertext) == 0 || x.KeyID == "" {
		return s.errorf("put secret %s %s: scope, name, ciphertext and key id must not be empty", x.Scope, x.Name)
	}
	c := *x
	if c.UpdatedAt.IsZero() {
		c.UpdatedAt = s.now()
	}
	var out *store.Secret
	err := s.write(ctx, "put secret "+x.Scope+" "+x.Name, func(tx Querier) error {
		at := s.d.Time(c.UpdatedAt)
		var err error
		out, err = scanSecret(tx.QueryRow(ctx, `INSERT INTO secrets (`+secretCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (scope, name) DO UPDATE SET ciphertext = excluded.ciphertext, key_id = excluded.key_id,
	session = excluded.session, set_by = excluded.set_by, updated_at = excluded.updated_at, set_by_user = excluded.set_by_user
RETURNING `+secretCols, c.Scope, c.Name, c.Ciphertext, c.KeyID, c.Session, c.SetBy, at, at, c.SetByUser))
		if err != nil {
			return s.errorf("put secret %s %s: %w", c.Scope, c.Name, err)
		}
		return s.auditIn(ctx, tx)
	})
	if err == nil {
		*x = *out
	}
	return err
}

// GetSecret reads one secret, or ErrNotFound.
func (s *Store) GetSecret(ctx context.Context, scope, name string) (*store.Secret, error) {
	x, err := scanSecret(s.reader().QueryRow(ctx, `SELECT `+secretCols+` FROM secrets WHERE scope = ? AND name = ?`, scope, name))
	if isNoRows(err) {
		return nil, fmt.Errorf("secret %s %s: %w", scope, name, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("get secret %s %s: %w", scope, name, err)
	}
	return x, nil
}

// ListSecrets lists the secrets of scopes (all when none), by scope and
// name.
func (s *Store) ListSecrets(ctx context.Context, scopes ...string) ([]*store.Secret, error) {
	q := `SELECT ` + secretCols + ` FROM secrets`
	var args []any
	if len(scopes) > 0 {
		q += ` WHERE scope IN ` + in(len(scopes))
		for _, sc := range scopes {
			args = append(args, sc)
		}
	}
	rows, err := s.reader().Query(ctx, q+` ORDER BY scope, name`, args...)
	out, err := collect(rows, err, scanSecret)
	if err != nil {
		return nil, s.errorf("list secrets: %w", err)
	}
	return out, nil
}

// DeleteSecret removes one secret, or fails with ErrNotFound.
func (s *Store) DeleteSecret(ctx context.Context, scope, name string) error {
	return s.write(ctx, "delete secret "+scope+" "+name, func(tx Querier) error {
		n, err := tx.Exec(ctx, `DELETE FROM secrets WHERE scope = ? AND name = ?`, scope, name)
		if err != nil {
			return s.errorf("delete secret %s %s: %w", scope, name, err)
		}
		if n == 0 {
			return fmt.Errorf("secret %s %s: %w", scope, name, store.ErrNotFound)
		}
		return s.auditIn(ctx, tx)
	})
}
