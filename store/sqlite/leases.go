package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// Nodes, session leases and fencing (store/leases.go has the contract).
// Every decision is a read and a write in one writer transaction, and
// SQLite has one writer: a lease changes hands, and a fenced write checks
// its epoch, with nothing in between. Time is the Store's clock (the
// process's), as for the locks.

// HeartbeatNode registers n or refreshes it, live until now+ttl.
func (s *Store) HeartbeatNode(ctx context.Context, n store.Node, ttl time.Duration) (store.Node, error) {
	if n.ID == "" || n.Capacity < store.NodeFull {
		return store.Node{}, fmt.Errorf("sqlite: heartbeat of node %q: want an id and a capacity >= 0, or store.NodeFull (got %d)", n.ID, n.Capacity)
	}
	now := s.now().UTC()
	n.Heartbeat, n.Expires, n.Leases = now, now.Add(ttl), 0
	err := s.write(ctx, "sqlite: heartbeat of node "+n.ID, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO nodes (id, addr, capacity, heartbeat, expires) VALUES (?, ?, ?, ?, ?)
	ON CONFLICT (id) DO UPDATE SET addr = excluded.addr, capacity = excluded.capacity,
		heartbeat = excluded.heartbeat, expires = excluded.expires`, n.ID, n.Addr, n.Capacity, ts(n.Heartbeat), ts(n.Expires)); err != nil {
			return fmt.Errorf("sqlite: heartbeat of node %s: %w", n.ID, err)
		}
		return nil
	})
	if err != nil {
		return store.Node{}, err
	}
	return n, nil
}

// ListNodes lists the live nodes by id, with their unexpired leases.
func (s *Store) ListNodes(ctx context.Context) ([]store.Node, error) {
	now := ts(s.now())
	rows, err := s.r.QueryContext(ctx, `SELECT n.id, n.addr, n.capacity, n.heartbeat, n.expires,
	(SELECT COUNT(*) FROM session_leases l WHERE l.node = n.id AND l.expires > ?)
	FROM nodes n WHERE n.expires > ? ORDER BY n.id`, now, now)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list nodes: %w", err)
	}
	defer rows.Close()
	var out []store.Node
	for rows.Next() {
		var (
			n           store.Node
			hb, expires int64
		)
		if err := rows.Scan(&n.ID, &n.Addr, &n.Capacity, &hb, &expires, &n.Leases); err != nil {
			return nil, fmt.Errorf("sqlite: list nodes: %w", err)
		}
		n.Heartbeat, n.Expires = tm(hb), tm(expires)
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list nodes: %w", err)
	}
	return out, nil
}

// RemoveNode forgets node id (no error when it is not there).
func (s *Store) RemoveNode(ctx context.Context, id string) error {
	return s.write(ctx, "sqlite: remove node "+id, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM nodes WHERE id = ?`, id); err != nil {
			return fmt.Errorf("sqlite: remove node %s: %w", id, err)
		}
		return nil
	})
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// readLease reads session's lease; ok is false when it has none.
func readLease(ctx context.Context, q querier, session string) (l store.Lease, ok bool, err error) {
	var expires int64
	l.Session = session
	err = q.QueryRowContext(ctx, `SELECT node, epoch, expires FROM session_leases WHERE session = ?`, session).Scan(&l.Node, &l.Epoch, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Lease{Session: session}, false, nil
	}
	if err != nil {
		return store.Lease{}, false, err
	}
	l.Expires = tm(expires)
	return l, true, nil
}

