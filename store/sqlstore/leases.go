package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// Nodes, session leases and fencing (store/leases.go has the contract;
// each database's package doc says how they hold under concurrency). Every
// time is Dialect.Now(ClockStatement): on PostgreSQL the server's
// statement_timestamp(), one instant per statement read by every node
// alike; on SQLite the Store's clock (its one writer runs each decision
// alone). Each decision is one statement, as on PostgreSQL: ON CONFLICT
// and UPDATE ... WHERE judge what is stored, with nothing in between.

// now is the statement's clock and its arguments.
func (s *Store) leaseNow() (string, []any) { return s.d.Now(ClockStatement, s.now()) }

func (s *Store) leaseAfter(ttl time.Duration) (string, []any) {
	return s.d.After(ClockStatement, s.now(), ttl)
}

// HeartbeatNode registers n or refreshes it, live until now+ttl, in
// n.Gen if that is its live generation, else in the next one.
//
// One statement decides. On PostgreSQL ON CONFLICT locks the node's row
// and judges the latest version of it: a takeover that ended the node's
// generation meanwhile (AcquireLease, which locks the row too) is seen,
// and the heartbeat starts the next generation instead of reviving the
// one whose leases were taken.
func (s *Store) HeartbeatNode(ctx context.Context, n store.Node, ttl time.Duration) (store.Node, error) {
	if n.ID == "" || n.Capacity < store.NodeFull || n.Leases < 0 || n.Gen < 0 {
		return store.Node{}, s.errorf("heartbeat of node %q: want an id, a capacity >= 0 or store.NodeFull (got %d), leases >= 0 (got %d) and a generation >= 0 (got %d)", n.ID, n.Capacity, n.Leases, n.Gen)
	}
	gen := n.Gen
	if gen == 0 {
		gen = -1 // no generation matches: start one
	}
	err := s.write(ctx, "heartbeat of node "+n.ID, func(tx Querier) error {
		now, nowArgs := s.leaseNow()
		until, untilArgs := s.leaseAfter(ttl)
		var hb, exp, ended Time
		if err := tx.QueryRow(ctx, `INSERT INTO nodes AS n (id, addr, capacity, leases, heartbeat, expires, gen, ended, moved)
	VALUES (?, ?, ?, ?, `+now+`, `+until+`, 1, ?, 0)
	ON CONFLICT (id) DO UPDATE SET addr = excluded.addr, capacity = excluded.capacity, leases = excluded.leases,
		heartbeat = excluded.heartbeat, expires = excluded.expires,
		gen = CASE WHEN n.gen = ? AND n.expires > `+now+` THEN n.gen ELSE n.gen + 1 END,
		ended = CASE WHEN n.gen = ? AND n.expires > `+now+` THEN n.ended
			WHEN n.expires < `+now+` THEN n.expires ELSE `+now+` END
	RETURNING heartbeat, expires, gen, ended, moved`,
			args([]any{n.ID, n.Addr, n.Capacity, n.Leases}, nowArgs, untilArgs, []any{s.d.Time(time.Time{}), gen}, nowArgs,
				[]any{gen}, nowArgs, nowArgs, nowArgs)...).Scan(&hb, &exp, &n.Gen, &ended, &n.Moved); err != nil {
			return s.errorf("heartbeat of node %s: %w", n.ID, err)
		}
		n.Heartbeat, n.Expires, n.Ended = hb.T, exp.T, ended.T
		return nil
	})
	if err != nil {
		return store.Node{}, err
	}
	return n, nil
}

// args joins a statement's arguments in the order of its placeholders.
func args(parts ...[]any) []any {
	var out []any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// nodeColumns are a node's columns, as scanNode reads them.
const nodeColumns = `id, addr, capacity, leases, heartbeat, expires, gen, ended, moved`

func scanNode(r Row) (*store.Node, error) {
	var (
		n              store.Node
		hb, exp, ended Time
	)
	err := r.Scan(&n.ID, &n.Addr, &n.Capacity, &n.Leases, &hb, &exp, &n.Gen, &ended, &n.Moved)
	n.Heartbeat, n.Expires, n.Ended = hb.T, exp.T, ended.T
	return &n, err
}

// ListNodes lists the live nodes by id: one row each, nothing counted.
func (s *Store) ListNodes(ctx context.Context) ([]store.Node, error) {
	now, nowArgs := s.leaseNow()
	rows, err := s.reader().Query(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE expires > `+now+` ORDER BY id`, nowArgs...)
	nodes, err := collect(rows, err, scanNode)
	if err != nil {
		return nil, s.errorf("list nodes: %w", err)
	}
	return values(nodes), nil
}

// RemoveNode forgets node id and releases its leases (no error when it is
// not there).
func (s *Store) RemoveNode(ctx context.Context, id string) error {
	return s.write(ctx, "remove node "+id, func(tx Querier) error {
		if _, err := tx.Exec(ctx, `UPDATE session_leases SET node = '' WHERE node = ?`, id); err != nil {
			return s.errorf("remove node %s: releasing its leases: %w", id, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM nodes WHERE id = ?`, id); err != nil {
			return s.errorf("remove node %s: %w", id, err)
		}
		return nil
	})
}

