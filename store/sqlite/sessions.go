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

const sessionCols = `id, owner, title, state, agent, model, backend, mode, repos, limits,
	sandbox, agent_state, turns, usage, cost_usd, error, created_at, updated_at, active_at, collab, terminal, egress, pr, github, environment, mcp_servers,
	limits_enforced`

// CreateSession stores s and, if first is not nil, its first message (Seq 1)
// in one transaction. Zero CreatedAt/UpdatedAt are set to now; so are a
// zero first.CreatedAt and an empty first.State (queued). A session id that
// exists is ErrConflict.
func (s *Store) CreateSession(ctx context.Context, sess *store.Session, first *store.Message) error {
	if sess.ID == "" {
		return errors.New("sqlite: create session: empty id")
	}
	now := s.now().UTC()
	if sess.CreatedAt.IsZero() {
		sess.CreatedAt = now
	}
	if sess.UpdatedAt.IsZero() {
		sess.UpdatedAt = sess.CreatedAt
	}
	args, err := sessionArgs(sess)
	if err != nil {
		return fmt.Errorf("sqlite: create session %s: %w", sess.ID, err)
	}
	var m store.Message
	if first != nil {
		m = *first
		m.Session, m.Seq = sess.ID, 1
		defaultMessage(&m, now)
	}
	err = s.write(ctx, "sqlite: create session "+sess.ID, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO sessions (`+sessionCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, args...); err != nil {
			if isDuplicate(err) {
				return fmt.Errorf("sqlite: create session %s: a session with this id exists: %w", sess.ID, store.ErrConflict)
			}
			return fmt.Errorf("sqlite: create session %s: %w", sess.ID, err)
		}
		if err := claimBranches(ctx, tx, sess); err != nil {
			return fmt.Errorf("sqlite: create session %s: %w", sess.ID, err)
		}
		if first != nil {
			return insertMessage(ctx, tx, &m)
		}
		return nil
	})
	if err == nil && first != nil {
		*first = m
	}
	return err
}

func sessionArgs(s *store.Session) ([]any, error) {
	repos, err := json.Marshal(s.Repos)
	if err != nil {
		return nil, fmt.Errorf("encoding repos: %w", err)
	}
	limits, err := json.Marshal(s.Limits)
	if err != nil {
		return nil, fmt.Errorf("encoding limits: %w", err)
	}
	usage, err := json.Marshal(s.Usage)
	if err != nil {
		return nil, fmt.Errorf("encoding usage: %w", err)
	}
	collab, err := json.Marshal(s.Collab)
	if err != nil {
		return nil, fmt.Errorf("encoding collab: %w", err)
	}
	var term, eg []byte
	if s.Terminal != nil {
		if term, err = json.Marshal(s.Terminal); err != nil {
			return nil, fmt.Errorf("encoding terminal: %w", err)
		}
	}
	if s.Egress != nil {
		if eg, err = json.Marshal(*s.Egress); err != nil {
			return nil, fmt.Errorf("encoding egress: %w", err)
		}
		if *s.Egress == nil {
			eg = []byte("[]")
		}
	}
	var gh, mcp, enforced []byte
	if s.LimitsEnforced != nil {
		if enforced, err = json.Marshal(s.LimitsEnforced); err != nil {
			return nil, fmt.Errorf("encoding limits_enforced: %w", err)
		}
	}
	if len(s.MCPServers) > 0 {
		if mcp, err = json.Marshal(s.MCPServers); err != nil {
			return nil, fmt.Errorf("encoding mcp_servers: %w", err)
		}
	}
	if s.GitHub != nil {
		if gh, err = json.Marshal(s.GitHub); err != nil {
			return nil, fmt.Errorf("encoding github: %w", err)
		}
	}
	return []any{s.ID, s.Owner, s.Title, string(s.State), s.Agent, s.Model, s.Backend, s.Mode,
		string(repos), string(limits), s.Sandbox, s.AgentState, s.Turns, string(usage), s.CostUSD,
		s.Error, ts(s.CreatedAt), ts(s.UpdatedAt), ts(s.ActiveAt), string(collab), string(term), string(eg), s.PR, string(gh), s.Environment, string(mcp),
		string(enforced)}, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanSession(r scanner) (*store.Session, error) {
	var (
		s                          store.Session
		state, repos, limits, use  string
		collab, term, eg, gh, mcp  string
		enforced                   string
		created, updated, activeAt int64
	)
	if err := r.Scan(&s.ID, &s.Owner, &s.Title, &state, &s.Agent, &s.Model, &s.Backend, &s.Mode,
		&repos, &limits, &s.Sandbox, &s.AgentState, &s.Turns, &use, &s.CostUSD, &s.Error,
		&created, &updated, &activeAt, &collab, &term, &eg, &s.PR, &gh, &s.Environment, &mcp,
		&enforced); err != nil {
		return nil, err
	}
	s.State = store.State(state)
	s.CreatedAt, s.UpdatedAt, s.ActiveAt = tm(created), tm(updated), tm(activeAt)
	if err := json.Unmarshal([]byte(repos), &s.Repos); err != nil {
		return nil, fmt.Errorf("session %s: decoding repos: %w", s.ID, err)
	}
	if err := json.Unmarshal([]byte(limits), &s.Limits); err != nil {
		return nil, fmt.Errorf("session %s: decoding limits: %w", s.ID, err)
	}
	if err := json.Unmarshal([]byte(use), &s.Usage); err != nil {
		return nil, fmt.Errorf("session %s: decoding usage: %w", s.ID, err)
	}
	if err := json.Unmarshal([]byte(collab), &s.Collab); err != nil {
		return nil, fmt.Errorf("session %s: decoding collab: %w", s.ID, err)
	}
	if term != "" {
		s.Terminal = new(store.TerminalCLI)
		if err := json.Unmarshal([]byte(term), s.Terminal); err != nil {
			return nil, fmt.Errorf("session %s: decoding terminal: %w", s.ID, err)
		}
	}
	if gh != "" {
		s.GitHub = new(store.GitHubLink)
		if err := json.Unmarshal([]byte(gh), s.GitHub); err != nil {
			return nil, fmt.Errorf("session %s: decoding github: %w", s.ID, err)
		}
	}
	if mcp != "" {
		if err := json.Unmarshal([]byte(mcp), &s.MCPServers); err != nil {
			return nil, fmt.Errorf("session %s: decoding mcp_servers: %w", s.ID, err)
		}
	}
	if enforced != "" {
		s.LimitsEnforced = new(store.Enforcement)
		if err := json.Unmarshal([]byte(enforced), s.LimitsEnforced); err != nil {
			return nil, fmt.Errorf("session %s: decoding limits_enforced: %w", s.ID, err)
		}
	}
	if eg != "" {
		hosts := []string{}
		if err := json.Unmarshal([]byte(eg), &hosts); err != nil {
			return nil, fmt.Errorf("session %s: decoding egress: %w", s.ID, err)
		}
		s.Egress = &hosts
	}
	return &s, nil
}

// GetSession returns the session id, or ErrNotFound.
func (s *Store) GetSession(ctx context.Context, id string) (*store.Session, error) {
	sess, err := scanSession(s.r.QueryRowContext(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("session %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get session %s: %w", id, err)
	}
	return sess, nil
}

// ListSessions returns the sessions matching f, newest (by CreatedAt) first.
func (s *Store) ListSessions(ctx context.Context, f store.SessionFilter) ([]*store.Session, error) {
	var (
		where []string
		args  []any
	)
	if f.Owner != "" {
		where = append(where, "owner = ?")
		args = append(args, f.Owner)
	}
	if len(f.States) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(",?", len(f.States)-1)+")")
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	if f.Workflow != "" {
		where = append(where, "collab <> '{}' AND json_extract(collab, '$.workflow') = ?")
		args = append(args, f.Workflow)
	}
	if f.GitHubRepo != "" {
		where = append(where, "github <> '' AND lower(json_extract(github, '$.repo')) = lower(?) AND json_extract(github, '$.number') = ?")
		args = append(args, f.GitHubRepo, f.GitHubNumber)
	}
	if !f.UpdatedBefore.IsZero() {
		where = append(where, "updated_at < ?")
		args = append(args, ts(f.UpdatedBefore))
	}
	if f.After != nil {
		// A row value: SQLite seeks the sessions_created index to it.
		where = append(where, "(created_at, id) < (?, ?)")
		args = append(args, ts(f.After.CreatedAt), f.After.ID)
	}
	q := `SELECT ` + sessionCols + ` FROM sessions`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list sessions: %w", err)
	}
	defer rows.Close()
	var out []*store.Session
	for rows.Next() {
		sess, err := scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list sessions: %w", err)
		}
		out = append(out, sess)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list sessions: %w", err)
	}
	return out, nil
}

// UpdateSession reads the session, calls fn on it and writes it back, all in
// one writer transaction, so concurrent updates never lose each other's
// changes. UpdatedAt is set to now unless fn set it. fn must not change the
// ID. fn may be called once only; it must not call the store.
func (s *Store) UpdateSession(ctx context.Context, id string, fn func(*store.Session) error) (*store.Session, error) {
	return s.updateSession(ctx, id, nil, fn)
}

// updateSession is UpdateSession, first checking f (nil: not fenced) in
// its transaction.
func (s *Store) updateSession(ctx context.Context, id string, f *store.Fence, fn func(*store.Session) error) (*store.Session, error) {
	var out *store.Session
	err := s.write(ctx, "sqlite: update session "+id, func(tx *sql.Tx) error {
		if f != nil {
			if err := checkFence(ctx, tx, *f, ""); err != nil {
				return fmt.Errorf("sqlite: update session %s: %w", id, err)
			}
		}
		sess, err := scanSession(tx.QueryRowContext(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("session %s: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("sqlite: update session %s: %w", id, err)
		}
		before := sess.UpdatedAt
		if err := fn(sess); err != nil {
			return err
		}
		if sess.ID != id {
			return fmt.Errorf("sqlite: update session %s: the update changed the id to %q; ids are fixed", id, sess.ID)
		}
		if sess.UpdatedAt.Equal(before) {
			sess.UpdatedAt = s.now().UTC()
		}
		args, err := sessionArgs(sess)
		if err != nil {
			return fmt.Errorf("sqlite: update session %s: %w", id, err)
		}
		// args[0] is the id: move it to the WHERE.
		if _, err := tx.ExecContext(ctx, `UPDATE sessions SET owner=?, title=?, state=?, agent=?, model=?,
	backend=?, mode=?, repos=?, limits=?, sandbox=?, agent_state=?, turns=?, usage=?, cost_usd=?,
	error=?, created_at=?, updated_at=?, active_at=?, collab=?, terminal=?, egress=?, pr=?, github=?, environment=?, mcp_servers=?,
	limits_enforced=? WHERE id=?`, append(args[1:], id)...); err != nil {
			return fmt.Errorf("sqlite: update session %s: %w", id, err)
		}
		if sess.State.Ended() {
			// Ended: its branches are free for a new session.
			if _, err := tx.ExecContext(ctx, `DELETE FROM branch_claims WHERE session = ?`, id); err != nil {
				return fmt.Errorf("sqlite: update session %s: releasing its branches: %w", id, err)
			}
		}
		out = sess
		return nil
	})
	return out, err
}

// DeleteSession removes the session; its messages and events go with it
// (ON DELETE CASCADE).
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	return s.write(ctx, "sqlite: delete session "+id, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE id = ?`, id)
		if err != nil {
			return fmt.Errorf("sqlite: delete session %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("session %s: %w", id, store.ErrNotFound)
		}
		return nil
	})
}

// CountSessions counts the sessions by state, with their promised disk.
func (s *Store) CountSessions(ctx context.Context) ([]store.StateCount, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT state, count(*), COALESCE(SUM(json_extract(limits, '$.disk_bytes')), 0)
FROM sessions GROUP BY state ORDER BY state`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: count sessions: %w", err)
	}
	defer rows.Close()
	var out []store.StateCount
	for rows.Next() {
		var c store.StateCount
		var st string
		if err := rows.Scan(&st, &c.Sessions, &c.DiskBytes); err != nil {
			return nil, fmt.Errorf("sqlite: count sessions: %w", err)
		}
		c.State = store.State(st)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: count sessions: %w", err)
	}
	return out, nil
}