// sessionExists is ErrNotFound when session is missing.
func sessionExists(ctx context.Context, tx *sql.Tx, session string) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = ?`, session).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("session %s: %w", session, store.ErrNotFound)
	}
	return err
}

// AcquireLease gives session to node until now+ttl (see store.Leases).
func (s *Store) AcquireLease(ctx context.Context, session, node string, ttl time.Duration) (store.Lease, error) {
	if session == "" || node == "" {
		return store.Lease{}, fmt.Errorf("sqlite: acquire lease of session %q for node %q: session and node must not be empty", session, node)
	}
	var out store.Lease
	err := s.write(ctx, "sqlite: acquire lease of session "+session, func(tx *sql.Tx) error {
		now := s.now().UTC()
		cur, ok, err := readLease(ctx, tx, session)
		if err != nil {
			return fmt.Errorf("sqlite: acquire lease of session %s: %w", session, err)
		}
		epoch := cur.Epoch + 1
		switch {
		case !ok:
			if err := sessionExists(ctx, tx, session); err != nil {
				return fmt.Errorf("sqlite: acquire lease of session %s: %w", session, err)
			}
		case cur.Node != "" && cur.Expires.After(now):
			if cur.Node != node {
				return fmt.Errorf("sqlite: acquire lease of session %s for node %s: %w", session, node, &store.LeaseHeldError{Lease: cur})
			}
			epoch = cur.Epoch // a renewal
		}
		out = store.Lease{Session: session, Node: node, Epoch: epoch, Expires: now.Add(ttl)}
		if _, err := tx.ExecContext(ctx, `INSERT INTO session_leases (session, node, epoch, expires) VALUES (?, ?, ?, ?)
	ON CONFLICT (session) DO UPDATE SET node = excluded.node, epoch = excluded.epoch, expires = excluded.expires`,
			session, node, epoch, ts(out.Expires)); err != nil {
			return fmt.Errorf("sqlite: acquire lease of session %s: %w", session, err)
		}
		return nil
	})
	if err != nil {
		return store.Lease{}, err
	}
	return out, nil
}

// RenewLease extends l until now+ttl if the session's lease is still l's.
func (s *Store) RenewLease(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	if l.Session == "" || l.Node == "" || l.Epoch <= 0 {
		return store.Lease{}, fmt.Errorf("sqlite: renew lease %+v: want a session, a node and an epoch > 0", l)
	}
	var out store.Lease
	err := s.write(ctx, "sqlite: renew lease of session "+l.Session, func(tx *sql.Tx) error {
		if err := checkFence(ctx, tx, l.Fence(), l.Node); err != nil {
			return fmt.Errorf("sqlite: renew lease: %w", err)
		}
		out = l
		out.Expires = s.now().UTC().Add(ttl)
		if _, err := tx.ExecContext(ctx, `UPDATE session_leases SET expires = ? WHERE session = ?`, ts(out.Expires), l.Session); err != nil {
			return fmt.Errorf("sqlite: renew lease of session %s: %w", l.Session, err)
		}
		return nil
	})
	if err != nil {
		return store.Lease{}, err
	}
	return out, nil
}

// RenewLeases renews the leases of ls still held as they are, in one
// transaction.
func (s *Store) RenewLeases(ctx context.Context, ls []store.Lease, ttl time.Duration) ([]store.Lease, error) {
	if len(ls) == 0 {
		return nil, nil
	}
	for _, l := range ls {
		if l.Session == "" || l.Node == "" || l.Epoch <= 0 {
			return nil, fmt.Errorf("sqlite: renew lease %+v: want a session, a node and an epoch > 0", l)
		}
	}
	var out []store.Lease
	err := s.write(ctx, "sqlite: renew leases", func(tx *sql.Tx) error {
		out = out[:0]
		exp := s.now().UTC().Add(ttl)
		for _, l := range ls {
			res, err := tx.ExecContext(ctx, `UPDATE session_leases SET expires = ? WHERE session = ? AND node = ? AND epoch = ? AND node <> ''`,
				ts(exp), l.Session, l.Node, l.Epoch)
			if err != nil {
				return fmt.Errorf("sqlite: renew lease of session %s: %w", l.Session, err)
			}
			if n, _ := res.RowsAffected(); n == 1 {
				l.Expires = exp
				out = append(out, l)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReleaseLease gives the session up if its lease is still l's; the epoch
// is kept, so the next owner's is higher.
func (s *Store) ReleaseLease(ctx context.Context, l store.Lease) error {
	return s.write(ctx, "sqlite: release lease of session "+l.Session, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE session_leases SET node = '', expires = ?
	WHERE session = ? AND node = ? AND epoch = ? AND node <> ''`, ts(s.now()), l.Session, l.Node, l.Epoch); err != nil {
			return fmt.Errorf("sqlite: release lease of session %s: %w", l.Session, err)
		}
		return nil
	})
}

