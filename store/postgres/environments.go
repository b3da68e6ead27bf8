package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-dev/harvest/store"
)

const envCols = `id, repo, name, ref, commit_sha, fingerprint, backend, state, detected, error, size_bytes, created_at, built_at`

func envArgs(e *store.Environment) ([]any, error) {
	det := e.Detected
	if det == nil {
		det = []string{}
	}
	b, err := json.Marshal(det)
	if err != nil {
		return nil, fmt.Errorf("environment %s: encoding detected: %w", e.ID, err)
	}
	return []any{e.ID, e.Repo, e.Name, e.Ref, e.Commit, e.Fingerprint, e.Backend, e.State, string(b), e.Error,
		e.SizeBytes, ts(e.CreatedAt), ts(e.BuiltAt)}, nil
}

func scanEnv(r scanner) (*store.Environment, error) {
	var (
		e       store.Environment
		det     []byte
		created time.Time
		built   *time.Time
	)
	if err := r.Scan(&e.ID, &e.Repo, &e.Name, &e.Ref, &e.Commit, &e.Fingerprint, &e.Backend, &e.State, &det, &e.Error,
		&e.SizeBytes, &created, &built); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(det, &e.Detected); err != nil {
		return nil, fmt.Errorf("environment %s: decoding detected: %w", e.ID, err)
	}
	if len(e.Detected) == 0 {
		e.Detected = nil
	}
	e.CreatedAt, e.BuiltAt = created.UTC(), tm(built)
	return &e, nil
}

// CreateEnvironment stores e; an existing id is ErrConflict.
func (s *Store) CreateEnvironment(ctx context.Context, e *store.Environment) error {
	if e.ID == "" || e.Repo == "" || e.State == "" {
		return errors.New("postgres: create environment: id, repo and state must not be empty")
	}
	c := *e
	if c.CreatedAt.IsZero() {
		c.CreatedAt = s.now()
	}
	args, err := envArgs(&c)
	if err != nil {
		return fmt.Errorf("postgres: create environment: %w", err)
	}
	err = s.write(ctx, "create environment "+c.ID, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO environments (`+envCols+`) VALUES (`+placeholders(1, len(args))+`)`, args...)
		if isDuplicate(err) {
			return fmt.Errorf("postgres: environment %s exists: %w", c.ID, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("postgres: create environment %s: %w", c.ID, err)
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
	e, err := scanEnv(s.pool.QueryRow(ctx, `SELECT `+envCols+` FROM environments WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("environment %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get environment %s: %w", id, err)
	}
	return e, nil
}

// ListEnvironments lists those matching f, newest first.
func (s *Store) ListEnvironments(ctx context.Context, f store.EnvironmentFilter) ([]*store.Environment, error) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.Repo != "" {
		where = append(where, "repo = "+arg(f.Repo))
	}
	if f.Backend != "" {
		where = append(where, "backend = "+arg(f.Backend))
	}
	if len(f.States) > 0 {
		where = append(where, "state = ANY("+arg(f.States)+")")
	}
	q := `SELECT ` + envCols + ` FROM environments`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := s.pool.Query(ctx, q+" ORDER BY created_at DESC, id DESC", args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list environments: %w", err)
	}
	out, err := collect(rows, scanEnv)
	if err != nil {
		return nil, fmt.Errorf("postgres: list environments: %w", err)
	}
	return out, nil
}

// UpdateEnvironment reads one with its row locked, calls fn on it and
// writes it back, in one transaction. fn is called once.
func (s *Store) UpdateEnvironment(ctx context.Context, id string, fn func(*store.Environment) error) (*store.Environment, error) {
	var out *store.Environment
	err := s.attempt(ctx, "update environment "+id, func(tx pgx.Tx) error {
		e, err := scanEnv(tx.QueryRow(ctx, `SELECT `+envCols+` FROM environments WHERE id = $1 FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("environment %s: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("postgres: update environment %s: %w", id, err)
		}
		if err := fn(e); err != nil {
			return err
		}
		e.ID = id
		args, err := envArgs(e)
		if err != nil {
			return fmt.Errorf("postgres: update environment %s: %w", id, err)
		}
		if _, err := tx.Exec(ctx, `UPDATE environments SET repo=$1, name=$2, ref=$3, commit_sha=$4, fingerprint=$5, backend=$6,
	state=$7, detected=$8, error=$9, size_bytes=$10, created_at=$11, built_at=$12 WHERE id=$13`, append(args[1:], id)...); err != nil {
			return fmt.Errorf("postgres: update environment %s: %w", id, err)
		}
		out = e
		return nil
	})
	return out, err
}
