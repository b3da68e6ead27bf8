package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
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

// HeartbeatNode registers n or refreshes it, live until now+ttl.
func (s *Store) HeartbeatNode(ctx context.Context, n store.Node, ttl time.Duration) (store.Node, error) {
	if n.ID == "" || n.Capacity < store.NodeFull {
		return store.Node{}, s.errorf("heartbeat of node %q: want an id and a capacity >= 0, or store.NodeFull (got %d)", n.ID, n.Capacity)
	}
	n.Leases = 0
	err := s.write(ctx, "heartbeat of node "+n.ID, func(tx Querier) error {
		now, nowArgs := s.leaseNow()
		until, untilArgs := s.leaseAfter(ttl)
		var hb, exp Time
		if err := tx.QueryRow(ctx, `INSERT INTO nodes (id, addr, capacity, heartbeat, expires) VALUES (?, ?, ?, `+now+`, `+until+`)
	ON CONFLICT (id) DO UPDATE SET addr = excluded.addr, capacity = excluded.capacity,
		heartbeat = excluded.heartbeat, expires = excluded.expires
	RETURNING heartbeat, expires`, args([]any{n.ID, n.Addr, n.Capacity}, nowArgs, untilArgs)...).Scan(&hb, &exp); err != nil {
			return s.errorf("heartbeat of node %s: %w", n.ID, err)
		}
		n.Heartbeat, n.Expires = hb.T, exp.T
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

// ListNodes lists the live nodes by id, with their unexpired leases.
func (s *Store) ListNodes(ctx context.Context) ([]store.Node, error) {
	now, nowArgs := s.leaseNow()
	rows, err := s.reader().Query(ctx, `SELECT n.id, n.addr, n.capacity, n.heartbeat, n.expires,
	(SELECT COUNT(*) FROM session_leases l WHERE l.node = n.id AND l.expires > `+now+`)
	FROM nodes n WHERE n.expires > `+now+` ORDER BY n.id`, args(nowArgs, nowArgs)...)
	nodes, err := collect(rows, err, func(r Row) (*store.Node, error) {
		var (
			n       store.Node
			hb, exp Time
		)
		err := r.Scan(&n.ID, &n.Addr, &n.Capacity, &hb, &exp, &n.Leases)
		n.Heartbeat, n.Expires = hb.T, exp.T
		return &n, err
	})
	if err != nil {
		return nil, s.errorf("list nodes: %w", err)
	}
	return values(nodes), nil
}

// RemoveNode forgets node id (no error when it is not there).
func (s *Store) RemoveNode(ctx context.Context, id string) error {
	return s.write(ctx, "remove node "+id, func(tx Querier) error {
		if _, err := tx.Exec(ctx, `DELETE FROM nodes WHERE id = ?`, id); err != nil {
			return s.errorf("remove node %s: %w", id, err)
		}
		return nil
	})
}

// RemoveDeadNodes forgets the nodes whose heartbeat ran out more than gone
// ago (see store.Leases).
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
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}

// AcquireLease gives session to node until now+ttl (see store.Leases).
//
// One statement decides, as AcquireLock does: an INSERT that, on a
// conflict, takes the row over only if it is node's, released or expired,
// bumping the epoch unless it is node's unexpired lease. On PostgreSQL ON
// CONFLICT locks the existing row (and waits for a racing acquirer's
// transaction, then sees what it committed), so of racing acquirers
// exactly one gets each epoch; the others read the winner's row.
func (s *Store) AcquireLease(ctx context.Context, session, node string, ttl time.Duration) (store.Lease, error) {
	if session == "" || node == "" {
		return store.Lease{}, s.errorf("acquire lease of session %q for node %q: session and node must not be empty", session, node)
	}
	out := store.Lease{Session: session, Node: node}
	err := s.write(ctx, "acquire lease of session "+session, func(tx Querier) error {
		now, nowArgs := s.leaseNow()
		until, untilArgs := s.leaseAfter(ttl)
		var exp Time
		err := tx.QueryRow(ctx, `INSERT INTO session_leases AS l (session, node, epoch, expires)
	VALUES (?, ?, 1, `+until+`)
	ON CONFLICT (session) DO UPDATE SET
		epoch = CASE WHEN l.node = excluded.node AND l.expires > `+now+` THEN l.epoch ELSE l.epoch + 1 END,
		node = excluded.node, expires = excluded.expires
	WHERE l.node = excluded.node OR l.node = '' OR l.expires <= `+now+`
	RETURNING epoch, expires`, args([]any{session, node}, untilArgs, nowArgs, nowArgs)...).Scan(&out.Epoch, &exp)
		switch {
		case err == nil:
			out.Expires = exp.T
			return nil
		case s.d.IsMissingParent(err):
			return s.errorf("acquire lease: session %s: %w", session, store.ErrNotFound)
		case !isNoRows(err):
			return s.errorf("acquire lease of session %s: %w", session, err)
		}
		cur, _, err := s.readLease(ctx, tx, session)
		if err != nil {
			return s.errorf("acquire lease of session %s: reading its holder: %w", session, err)
		}
		return s.errorf("acquire lease of session %s for node %s: %w", session, node, &store.LeaseHeldError{Lease: cur})
	})
	if err != nil {
		return store.Lease{}, err
	}
	return out, nil
}

// RenewLease extends l until now+ttl if the session's lease is still l's.
func (s *Store) RenewLease(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	if l.Session == "" || l.Node == "" || l.Epoch <= 0 {
		return store.Lease{}, s.errorf("renew lease %+v: want a session, a node and an epoch > 0", l)
	}
	out := l
	err := s.write(ctx, "renew lease of session "+l.Session, func(tx Querier) error {
		until, untilArgs := s.leaseAfter(ttl)
		var exp Time
		err := tx.QueryRow(ctx, `UPDATE session_leases SET expires = `+until+`
	WHERE session = ? AND node = ? AND epoch = ? AND node <> '' RETURNING expires`,
			args(untilArgs, []any{l.Session, l.Node, l.Epoch})...).Scan(&exp)
		if err == nil {
			out.Expires = exp.T
			return nil
		}
		if !isNoRows(err) {
			return s.errorf("renew lease of session %s: %w", l.Session, err)
		}
		return s.errorf("renew lease: %w", s.lost(ctx, tx, l.Fence()))
	})
	if err != nil {
		return store.Lease{}, err
	}
	return out, nil
}

// renewChunk bounds the leases one statement of RenewLeases renews (three
// placeholders each, under either database's limit).
const renewChunk = 500

// RenewLeases renews the leases of ls still held as they are, in one
// transaction: one statement per renewChunk leases.
func (s *Store) RenewLeases(ctx context.Context, ls []store.Lease, ttl time.Duration) ([]store.Lease, error) {
	if len(ls) == 0 {
		return nil, nil
	}
	for _, l := range ls {
		if l.Session == "" || l.Node == "" || l.Epoch <= 0 {
			return nil, s.errorf("renew lease %+v: want a session, a node and an epoch > 0", l)
		}
	}
	renewed := map[string]time.Time{}
	err := s.write(ctx, "renew leases", func(tx Querier) error {
		clear(renewed)
		until, untilArgs := s.leaseAfter(ttl)
		for chunk := range slices.Chunk(ls, renewChunk) {
			which := make([]string, len(chunk))
			a := args(untilArgs)
			for i, l := range chunk {
				which[i] = "(session = ? AND node = ? AND epoch = ?)"
				a = append(a, l.Session, l.Node, l.Epoch)
			}
			rows, err := tx.Query(ctx, `UPDATE session_leases SET expires = `+until+`
	WHERE node <> '' AND (`+strings.Join(which, " OR ")+`) RETURNING session, expires`, a...)
			if err != nil {
				return s.errorf("renew leases: %w", err)
			}
			for rows.Next() {
				var (
					id  string
					exp Time
				)
				if err := rows.Scan(&id, &exp); err != nil {
					rows.Close()
					return s.errorf("renew leases: %w", err)
				}
				renewed[id] = exp.T
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return s.errorf("renew leases: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]store.Lease, 0, len(renewed))
	for _, l := range ls {
		if exp, ok := renewed[l.Session]; ok {
			l.Expires = exp
			out = append(out, l)
		}
	}
	return out, nil
}

// ReleaseLease gives the session up if its lease is still l's; the epoch
// is kept, so the next owner's is higher.
func (s *Store) ReleaseLease(ctx context.Context, l store.Lease) error {
	return s.write(ctx, "release lease of session "+l.Session, func(tx Querier) error {
		now, nowArgs := s.leaseNow()
		if _, err := tx.Exec(ctx, `UPDATE session_leases SET node = '', expires = `+now+`
	WHERE session = ? AND node = ? AND epoch = ? AND node <> ''`, args(nowArgs, []any{l.Session, l.Node, l.Epoch})...); err != nil {
			return s.errorf("release lease of session %s: %w", l.Session, err)
		}
		return nil
	})
}

// readLease reads session's lease; ok is false when it has none.
func (s *Store) readLease(ctx context.Context, q Querier, session string) (l store.Lease, ok bool, err error) {
	var exp Time
	l.Session = session
	err = q.QueryRow(ctx, `SELECT node, epoch, expires FROM session_leases WHERE session = ?`, session).Scan(&l.Node, &l.Epoch, &exp)
	if isNoRows(err) {
		return store.Lease{Session: session}, false, nil
	}
	if err != nil {
		return store.Lease{}, false, err
	}
	l.Expires = exp.T
	return l, true, nil
}

// GetLease is the session's lease as stored.
func (s *Store) GetLease(ctx context.Context, session string) (store.Lease, error) {
	l, ok, err := s.readLease(ctx, s.reader(), session)
	if err != nil {
		return store.Lease{}, s.errorf("get lease of session %s: %w", session, err)
	}
	if !ok {
		return store.Lease{}, fmt.Errorf("lease of session %s: %w", session, store.ErrNotFound)
	}
	return l, nil
}

// ExpiredLeases lists the sessions no node owns, by id.
func (s *Store) ExpiredLeases(ctx context.Context, f store.LeaseFilter) ([]store.Lease, error) {
	now, nowArgs := s.leaseNow()
	q := `SELECT s.id, COALESCE(l.node, ''), COALESCE(l.epoch, 0), l.expires
	FROM sessions s LEFT JOIN session_leases l ON l.session = s.id
	WHERE (l.session IS NULL OR l.node = '' OR l.expires <= ` + now + `)`
	a := args(nowArgs)
	if len(f.States) > 0 {
		q += " AND s.state IN " + in(len(f.States))
		for _, st := range f.States {
			a = append(a, string(st))
		}
	}
	q += " ORDER BY s.id"
	if f.Limit > 0 {
		q += " LIMIT ?"
		a = append(a, int64(f.Limit))
	}
	rows, err := s.reader().Query(ctx, q, a...)
	ls, err := collect(rows, err, scanLease)
	if err != nil {
		return nil, s.errorf("expired leases: %w", err)
	}
	return values(ls), nil
}

// scanLease reads session, node, epoch and expires.
func scanLease(r Row) (*store.Lease, error) {
	var (
		l   store.Lease
		exp Time
	)
	err := r.Scan(&l.Session, &l.Node, &l.Epoch, &exp)
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
	rows, err := tx.Query(ctx, `SELECT session, node, epoch, expires FROM session_leases
	WHERE session IN `+in(len(ids))+` ORDER BY session`+s.d.Lock(LockShare), appendStrings(nil, ids)...)
	cur, err := collect(rows, err, scanLease)
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

// lost is the error of a renewal refused under f: a *LeaseLostError with
// the lease as it is now, or ErrNotFound for a missing session.
func (s *Store) lost(ctx context.Context, tx Querier, f store.Fence) error {
	cur, ok, err := s.readLease(ctx, tx, f.Session)
	if err != nil {
		return fmt.Errorf("reading the lease of session %s: %w", f.Session, err)
	}
	if !ok {
		if err := sessionExists(ctx, tx, f.Session); err != nil {
			return err
		}
	}
	return &store.LeaseLostError{Session: f.Session, Epoch: f.Epoch, Current: cur}
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