// GetLease is the session's lease as stored.
func (s *Store) GetLease(ctx context.Context, session string) (store.Lease, error) {
	l, ok, err := readLease(ctx, s.r, session)
	if err != nil {
		return store.Lease{}, fmt.Errorf("sqlite: get lease of session %s: %w", session, err)
	}
	if !ok {
		return store.Lease{}, fmt.Errorf("lease of session %s: %w", session, store.ErrNotFound)
	}
	return l, nil
}

// ExpiredLeases lists the sessions no node owns, by id.
func (s *Store) ExpiredLeases(ctx context.Context, f store.LeaseFilter) ([]store.Lease, error) {
	q := `SELECT s.id, COALESCE(l.node, ''), COALESCE(l.epoch, 0), COALESCE(l.expires, 0)
	FROM sessions s LEFT JOIN session_leases l ON l.session = s.id
	WHERE (l.session IS NULL OR l.node = '' OR l.expires <= ?)`
	args := []any{ts(s.now())}
	if len(f.States) > 0 {
		q += " AND s.state IN (?" + strings.Repeat(",?", len(f.States)-1) + ")"
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	q += " ORDER BY s.id"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: expired leases: %w", err)
	}
	defer rows.Close()
	var out []store.Lease
	for rows.Next() {
		var (
			l       store.Lease
			expires int64
		)
		if err := rows.Scan(&l.Session, &l.Node, &l.Epoch, &expires); err != nil {
			return nil, fmt.Errorf("sqlite: expired leases: %w", err)
		}
		l.Expires = tm(expires)
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: expired leases: %w", err)
	}
	return out, nil
}

// checkFence fails with a *store.LeaseLostError unless the lease of
// f.Session has f.Epoch and is not released (and, when node is not empty,
// is node's); a missing session is ErrNotFound. It runs first in the
// transaction of the write it guards.
func checkFence(ctx context.Context, tx *sql.Tx, f store.Fence, node string) error {
	cur, ok, err := readLease(ctx, tx, f.Session)
	if err != nil {
		return fmt.Errorf("reading the lease of session %s: %w", f.Session, err)
	}
	if !ok {
		if err := sessionExists(ctx, tx, f.Session); err != nil {
			return err
		}
	}
	if !ok || cur.Node == "" || cur.Epoch != f.Epoch || (node != "" && cur.Node != node) {
		return &store.LeaseLostError{Session: f.Session, Epoch: f.Epoch, Current: cur}
	}
	return nil
}

// checkFences checks every fence (in session order, as PostgreSQL does).
func checkFences(ctx context.Context, tx *sql.Tx, fences []store.Fence) error {
	for _, f := range fences {
		if err := checkFence(ctx, tx, f, ""); err != nil {
			return err
		}
	}
	return nil
}

// AppendEventsFenced is AppendEventsWith under fences.
func (s *Store) AppendEventsFenced(ctx context.Context, fences []store.Fence, evs []event.Event, msgs []*store.Message) error {
	if err := store.CheckFences(fences, evs, msgs); err != nil {
		return fmt.Errorf("sqlite: append events: %w", err)
	}
	if len(evs) == 0 && len(msgs) == 0 {
		return nil
	}
	return s.appendEvents(ctx, fences, evs, msgs)
}

// UpdateSessionFenced is UpdateSession under f.
func (s *Store) UpdateSessionFenced(ctx context.Context, f store.Fence, fn func(*store.Session) error) (*store.Session, error) {
	if err := store.CheckFences([]store.Fence{f}, nil, nil); err != nil {
		return nil, fmt.Errorf("sqlite: update session %s: %w", f.Session, err)
	}
	return s.updateSession(ctx, f.Session, &f, fn)
}

// SetMessageStateFenced is SetMessageState under f.
func (s *Store) SetMessageStateFenced(ctx context.Context, f store.Fence, id string, state store.MessageState, turn string) error {
	if err := store.CheckFences([]store.Fence{f}, nil, nil); err != nil {
		return fmt.Errorf("sqlite: set state of message %s: %w", id, err)
	}
	return s.setMessageState(ctx, f.Session, id, state, turn, &f)
}
