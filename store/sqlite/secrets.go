package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/harvest-dev/harvest/store"
)

const secretCols = `scope, name, ciphertext, key_id, session, set_by, created_at, updated_at`

func scanSecret(r scanner) (*store.Secret, error) {
	var (
		x                store.Secret
		created, updated int64
	)
	if err := r.Scan(&x.Scope, &x.Name, &x.Ciphertext, &x.KeyID, &x.Session, &x.SetBy, &created, &updated); err != nil {
		return nil, err
	}
	x.CreatedAt, x.UpdatedAt = tm(created), tm(updated)
	return &x, nil
}

// PutSecret stores x, replacing the secret of its scope and name (whose
// creation time it keeps).
func (s *Store) PutSecret(ctx context.Context, x *store.Secret) error {
	if x.Scope == "" || x.Name == "" || len(x.Ciphertext) == 0 || x.KeyID == "" {
		return fmt.Errorf("sqlite: put secret %s %s: scope, name, ciphertext and key id must not be empty", x.Scope, x.Name)
	}
	c := *x
	if c.UpdatedAt.IsZero() {
		c.UpdatedAt = s.now().UTC()
	}
	var out *store.Secret
	err := s.write(ctx, "sqlite: put secret "+x.Scope+" "+x.Name, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO secrets (`+secretCols+`) VALUES (?,?,?,?,?,?,?,?)
ON CONFLICT (scope, name) DO UPDATE SET ciphertext = excluded.ciphertext, key_id = excluded.key_id,
	session = excluded.session, set_by = excluded.set_by, updated_at = excluded.updated_at`,
			c.Scope, c.Name, c.Ciphertext, c.KeyID, c.Session, c.SetBy, ts(c.UpdatedAt), ts(c.UpdatedAt))
		if err != nil {
			return fmt.Errorf("sqlite: put secret %s %s: %w", c.Scope, c.Name, err)
		}
		out, err = scanSecret(tx.QueryRowContext(ctx, `SELECT `+secretCols+` FROM secrets WHERE scope = ? AND name = ?`, c.Scope, c.Name))
		if err != nil {
			return fmt.Errorf("sqlite: put secret %s %s: reading it back: %w", c.Scope, c.Name, err)
		}
		return nil
	})
	if err == nil {
		*x = *out
	}
	return err
}

// GetSecret reads one secret, or ErrNotFound.
func (s *Store) GetSecret(ctx context.Context, scope, name string) (*store.Secret, error) {
	x, err := scanSecret(s.r.QueryRowContext(ctx, `SELECT `+secretCols+` FROM secrets WHERE scope = ? AND name = ?`, scope, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("secret %s %s: %w", scope, name, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get secret %s %s: %w", scope, name, err)
	}
	return x, nil
}

// ListSecrets lists the secrets of scopes (all when none), by scope and
// name.
func (s *Store) ListSecrets(ctx context.Context, scopes ...string) ([]*store.Secret, error) {
	q := `SELECT ` + secretCols + ` FROM secrets`
	var args []any
	if len(scopes) > 0 {
		q += ` WHERE scope IN (?` + strings.Repeat(`,?`, len(scopes)-1) + `)`
		for _, sc := range scopes {
			args = append(args, sc)
		}
	}
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY scope, name`, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list secrets: %w", err)
	}
	defer rows.Close()
	var out []*store.Secret
	for rows.Next() {
		x, err := scanSecret(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list secrets: %w", err)
		}
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list secrets: %w", err)
	}
	return out, nil
}

// DeleteSecret removes one secret, or fails with ErrNotFound.
func (s *Store) DeleteSecret(ctx context.Context, scope, name string) error {
	return s.write(ctx, "sqlite: delete secret "+scope+" "+name, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM secrets WHERE scope = ? AND name = ?`, scope, name)
		if err != nil {
			return fmt.Errorf("sqlite: delete secret %s %s: %w", scope, name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("secret %s %s: %w", scope, name, store.ErrNotFound)
		}
		return nil
	})
}
