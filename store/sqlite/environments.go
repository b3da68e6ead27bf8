package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/harvest-dev/harvest/store"
)

const envCols = `id, repo, name, ref, commit_sha, fingerprint, backend, state, detected, error, size_bytes, created_at, built_at`

func envArgs(e *store.Environment) ([]any, error) {
	det, err := json.Marshal(e.Detected)
	if err != nil {
		return nil, err
	}
	if e.Detected == nil {
		det = []byte("[]")
	}
	return []any{e.ID, e.Repo, e.Name, e.Ref, e.Commit, e.Fingerprint, e.Backend, e.State, string(det), e.Error,
		e.SizeBytes, ts(e.CreatedAt), ts(e.BuiltAt)}, nil
}

func scanEnv(r scanner) (*store.Environment, error) {
	var (
		e              store.Environment
		det            string
		created, built int64
	)
	if err := r.Scan(&e.ID, &e.Repo, &e.Name, &e.Ref, &e.Commit, &e.Fingerprint, &e.Backend, &e.State, &det, &e.Error,
		&e.SizeBytes, &created, &built); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(det), &e.Detected); err != nil {
		return nil, fmt.Errorf("environment %s: decoding detected: %w", e.ID, err)
	}
	if len(e.Detected) == 0 {
		e.Detected = nil
	}
	e.CreatedAt, e.BuiltAt = tm(created), tm(built)
	return &e, nil
}

// CreateEnvironment stores e; an existing id is ErrConflict.
func (s *Store) CreateEnvironment(ctx context.Context, e *store.Environment) error {
	if e.ID == "" || e.Repo == "" || e.State == "" {
		return errors.New("sqlite: create environment: id, repo and state must not be empty")
	}
	c := *e
	if c.CreatedAt.IsZero() {
		c.CreatedAt = s.now().UTC()
	}
	args, err := envArgs(&c)
	if err != nil {
		return err
	}
	err = s.write(ctx, "sqlite: create environment "+c.ID, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO environments (`+envCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)`, args...)
		if isDuplicate(err) {
			return fmt.Errorf("sqlite: environment %s exists: %w", c.ID, store.ErrConflict)
		}
		return err
	})
	if err == nil {
		*e = c
	}
	return err
}

// GetEnvironment reads one, or ErrNotFound.
func (s *Store) GetEnvironment(ctx context.Context, id string) (*store.Environment, error) {
	e, err := scanEnv(s.r.QueryRowContext(ctx, `SELECT `+envCols+` FROM environments WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("environment %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get environment %s: %w", id, err)
	}
	return e, nil
}

// ListEnvironments lists those matching f, newest first.
func (s *Store) ListEnvironments(ctx context.Context, f store.EnvironmentFilter) ([]*store.Environment, error) {
	var where []string
	var args []any
	if f.Repo != "" {
		where, args = append(where, "repo = ?"), append(args, f.Repo)
	}
	if f.Backend != "" {
		where, args = append(where, "backend = ?"), append(args, f.Backend)
	}
	if len(f.States) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(",?", len(f.States)-1)+")")
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	q := `SELECT ` + envCols + ` FROM environments`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC"
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list environments: %w", err)
	}
	defer rows.Close()
	var out []*store.Environment
	for rows.Next() {
		e, err := scanEnv(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list environments: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// UpdateEnvironment changes one in a transaction.
func (s *Store) UpdateEnvironment(ctx context.Context, id string, fn func(*store.Environment) error) (*store.Environment, error) {
	var out *store.Environment
	err := s.write(ctx, "sqlite: update environment "+id, func(tx *sql.Tx) error {
		e, err := scanEnv(tx.QueryRowContext(ctx, `SELECT `+envCols+` FROM environments WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("environment %s: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
		e.ID = id
		args, err := envArgs(e)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE environments SET repo=?, name=?, ref=?, commit_sha=?, fingerprint=?, backend=?,
	state=?, detected=?, error=?, size_bytes=?, created_at=?, built_at=? WHERE id=?`, append(args[1:], id)...); err != nil {
			return err
		}
		out = e
		return nil
	})
	return out, err
}
