package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/harvest-dev/harvest/store"
)

const sessionCols = `id, owner, title, state, agent, model, backend, mode, repos, limits,
	sandbox, agent_state, turns, usage, cost_usd, error, created_at, updated_at, active_at, collab, terminal, egress, pr, github, environment, mcp_servers,
	limits_enforced, user_id`

// CreateSession stores sess and, if first is not nil, its first message
// (Seq 1) in one transaction, and claims its branches. Zero
// CreatedAt/UpdatedAt are set to now; so are a zero first.CreatedAt and an
// empty first.State (queued). A session id that exists is ErrConflict.
func (s *Store) CreateSession(ctx context.Context, sess *store.Session, first *store.Message) error {
	if sess.ID == "" {
		return s.errorf("create session: empty id")
	}
	now := s.now()
	if sess.CreatedAt.IsZero() {
		sess.CreatedAt = now
	}
	if sess.UpdatedAt.IsZero() {
		sess.UpdatedAt = sess.CreatedAt
	}
	args, err := s.sessionArgs(sess)
	if err != nil {
		return s.errorf("create session %s: %w", sess.ID, err)
	}
	var m store.Message
	if first != nil {
		m = *first
		m.Session, m.Seq = sess.ID, 1
		defaultMessage(&m, now)
	}
	err = s.write(ctx, "create session "+sess.ID, func(tx Querier) error {
		if _, err := tx.Exec(ctx, `INSERT INTO sessions (`+sessionCols+`) VALUES `+in(len(args)), args...); err != nil {
			if s.d.IsDuplicate(err) {
				return s.errorf("create session %s: a session with this id exists: %w", sess.ID, store.ErrConflict)
			}
			return s.errorf("create session %s: %w", sess.ID, err)
		}
		if err := s.claimBranches(ctx, tx, sess); err != nil {
			return s.errorf("create session %s: %w", sess.ID, err)
		}
		if first != nil {
			return s.insertMessage(ctx, tx, &m)
		}
		return nil
	})
	if err == nil && first != nil {
		*first = m
	}
	return err
}

// sessionArgs are the values of sessionCols. JSON is given as text; an
// optional JSON field that is absent is the dialect's (JSON.Absent).
func (s *Store) sessionArgs(sess *store.Session) ([]any, error) {
	enc := func(what string, v any, absent bool) (any, error) {
		if absent {
			return s.d.JSONAbsent(), nil
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", what, err)
		}
		return string(b), nil
	}
	var egress any = []string(nil)
	if sess.Egress != nil {
		hosts := *sess.Egress
		if hosts == nil {
			hosts = []string{}
		}
		egress = hosts
	}
	fields := []struct {
		what   string
		v      any
		absent bool
	}{
		{"repos", sess.Repos, false},
		{"limits", sess.Limits, false},
		{"usage", sess.Usage, false},
		{"collab", sess.Collab, false},
		{"terminal", sess.Terminal, sess.Terminal == nil},
		{"egress", egress, sess.Egress == nil},
		{"github", sess.GitHub, sess.GitHub == nil},
		{"mcp_servers", sess.MCPServers, len(sess.MCPServers) == 0},
		{"limits_enforced", sess.LimitsEnforced, sess.LimitsEnforced == nil},
	}
	js := make([]any, len(fields))
	for i, f := range fields {
		var err error
		if js[i], err = enc(f.what, f.v, f.absent); err != nil {
			return nil, err
		}
	}
	return []any{sess.ID, sess.Owner, sess.Title, string(sess.State), sess.Agent, sess.Model, sess.Backend, sess.Mode,
		js[0], js[1], sess.Sandbox, sess.AgentState, sess.Turns, js[2], sess.CostUSD,
		sess.Error, s.d.Time(sess.CreatedAt), s.d.Time(sess.UpdatedAt), s.d.Time(sess.ActiveAt), js[3], js[4], js[5], sess.PR, js[6], sess.Environment, js[7],
		js[8], sess.User}, nil
}

