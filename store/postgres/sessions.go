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

const sessionCols = `id, owner, title, state, agent, model, backend, mode, repos, limits,
	sandbox, agent_state, turns, usage, cost_usd, error, created_at, updated_at, active_at, collab, terminal, egress, pr, github, environment, mcp_servers,
	limits_enforced`

// CreateSession stores sess and, if first is not nil, its first message
// (Seq 1) in one transaction. Zero CreatedAt/UpdatedAt are set to now; so
// are a zero first.CreatedAt and an empty first.State (queued). A session
// id that exists is ErrConflict.
func (s *Store) CreateSession(ctx context.Context, sess *store.Session, first *store.Message) error {
	if sess.ID == "" {
		return errors.New("postgres: create session: empty id")
	}
	now := s.now()
	if sess.CreatedAt.IsZero() {
		sess.CreatedAt = now
	}
	if sess.UpdatedAt.IsZero() {
		sess.UpdatedAt = sess.CreatedAt
	}
	args, err := sessionArgs(sess)
	if err != nil {
		return fmt.Errorf("postgres: create session %s: %w", sess.ID, err)
	}
	var m store.Message
	if first != nil {
		m = *first
		m.Session, m.Seq = sess.ID, 1
		defaultMessage(&m, now)
	}
	err = s.write(ctx, "create session "+sess.ID, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO sessions (`+sessionCols+`) VALUES (`+placeholders(1, len(args))+`)`, args...); err != nil {
			if isDuplicate(err) {
				return fmt.Errorf("postgres: create session %s: a session with this id exists: %w", sess.ID, store.ErrConflict)
			}
			return fmt.Errorf("postgres: create session %s: %w", sess.ID, err)
		}
		if err := claimBranches(ctx, tx, sess); err != nil {
			return fmt.Errorf("postgres: create session %s: %w", sess.ID, err)
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

// placeholders is "$from, $from+1, ..." for n arguments.
func placeholders(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(from+i))
	}
	return b.String()
}

// jsonOrNull encodes v, or is NULL when null is true.
func jsonOrNull(v any, null bool) (any, error) {
	if null {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func sessionArgs(s *store.Session) ([]any, error) {
	enc := func(what string, v any, null bool) (any, error) {
		x, err := jsonOrNull(v, null)
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", what, err)
		}
		return x, nil
	}
	repos, err := enc("repos", s.Repos, false)
	if err != nil {
		return nil, err
	}
	limits, err := enc("limits", s.Limits, false)
	if err != nil {
		return nil, err
	}
	usage, err := enc("usage", s.Usage, false)
	if err != nil {
		return nil, err
	}
	collab, err := enc("collab", s.Collab, false)
	if err != nil {
		return nil, err
	}
	term, err := enc("terminal", s.Terminal, s.Terminal == nil)
	if err != nil {
		return nil, err
	}
	var eg any
	if s.Egress != nil {
		hosts := *s.Egress
		if hosts == nil {
			hosts = []string{}
		}
		if eg, err = enc("egress", hosts, false); err != nil {
			return nil, err
		}
	}
	gh, err := enc("github", s.GitHub, s.GitHub == nil)
	if err != nil {
		return nil, err
	}
	mcp, err := enc("mcp_servers", s.MCPServers, len(s.MCPServers) == 0)
	if err != nil {
		return nil, err
	}
	enforced, err := enc("limits_enforced", s.LimitsEnforced, s.LimitsEnforced == nil)
	if err != nil {
		return nil, err
	}
	return []any{s.ID, s.Owner, s.Title, string(s.State), s.Agent, s.Model, s.Backend, s.Mode,
		repos, limits, s.Sandbox, s.AgentState, s.Turns, usage, s.CostUSD,
		s.Error, ts(s.CreatedAt), ts(s.UpdatedAt), ts(s.ActiveAt), collab, term, eg, s.PR, gh, s.Environment, mcp,
		enforced}, nil
}

func scanSession(r scanner) (*store.Session, error) {
	var (
		s                          store.Session
		state                      string
		repos, limits, use, collab []byte
		term, eg, gh, mcp          []byte
		enforced                   []byte
		created, updated, activeAt *time.Time
	)
	if err := r.Scan(&s.ID, &s.Owner, &s.Title, &state, &s.Agent, &s.Model, &s.Backend, &s.Mode,
		&repos, &limits, &s.Sandbox, &s.AgentState, &s.Turns, &use, &s.CostUSD, &s.Error,
		&created, &updated, &activeAt, &collab, &term, &eg, &s.PR, &gh, &s.Environment, &mcp,
		&enforced); err != nil {
		return nil, err
	}
	s.State = store.State(state)
	s.CreatedAt, s.UpdatedAt, s.ActiveAt = tm(created), tm(updated), tm(activeAt)
	for _, f := range []struct {
		what string
		b    []byte
		v    any
	}{{"repos", repos, &s.Repos}, {"limits", limits, &s.Limits}, {"usage", use, &s.Usage}, {"collab", collab, &s.Collab}} {
		if err := json.Unmarshal(f.b, f.v); err != nil {
			return nil, fmt.Errorf("session %s: decoding %s: %w", s.ID, f.what, err)
		}
	}
	if term != nil {
		s.Terminal = new(store.TerminalCLI)
		if err := json.Unmarshal(term, s.Terminal); err != nil {
			return nil, fmt.Errorf("session %s: decoding terminal: %w", s.ID, err)
		}
	}
	if gh != nil {
		s.GitHub = new(store.GitHubLink)
		if err := json.Unmarshal(gh, s.GitHub); err != nil {
			return nil, fmt.Errorf("session %s: decoding github: %w", s.ID, err)
		}
	}
	if mcp != nil {
		if err := json.Unmarshal(mcp, &s.MCPServers); err != nil {
			return nil, fmt.Errorf("session %s: decoding mcp_servers: %w", s.ID, err)
		}
	}
	if enforced != nil {
		s.LimitsEnforced = new(store.Enforcement)
		if err := json.Unmarshal(enforced, s.LimitsEnforced); err != nil {
			return nil, fmt.Errorf("session %s: decoding limits_enforced: %w", s.ID, err)
		}
	}
	if eg != nil {
		hosts := []string{}
		if err := json.Unmarshal(eg, &hosts); err != nil {
			return nil, fmt.Errorf("session %s: decoding egress: %w", s.ID, err)
		}
		s.Egress = &hosts
	}
	return &s, nil
}

// GetSession returns the session id, or ErrNotFound.
func (s *Store) GetSession(ctx context.Context, id string) (*store.Session, error) {
	sess, err := scanSession(s.pool.QueryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("session %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get session %s: %w", id, err)
	}
	return sess, nil
}

// ListSessions returns the sessions matching f, newest (by CreatedAt) first.
func (s *Store) ListSessions(ctx context.Context, f store.SessionFilter) ([]*store.Session, error) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.Owner != "" {
		where = append(where, "owner = "+arg(f.Owner))
	}
	if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, st := range f.States {
			states[i] = string(st)
		}
		where = append(where, "state = ANY("+arg(states)+")")
	}
	if f.Workflow != "" {
		where = append(where, "collab <> '{}' AND collab->>'workflow' = "+arg(f.Workflow))
	}
	if f.GitHubRepo != "" {
		where = append(where, "github IS NOT NULL AND lower(github->>'repo') = lower("+arg(f.GitHubRepo)+
			") AND (github->>'number')::bigint = "+arg(int64(f.GitHubNumber)))
	}
	if !f.UpdatedBefore.IsZero() {
		where = append(where, "updated_at < "+arg(f.UpdatedBefore))
	}
	if f.After != nil {
		// A row comparison: an index condition on sessions_created.
		where = append(where, "(created_at, id) < ("+arg(f.After.CreatedAt)+", "+arg(f.After.ID)+")")
	}
	q := `SELECT ` + sessionCols + ` FROM sessions`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC"
	if f.Limit > 0 {
		q += " LIMIT " + arg(f.Limit)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list sessions: %w", err)
	}
	out, err := collect(rows, scanSession)
	if err != nil {
		return nil, fmt.Errorf("postgres: list sessions: %w", err)
	}
	return out, nil
}

// collect scans every row with scan.
func collect[T any](rows pgx.Rows, scan func(scanner) (*T, error)) ([]*T, error) {
	defer rows.Close()
	var out []*T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// UpdateSession reads the session with its row locked (FOR NO KEY UPDATE:
// concurrent updates queue, appends of its events do not), calls fn on it
// and writes it back, in one transaction, so concurrent updates never lose
// each other's changes. UpdatedAt is set to now unless fn set it. fn must
// not change the ID. fn is called once; it must not call the store.
func (s *Store) UpdateSession(ctx context.Context, id string, fn func(*store.Session) error) (*store.Session, error) {
	return s.updateSession(ctx, id, nil, fn)
}

// updateSession is UpdateSession under f (nil: not fenced). The session's
// row is locked before its lease (FOR SHARE, checkFences), in the order
// DeleteSession takes them (the row, then the lease it cascades to), so
// the two never wait for each other in a cycle.
func (s *Store) updateSession(ctx context.Context, id string, f *store.Fence, fn func(*store.Session) error) (*store.Session, error) {
	var out *store.Session
	err := s.attempt(ctx, "update session "+id, func(tx pgx.Tx) error {
		sess, err := scanSession(tx.QueryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = $1 FOR NO KEY UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("session %s: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("postgres: update session %s: %w", id, err)
		}
		if f != nil {
			if err := checkFences(ctx, tx, []store.Fence{*f}); err != nil {
				return fmt.Errorf("postgres: update session %s: %w", id, err)
			}
		}
		before := sess.UpdatedAt
		if err := fn(sess); err != nil {
			return err
		}
		if sess.ID != id {
			return fmt.Errorf("postgres: update session %s: the update changed the id to %q; ids are fixed", id, sess.ID)
		}
		if sess.UpdatedAt.Equal(before) {
			sess.UpdatedAt = s.now()
		}
		args, err := sessionArgs(sess)
		if err != nil {
			return fmt.Errorf("postgres: update session %s: %w", id, err)
		}
		// args[0] is the id: it goes last, in the WHERE.
		if _, err := tx.Exec(ctx, `UPDATE sessions SET owner=$1, title=$2, state=$3, agent=$4, model=$5,
	backend=$6, mode=$7, repos=$8, limits=$9, sandbox=$10, agent_state=$11, turns=$12, usage=$13, cost_usd=$14,
	error=$15, created_at=$16, updated_at=$17, active_at=$18, collab=$19, terminal=$20, egress=$21, pr=$22, github=$23,
	environment=$24, mcp_servers=$25, limits_enforced=$26 WHERE id=$27`, append(args[1:], id)...); err != nil {
			return fmt.Errorf("postgres: update session %s: %w", id, err)
		}
		if sess.State.Ended() {
			// Ended: its branches are free for a new session.
			if _, err := tx.Exec(ctx, `DELETE FROM branch_claims WHERE session = $1`, id); err != nil {
				return fmt.Errorf("postgres: update session %s: releasing its branches: %w", id, err)
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
	return s.write(ctx, "delete session "+id, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM sessions WHERE id = $1`, id)
		if err != nil {
			return fmt.Errorf("postgres: delete session %s: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("session %s: %w", id, store.ErrNotFound)
		}
		return nil
	})
}

// CountSessions counts the sessions by state, with their promised disk.
func (s *Store) CountSessions(ctx context.Context) ([]store.StateCount, error) {
	rows, err := s.pool.Query(ctx, `SELECT state, count(*), COALESCE(SUM((limits->>'disk_bytes')::bigint), 0)::bigint
FROM sessions GROUP BY state ORDER BY state`)
	if err != nil {
		return nil, fmt.Errorf("postgres: count sessions: %w", err)
	}
	defer rows.Close()
	var out []store.StateCount
	for rows.Next() {
		var c store.StateCount
		var st string
		var n int64
		if err := rows.Scan(&st, &n, &c.DiskBytes); err != nil {
			return nil, fmt.Errorf("postgres: count sessions: %w", err)
		}
		c.State, c.Sessions = store.State(st), int(n)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: count sessions: %w", err)
	}
	return out, nil
}
