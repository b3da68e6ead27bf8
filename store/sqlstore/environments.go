package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/harvest-dev/harvest/store"
)

const envCols = `id, repo, name, ref, commit_sha, fingerprint, backend, state, detected, error, size_bytes, created_at, built_at, user_id`

func (s *Store) envArgs(e *store.Environment) ([]any, error) {
	det := e.Detected
	if det == nil {
		det = []string{}
	}
	b, err := json.Marshal(det)
	if err != nil {
		return nil, fmt.Errorf("environment %s: encoding detected: %w", e.ID, err)
	}
	return []any{e.ID, e.Repo, e.Name, e.Ref, e.Commit, e.Fingerprint, e.Backend, e.State, string(b), e.Error,
		e.SizeBytes, s.d.Time(e.CreatedAt), s.d.Time(e.BuiltAt), e.User}, nil
}

func scanEnv(r Row) (*store.Environment, error) {
	var (
		e              store.Environment
		det            []byte
		created, built Time
	)
	if err := r.Scan(&e.ID, &e.Repo, &e.Name, &e.Ref, &e.Commit, &e.Fingerprint, &e.Backend, &e.State, &det, &e.Error,
		&e.SizeBytes, &created, &built, &e.User); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(det, &e.Detected); err != nil {
		return nil, fmt.Errorf("environment %s: decoding detected: %w", e.ID, err)
	}
	if len(e.Detected) == 0 {
		e.Detected = nil
	}
	e.CreatedAt, e.BuiltAt = created.T, built.T
	return &e, nil
}

// CreateEnvironment stores e; an existing id is ErrConflict.
func (s *Store) CreateEnvironment(ctx context.Context, e *store.Environment) error {
	if e.ID == "" || e.Repo == "" || e.State == "" {
		return s.errorf("create environment: id, repo and state must not be empty")
	}
	c := *e
	if c.CreatedAt.IsZero() {
		c.CreatedAt = s.now()
	}
	args, err := s.envArgs(&c)
	if err != nil {
		return s.errorf("create environment: %w", err)
	}
	err = s.write(ctx, "create environment "+c.ID, func(tx Querier) error {
		_, err := tx.Exec(ctx, `INSERT INTO environments (`+envCols+`) VALUES `+in(len(args)), args...)
		if s.d.IsDuplicate(err) {
			return s.errorf("environment %s exists: %w", c.ID, store.ErrConflict)
		}
		if err != nil {
			return s.errorf("create environment %s: %w", c.ID, err)
		}
		return nil
	})
	if err == nil {
		*e = c
	}
	return err
}

// GetEnvironment reads one, or ErrNotFound.
func (s *Store) GetEnvironment(ctx context.Context, id string) (*store.Environment, error) {
	e, err := scanEnv(s.reader().QueryRow(ctx, `SELECT `+envCols+` FROM environments WHERE id = ?`, id))
	if isNoRows(err) {
		return nil, fmt.Errorf("environment %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("get environment %s: %w", id, err)
	}
	return e, nil
}

// ListEnvironments lists those matching f, newest first.
func (s *Store) ListEnvironments(ctx context.Context, f store.EnvironmentFilter) ([]*store.Environment, error) {
	var (
		where []string
		args  []any
	)
	if f.Repo != "" {
		where, args = append(where, "repo = ?"), append(args, f.Repo)
	}
	if f.Backend != "" {
		where, args = append(where, "backend = ?"), append(args, f.Backend)
	}
	if len(f.States) > 0 {
		where = append(where, "state IN "+in(len(f.States)))
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	q := `SELECT ` + envCols + ` FROM environments`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := s.reader().Query(ctx, q+" ORDER BY created_at DESC, id DESC", args...)
	out, err := collect(rows, err, scanEnv)
	if err != nil {
		return nil, s.errorf("list environments: %w", err)
	}
	return out, nil
}

// UpdateEnvironment reads one with its row locked, calls fn on it and
// writes it back, in one transaction. fn is called once.
func (s *Store) UpdateEnvironment(ctx context.Context, id string, fn func(*store.Environment) error) (*store.Environment, error) {
	var out *store.Environment
	err := s.db.WriteOnce(ctx, "update environment "+id, func(tx Querier) error {
		e, err := scanEnv(tx.QueryRow(ctx, `SELECT `+envCols+` FROM environments WHERE id = ?`+s.d.Lock(LockUpdate), id))
		if isNoRows(err) {
			return fmt.Errorf("environment %s: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return s.errorf("update environment %s: %w", id, err)
		}
		if err := fn(e); err != nil {
			return err
		}
		e.ID = id
		args, err := s.envArgs(e)
		if err != nil {
			return s.errorf("update environment %s: %w", id, err)
		}
		if _, err := tx.Exec(ctx, `UPDATE environments SET repo=?, name=?, ref=?, commit_sha=?, fingerprint=?, backend=?,
	state=?, detected=?, error=?, size_bytes=?, created_at=?, built_at=?, user_id=? WHERE id=?`, append(args[1:], id)...); err != nil {
			return s.errorf("update environment %s: %w", id, err)
		}
		out = e
		return nil
	})
	return out, err
}