func scanSession(r Row) (*store.Session, error) {
	var (
		s                          store.Session
		state                      string
		repos, limits, use, collab []byte
		term, eg, gh, mcp          []byte
		enforced                   []byte
		created, updated, activeAt Time
	)
	if err := r.Scan(&s.ID, &s.Owner, &s.Title, &state, &s.Agent, &s.Model, &s.Backend, &s.Mode,
		&repos, &limits, &s.Sandbox, &s.AgentState, &s.Turns, &use, &s.CostUSD, &s.Error,
		&created, &updated, &activeAt, &collab, &term, &eg, &s.PR, &gh, &s.Environment, &mcp,
		&enforced, &s.User); err != nil {
		return nil, err
	}
	s.State = store.State(state)
	s.CreatedAt, s.UpdatedAt, s.ActiveAt = created.T, updated.T, activeAt.T
	for _, f := range []struct {
		what string
		b    []byte
		v    any
	}{{"repos", repos, &s.Repos}, {"limits", limits, &s.Limits}, {"usage", use, &s.Usage}, {"collab", collab, &s.Collab}} {
		if err := json.Unmarshal(f.b, f.v); err != nil {
			return nil, fmt.Errorf("session %s: decoding %s: %w", s.ID, f.what, err)
		}
	}
	// An absent optional field is SQLite's '' or PostgreSQL's NULL: no
	// bytes either way.
	if len(term) > 0 {
		s.Terminal = new(store.TerminalCLI)
		if err := json.Unmarshal(term, s.Terminal); err != nil {
			return nil, fmt.Errorf("session %s: decoding terminal: %w", s.ID, err)
		}
	}
	if len(gh) > 0 {
		s.GitHub = new(store.GitHubLink)
		if err := json.Unmarshal(gh, s.GitHub); err != nil {
			return nil, fmt.Errorf("session %s: decoding github: %w", s.ID, err)
		}
	}
	if len(mcp) > 0 {
		if err := json.Unmarshal(mcp, &s.MCPServers); err != nil {
			return nil, fmt.Errorf("session %s: decoding mcp_servers: %w", s.ID, err)
		}
	}
	if len(enforced) > 0 {
		s.LimitsEnforced = new(store.Enforcement)
		if err := json.Unmarshal(enforced, s.LimitsEnforced); err != nil {
			return nil, fmt.Errorf("session %s: decoding limits_enforced: %w", s.ID, err)
		}
	}
	if len(eg) > 0 {
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
	sess, err := scanSession(s.reader().QueryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = ?`, id))
	if isNoRows(err) {
		return nil, fmt.Errorf("session %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("get session %s: %w", id, err)
	}
	return sess, nil
}

// ListSessions returns the sessions matching f, newest (by CreatedAt)
// first. The JSON conditions are written as each database's expression
// indexes are (Dialect.JSONText, JSONInt), so they use them.
func (s *Store) ListSessions(ctx context.Context, f store.SessionFilter) ([]*store.Session, error) {
	var (
		where []string
		args  []any
	)
	if f.Owner != "" {
		where, args = append(where, "owner = ?"), append(args, f.Owner)
	}
	if f.User != "" {
		where, args = append(where, "user_id = ?"), append(args, f.User)
	}
	if len(f.States) > 0 {
		where = append(where, "state IN "+in(len(f.States)))
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	if f.Workflow != "" {
		where = append(where, "collab <> '{}' AND "+s.d.JSONText("collab", "workflow")+" = ?")
		args = append(args, f.Workflow)
	}
	if f.GitHubRepo != "" {
		where = append(where, s.d.JSONPresent("github")+" AND lower("+s.d.JSONText("github", "repo")+") = lower(?) AND "+
			s.d.JSONInt("github", "number")+" = ?")
		args = append(args, f.GitHubRepo, int64(f.GitHubNumber))
	}
	if !f.UpdatedBefore.IsZero() {
		where, args = append(where, "updated_at < ?"), append(args, s.d.Time(f.UpdatedBefore))
	}
	if f.After != nil {
		// A row value, in both: each database seeks its sessions_created
		// (or, with an owner, sessions_owner_created; with a user,
		// sessions_user_created) index to it.
		where = append(where, "(created_at, id) < (?, ?)")
		args = append(args, s.d.Time(f.After.CreatedAt), f.After.ID)
	}
	q := `SELECT ` + sessionCols + ` FROM sessions`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, int64(f.Limit))
	}
	rows, err := s.reader().Query(ctx, q, args...)
	out, err := collect(rows, err, scanSession)
	if err != nil {
		return nil, s.errorf("list sessions: %w", err)
	}
	return out, nil
}

// UpdateSession reads the session with its row locked (PostgreSQL: FOR NO
// KEY UPDATE, so concurrent updates queue and appends of its events do
// not; SQLite: its one writer), calls fn on it and writes it back, in one
// transaction, so concurrent updates never lose each other's changes.
// UpdatedAt is set to now unless fn set it. fn must not change the ID. fn
// is called once (DB.WriteOnce); it must not call the store.
func (s *Store) UpdateSession(ctx context.Context, id string, fn func(*store.Session) error) (*store.Session, error) {
	return s.updateSession(ctx, id, nil, fn)
}

// updateSession is UpdateSession under f (nil: not fenced). The session's
// row is locked before its lease (FOR SHARE, checkFences), in the order
// DeleteSession takes them (the row, then the lease it cascades to), so
// the two never wait for each other in a cycle.
func (s *Store) updateSession(ctx context.Context, id string, f *store.Fence, fn func(*store.Session) error) (*store.Session, error) {
	var out *store.Session
	err := s.db.WriteOnce(ctx, "update session "+id, func(tx Querier) error {
		sess, err := scanSession(tx.QueryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = ?`+s.d.Lock(LockNoKeyUpdate), id))
		if isNoRows(err) {
			return fmt.Errorf("session %s: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return s.errorf("update session %s: %w", id, err)
		}
		if f != nil {
			if err := s.checkFences(ctx, tx, []store.Fence{*f}); err != nil {
				return s.errorf("update session %s: %w", id, err)
			}
		}
		before := sess.UpdatedAt
		if err := fn(sess); err != nil {
			return err
		}
		if sess.ID != id {
			return s.errorf("update session %s: the update changed the id to %q; ids are fixed", id, sess.ID)
		}
		if sess.UpdatedAt.Equal(before) {
			sess.UpdatedAt = s.now()
		}
		args, err := s.sessionArgs(sess)
		if err != nil {
			return s.errorf("update session %s: %w", id, err)
		}
		// args[0] is the id: it goes last, in the WHERE.
		if _, err := tx.Exec(ctx, `UPDATE sessions SET owner=?, title=?, state=?, agent=?, model=?,
	backend=?, mode=?, repos=?, limits=?, sandbox=?, agent_state=?, turns=?, usage=?, cost_usd=?,
	error=?, created_at=?, updated_at=?, active_at=?, collab=?, terminal=?, egress=?, pr=?, github=?,
	environment=?, mcp_servers=?, limits_enforced=?, user_id=? WHERE id=?`, append(args[1:], id)...); err != nil {
			return s.errorf("update session %s: %w", id, err)
		}
		if sess.State.Ended() {
			// Ended: its branches are free for a new session.
			if _, err := tx.Exec(ctx, `DELETE FROM branch_claims WHERE session = ?`, id); err != nil {
				return s.errorf("update session %s: releasing its branches: %w", id, err)
			}
		}
		out = sess
		return nil
	})
	return out, err
}