// RemoveDeadNodes forgets the nodes whose heartbeat ran out more than gone
// ago, releasing their leases (see store.Leases).
func (s *Store) RemoveDeadNodes(ctx context.Context, gone time.Duration) ([]string, error) {
	if gone < 0 {
		return nil, s.errorf("remove dead nodes: want a time gone >= 0, got %s", gone)
	}
	var ids []string
	err := s.write(ctx, "remove dead nodes", func(tx Querier) error {
		before, beforeArgs := s.leaseAfter(-gone)
		rows, err := tx.Query(ctx, `DELETE FROM nodes WHERE expires < `+before+` RETURNING id`, beforeArgs...)
		got, err := collect(rows, err, func(r Row) (*string, error) {
			var id string
			return &id, r.Scan(&id)
		})
		if err != nil {
			return s.errorf("remove dead nodes: %w", err)
		}
		ids = values(got)
		for chunk := range slices.Chunk(ids, 500) {
			if _, err := tx.Exec(ctx, `UPDATE session_leases SET node = '' WHERE node IN `+in(len(chunk)), appendStrings(nil, chunk)...); err != nil {
				return s.errorf("remove dead nodes: releasing their leases: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}

// leaseExpires is the SQL of a lease's expiry (store.Lease.Expires), for a
// query of session_leases l LEFT JOIN nodes n ON n.id = l.node: its node's
// heartbeat's expiry while the lease's generation is the node's; the end
// of the node's previous generation once a later one began (the lease's
// own ended then or before); NULL when released or its node is gone.
const leaseExpires = `CASE WHEN l.node = '' OR n.id IS NULL THEN NULL WHEN n.gen = l.gen THEN n.expires ELSE n.ended END`

// leaseExpired is the SQL condition that the lease l (joined as above) is
// not live at now (the SQL of leaseNow, whose arguments the caller binds).
func leaseExpired(now string) string {
	return `(l.node = '' OR n.id IS NULL OR n.gen <> l.gen OR n.expires <= ` + now + `)`
}

// AcquireLease gives session to node (see store.Leases).
//
// One transaction, its rows locked in the order lease, holder's node,
// own node: the session's lease row (FOR UPDATE; a missing one is
// inserted, and of racing inserters one wins and the others wait for it
// and read its row), so that of racing acquirers exactly one gets each
// epoch; when another node holds it, that node's row (FOR UPDATE), to
// judge its heartbeat — a live one refuses; an expired one in the lease's
// generation is ended here (the node's generation goes up), so that a
// heartbeat of that node racing with this takeover, which waits for the
// row, cannot revive the generation whose lease was taken, whatever its
// statement's time; then this node's own heartbeat, in its live
// generation or a new one, which the lease gets. Two nodes taking each
// other's sessions at once, each thinking the other dead, may deadlock on
// PostgreSQL: it aborts one, whose call fails (a takeover scan tries
// again at the next).
func (s *Store) AcquireLease(ctx context.Context, session, node string, ttl time.Duration) (store.Lease, error) {
	if session == "" || node == "" {
		return store.Lease{}, s.errorf("acquire lease of session %q for node %q: session and node must not be empty", session, node)
	}
	out := store.Lease{Session: session, Node: node}
	err := s.write(ctx, "acquire lease of session "+session, func(tx Querier) error {
		now, nowArgs := s.leaseNow()
		cur, ok, err := s.lockLease(ctx, tx, session)
		if err != nil {
			return s.errorf("acquire lease of session %s: %w", session, err)
		}
		if !ok {
			// Never leased: insert an epoch-0 row (released), or read the
			// row a racing acquirer inserted once it committed.
			_, err := tx.Exec(ctx, `INSERT INTO session_leases (session, node, epoch, gen) VALUES (?, '', 0, 0) ON CONFLICT (session) DO NOTHING`, session)
			if s.d.IsMissingParent(err) {
				return s.errorf("acquire lease: session %s: %w", session, store.ErrNotFound)
			}
			if err != nil {
				return s.errorf("acquire lease of session %s: %w", session, err)
			}
			if cur, ok, err = s.lockLease(ctx, tx, session); err != nil || !ok {
				return s.errorf("acquire lease of session %s: reading it back: %v", session, err)
			}
		}
		if cur.Node != "" && cur.Node != node {
			var (
				gen     int64
				exp     Time
				expired bool
			)
			err := tx.QueryRow(ctx, `SELECT gen, expires, expires <= `+now+` FROM nodes WHERE id = ?`+s.d.Lock(LockUpdate), args(nowArgs, []any{cur.Node})...).Scan(&gen, &exp, &expired)
			switch {
			case isNoRows(err):
			case err != nil:
				return s.errorf("acquire lease of session %s: reading its holder %s: %w", session, cur.Node, err)
			case gen == cur.Gen && !expired:
				cur.Expires = exp.T
				return s.errorf("acquire lease of session %s for node %s: %w", session, node, &store.LeaseHeldError{Lease: cur})
			case gen == cur.Gen:
				if _, err := tx.Exec(ctx, `UPDATE nodes SET gen = gen + 1, ended = expires WHERE id = ?`, cur.Node); err != nil {
					return s.errorf("acquire lease of session %s: ending the generation of its holder %s: %w", session, cur.Node, err)
				}
			}
		}
		until, untilArgs := s.leaseAfter(ttl)
		var exp Time
		if err := tx.QueryRow(ctx, `INSERT INTO nodes AS n (id, addr, capacity, leases, heartbeat, expires, gen, ended, moved)
	VALUES (?, '', 0, 0, `+now+`, `+until+`, 1, ?, 0)
	ON CONFLICT (id) DO UPDATE SET heartbeat = excluded.heartbeat, expires = excluded.expires,
		gen = CASE WHEN n.expires > `+now+` THEN n.gen ELSE n.gen + 1 END,
		ended = CASE WHEN n.expires > `+now+` THEN n.ended ELSE n.expires END
	RETURNING gen, expires`, args([]any{node}, nowArgs, untilArgs, []any{s.d.Time(time.Time{})}, nowArgs, nowArgs)...).Scan(&out.Gen, &exp); err != nil {
			return s.errorf("acquire lease of session %s: the heartbeat of node %s: %w", session, node, err)
		}
		out.Expires = exp.T
		out.Epoch = cur.Epoch + 1
		if cur.Node == node && cur.Gen == out.Gen {
			out.Epoch = cur.Epoch // its own live lease: the ownership goes on
		}
		if _, err := tx.Exec(ctx, `UPDATE session_leases SET node = ?, epoch = ?, gen = ? WHERE session = ?`, node, out.Epoch, out.Gen, session); err != nil {
			return s.errorf("acquire lease of session %s: %w", session, err)
		}
		return nil
	})
	if err != nil {
		return store.Lease{}, err
	}
	return out, nil
}

// lockLease reads session's lease row, locked until the commit
// (PostgreSQL: FOR UPDATE); ok is false when it has none. Expires is not
// read.
func (s *Store) lockLease(ctx context.Context, tx Querier, session string) (l store.Lease, ok bool, err error) {
	l.Session = session
	err = tx.QueryRow(ctx, `SELECT node, epoch, gen FROM session_leases WHERE session = ?`+s.d.Lock(LockUpdate), session).Scan(&l.Node, &l.Epoch, &l.Gen)
	if isNoRows(err) {
		return l, false, nil
	}
	return l, err == nil, err
}

// ReleaseLease gives the session up if its lease is still l's; the epoch
// is kept, so the next owner's is higher.
func (s *Store) ReleaseLease(ctx context.Context, l store.Lease) error {
	return s.write(ctx, "release lease of session "+l.Session, func(tx Querier) error {
		if _, err := tx.Exec(ctx, `UPDATE session_leases SET node = ''
	WHERE session = ? AND node = ? AND epoch = ? AND node <> ''`, l.Session, l.Node, l.Epoch); err != nil {
			return s.errorf("release lease of session %s: %w", l.Session, err)
		}
		return nil
	})
}

// leaseSelect reads leases with their expiry: session, node, epoch, gen,
// expires (scanLease).
const leaseSelect = `SELECT l.session, l.node, l.epoch, l.gen, ` + leaseExpires + `
	FROM session_leases l LEFT JOIN nodes n ON n.id = l.node`

// GetLease is the session's lease as stored; a row of epoch 0 (an
// acquire that was refused before any lease was taken) is none.
func (s *Store) GetLease(ctx context.Context, session string) (store.Lease, error) {
	rows, err := s.reader().Query(ctx, leaseSelect+` WHERE l.session = ? AND l.epoch > 0`, session)
	ls, err := collect(rows, err, scanLease)
	if err != nil {
		return store.Lease{}, s.errorf("get lease of session %s: %w", session, err)
	}
	if len(ls) == 0 {
		return store.Lease{}, fmt.Errorf("lease of session %s: %w", session, store.ErrNotFound)
	}
	return *ls[0], nil
}

// NodeLeases lists the leases naming node, by session.
func (s *Store) NodeLeases(ctx context.Context, node string) ([]store.Lease, error) {
	if node == "" {
		return nil, s.errorf("leases of a node: want a node id")
	}
	rows, err := s.reader().Query(ctx, leaseSelect+` WHERE l.node = ? ORDER BY l.session`, node)
	ls, err := collect(rows, err, scanLease)
	if err != nil {
		return nil, s.errorf("leases of node %s: %w", node, err)
	}
	return values(ls), nil
}

// scanLease reads session, node, epoch, gen and expires.
func scanLease(r Row) (*store.Lease, error) {
	var (
		l   store.Lease
		exp Time
	)
	err := r.Scan(&l.Session, &l.Node, &l.Epoch, &l.Gen, &exp)
	l.Expires = exp.T
	return &l, err
}

// checkFences reads the leases of the fences' sessions, in session order,
// locking them (PostgreSQL: FOR SHARE), and fails with a
// *store.LeaseLostError unless each has its fence's epoch and is not
// released; a missing session is ErrNotFound. It runs first in the
// transaction of the write it guards.
//
// On PostgreSQL FOR SHARE is what makes the check hold until the commit:
// a takeover (AcquireLease's UPDATE of the row) waits for every fenced
// write holding the share lock, and a fenced write that comes after a
// takeover waits for it and then reads the new epoch. So once
// AcquireLease returned epoch N+1, no write under epoch N commits. Fenced
// writes of one session share the lock and do not wait for each other. On
// SQLite the one writer gives the same: nothing comes between the check
// and the commit.
func (s *Store) checkFences(ctx context.Context, tx Querier, fences []store.Fence) error {
	if len(fences) == 0 {
		return nil
	}
	ids := make([]string, len(fences))
	for i, f := range fences {
		ids[i] = f.Session
	}
	slices.Sort(ids)
	rows, err := tx.Query(ctx, `SELECT session, node, epoch, gen FROM session_leases
	WHERE session IN `+in(len(ids))+` ORDER BY session`+s.d.Lock(LockShare), appendStrings(nil, ids)...)
	cur, err := collect(rows, err, func(r Row) (*store.Lease, error) {
		var l store.Lease
		return &l, r.Scan(&l.Session, &l.Node, &l.Epoch, &l.Gen)
	})
	if err != nil {
		return fmt.Errorf("reading the leases: %w", err)
	}
	by := make(map[string]store.Lease, len(cur))
	for _, l := range cur {
		by[l.Session] = *l
	}
	for _, f := range fences {
		l, ok := by[f.Session]
		if !ok {
			if err := sessionExists(ctx, tx, f.Session); err != nil {
				return err
			}
			l.Session = f.Session
		}
		if !ok || l.Node == "" || l.Epoch != f.Epoch {
			return &store.LeaseLostError{Session: f.Session, Epoch: f.Epoch, Current: l}
		}
	}
	return nil
}

// sessionExists is ErrNotFound when session is missing.
func sessionExists(ctx context.Context, tx Querier, session string) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM sessions WHERE id = ?`, session).Scan(&one)
	if isNoRows(err) {
		return fmt.Errorf("session %s: %w", session, store.ErrNotFound)
	}
	return err
}

// AppendEventsFenced is AppendEventsWith under fences.
func (s *Store) AppendEventsFenced(ctx context.Context, fences []store.Fence, evs []event.Event, msgs []*store.Message) error {
	if err := store.CheckFences(fences, evs, msgs); err != nil {
		return s.errorf("append events: %w", err)
	}
	if len(evs) == 0 && len(msgs) == 0 {
		return nil
	}
	return s.appendEvents(ctx, fences, evs, msgs)
}

// UpdateSessionFenced is UpdateSession under f.
func (s *Store) UpdateSessionFenced(ctx context.Context, f store.Fence, fn func(*store.Session) error) (*store.Session, error) {
	if err := store.CheckFences([]store.Fence{f}, nil, nil); err != nil {
		return nil, s.errorf("update session %s: %w", f.Session, err)
	}
	return s.updateSession(ctx, f.Session, &f, fn)
}

// SetMessageStateFenced is SetMessageState under f.
func (s *Store) SetMessageStateFenced(ctx context.Context, f store.Fence, id string, state store.MessageState, turn string) error {
	if err := store.CheckFences([]store.Fence{f}, nil, nil); err != nil {
		return s.errorf("set state of message %s: %w", id, err)
	}
	return s.setMessageState(ctx, f.Session, id, state, turn, &f)
}