// DeleteSession removes the session; its messages, events, lease and
// branch claims go with it (ON DELETE CASCADE).
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	return s.write(ctx, "delete session "+id, func(tx Querier) error {
		// The node holding it (if any) learns of it at its next heartbeat:
		// its Moved goes up (store/leases.go).
		if _, err := tx.Exec(ctx, `UPDATE nodes SET moved = moved + 1
	WHERE id = (SELECT node FROM session_leases WHERE session = ? AND node <> '')`, id); err != nil {
			return s.errorf("delete session %s: telling its node: %w", id, err)
		}
		n, err := tx.Exec(ctx, `DELETE FROM sessions WHERE id = ?`, id)
		if err != nil {
			return s.errorf("delete session %s: %w", id, err)
		}
		if n == 0 {
			return fmt.Errorf("session %s: %w", id, store.ErrNotFound)
		}
		return nil
	})
}

// claimBranches claims the branches of a live session in tx (store's
// branches.go): a branch another session holds is a *BranchHeldError.
// On PostgreSQL ON CONFLICT DO NOTHING waits for a racing transaction that
// claimed the same branch, and does nothing once it committed: the loser
// reads the holder.
func (s *Store) claimBranches(ctx context.Context, tx Querier, sess *store.Session) error {
	if sess.State.Ended() {
		return nil
	}
	for _, k := range store.BranchKeys(sess) {
		n, err := tx.Exec(ctx, `INSERT INTO branch_claims (repo, branch, session) VALUES (?, ?, ?) ON CONFLICT (repo, branch) DO NOTHING`, k.Repo, k.Branch, sess.ID)
		if err != nil {
			return s.errorf("claiming branch %s of %s: %w", k.Branch, k.Repo, err)
		}
		if n == 1 {
			continue
		}
		var holder string
		if err := tx.QueryRow(ctx, `SELECT session FROM branch_claims WHERE repo = ? AND branch = ?`, k.Repo, k.Branch).Scan(&holder); err != nil {
			return s.errorf("reading the holder of branch %s of %s: %w", k.Branch, k.Repo, err)
		}
		if holder != sess.ID {
			return &store.BranchHeldError{Repo: k.Repo, Branch: k.Branch, Session: holder}
		}
	}
	return nil
}

// BranchSession is the live session holding branch of repo.
func (s *Store) BranchSession(ctx context.Context, repo, branch string) (string, error) {
	var id string
	err := s.reader().QueryRow(ctx, `SELECT session FROM branch_claims WHERE repo = ? AND branch = ?`, strings.ToLower(repo), branch).Scan(&id)
	if isNoRows(err) {
		return "", fmt.Errorf("branch %s of %s: no live session holds it: %w", branch, repo, store.ErrNotFound)
	}
	if err != nil {
		return "", s.errorf("branch %s of %s: %w", branch, repo, err)
	}
	return id, nil
}

// CountSessions counts the sessions by state, with their promised disk
// (the sum of their limits' disk_bytes), in one query.
func (s *Store) CountSessions(ctx context.Context) ([]store.StateCount, error) {
	rows, err := s.reader().Query(ctx, `SELECT state, COUNT(*), CAST(COALESCE(SUM(`+s.d.JSONInt("limits", "disk_bytes")+`), 0) AS BIGINT)
FROM sessions GROUP BY state ORDER BY state`)
	counts, err := collect(rows, err, func(r Row) (*store.StateCount, error) {
		var (
			c  store.StateCount
			st string
			n  int64
		)
		err := r.Scan(&st, &n, &c.DiskBytes)
		c.State, c.Sessions = store.State(st), int(n)
		return &c, err
	})
	if err != nil {
		return nil, s.errorf("count sessions: %w", err)
	}
	return values(counts), nil
}
