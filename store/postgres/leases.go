package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// Nodes, session leases and fencing (store/leases.go has the contract; the
// package doc says how they hold under concurrency). Every time here is the
// server's statement_timestamp(): one instant per statement, read by every
// node alike, so a statement compares and sets times against the same now.

// ttlArg is ttl as microseconds, for "statement_timestamp() + $n * interval
// '1 microsecond'".
func ttlArg(ttl time.Duration) int64 { return ttl.Microseconds() }

// HeartbeatNode registers n or refreshes it, live until now+ttl.
func (s *Store) HeartbeatNode(ctx context.Context, n store.Node, ttl time.Duration) (store.Node, error) {
	if n.ID == "" || n.Capacity < store.NodeFull {
		return store.Node{}, fmt.Errorf("postgres: heartbeat of node %q: want an id and a capacity >= 0, or store.NodeFull (got %d)", n.ID, n.Capacity)
	}
	n.Leases = 0
	err := s.write(ctx, "heartbeat of node "+n.ID, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO nodes (id, addr, capacity, heartbeat, expires)
	VALUES ($1, $2, $3, statement_timestamp(), statement_timestamp() + $4 * interval '1 microsecond')
	ON CONFLICT (id) DO UPDATE SET addr = excluded.addr, capacity = excluded.capacity,
		heartbeat = excluded.heartbeat, expires = excluded.expires
	RETURNING heartbeat, expires`, n.ID, n.Addr, n.Capacity, ttlArg(ttl)).Scan(&n.Heartbeat, &n.Expires); err != nil {
			return fmt.Errorf("postgres: heartbeat of node %s: %w", n.ID, err)
		}
		return nil
	})
	if err != nil {
		return store.Node{}, err
	}
	n.Heartbeat, n.Expires = n.Heartbeat.UTC(), n.Expires.UTC()
	return n, nil
}

// ListNodes lists the live nodes by id, with their unexpired leases.
func (s *Store) ListNodes(ctx context.Context) ([]store.Node, error) {
	rows, err := s.pool.Query(ctx, `SELECT n.id, n.addr, n.capacity, n.heartbeat, n.expires,
	(SELECT COUNT(*) FROM session_leases l WHERE l.node = n.id AND l.expires > statement_timestamp())
	FROM nodes n WHERE n.expires > statement_timestamp() ORDER BY n.id`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list nodes: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Node, error) {
		var n store.Node
		err := r.Scan(&n.ID, &n.Addr, &n.Capacity, &n.Heartbeat, &n.Expires, &n.Leases)
		n.Heartbeat, n.Expires = n.Heartbeat.UTC(), n.Expires.UTC()
		return n, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list nodes: %w", err)
	}
	return out, nil
}

// RemoveNode forgets node id (no error when it is not there).
func (s *Store) RemoveNode(ctx context.Context, id string) error {
	return s.write(ctx, "remove node "+id, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM nodes WHERE id = $1`, id); err != nil {
			return fmt.Errorf("postgres: remove node %s: %w", id, err)
		}
		return nil
	})
}

// AcquireLease gives session to node until now+ttl (see store.Leases).
//
// One statement decides, as AcquireLock does: an INSERT that, on a
// conflict, takes the row over only if it is node's, released or expired,
// bumping the epoch unless it is node's unexpired lease. ON CONFLICT locks
// the existing row (and waits for a racing acquirer's transaction, then
// sees what it committed), so of racing acquirers exactly one gets each
// epoch; the others read the winner's row, still locked by nobody.
func (s *Store) AcquireLease(ctx context.Context, session, node string, ttl time.Duration) (store.Lease, error) {
	if session == "" || node == "" {
		return store.Lease{}, fmt.Errorf("postgres: acquire lease of session %q for node %q: session and node must not be empty", session, node)
	}
	out := store.Lease{Session: session, Node: node}
	err := s.write(ctx, "acquire lease of session "+session, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO session_leases AS l (session, node, epoch, expires)
	VALUES ($1, $2, 1, statement_timestamp() + $3 * interval '1 microsecond')
	ON CONFLICT (session) DO UPDATE SET
		epoch = CASE WHEN l.node = excluded.node AND l.expires > statement_timestamp() THEN l.epoch ELSE l.epoch + 1 END,
		node = excluded.node, expires = excluded.expires
	WHERE l.node = excluded.node OR l.node = '' OR l.expires <= statement_timestamp()
	RETURNING epoch, expires`, session, node, ttlArg(ttl)).Scan(&out.Epoch, &out.Expires)
		switch {
		case err == nil:
			out.Expires = out.Expires.UTC()
			return nil
		case isMissingParent(err):
			return fmt.Errorf("postgres: acquire lease: session %s: %w", session, store.ErrNotFound)
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("postgres: acquire lease of session %s: %w", session, err)
		}
		cur, _, err := readLease(ctx, tx, session)
		if err != nil {
			return fmt.Errorf("postgres: acquire lease of session %s: reading its holder: %w", session, err)
		}
		return fmt.Errorf("postgres: acquire lease of session %s for node %s: %w", session, node, &store.LeaseHeldError{Lease: cur})
	})
	if err != nil {
		return store.Lease{}, err
	}
	return out, nil
}

// RenewLease extends l until now+ttl if the session's lease is still l's.
func (s *Store) RenewLease(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	if l.Session == "" || l.Node == "" || l.Epoch <= 0 {
		return store.Lease{}, fmt.Errorf("postgres: renew lease %+v: want a session, a node and an epoch > 0", l)
	}
	out := l
	err := s.write(ctx, "renew lease of session "+l.Session, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `UPDATE session_leases SET expires = statement_timestamp() + $4 * interval '1 microsecond'
	WHERE session = $1 AND node = $2 AND epoch = $3 AND node <> '' RETURNING expires`,
			l.Session, l.Node, l.Epoch, ttlArg(ttl)).Scan(&out.Expires)
		if err == nil {
			out.Expires = out.Expires.UTC()
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("postgres: renew lease of session %s: %w", l.Session, err)
		}
		return fmt.Errorf("postgres: renew lease: %w", lost(ctx, tx, l.Fence()))
	})
	if err != nil {
		return store.Lease{}, err
	}
	return out, nil
}

// RenewLeases renews the leases of ls still held as they are, in one
// statement.
func (s *Store) RenewLeases(ctx context.Context, ls []store.Lease, ttl time.Duration) ([]store.Lease, error) {
	if len(ls) == 0 {
		return nil, nil
	}
	sessions, nodes, epochs := make([]string, len(ls)), make([]string, len(ls)), make([]int64, len(ls))
	for i, l := range ls {
		if l.Session == "" || l.Node == "" || l.Epoch <= 0 {
			return nil, fmt.Errorf("postgres: renew lease %+v: want a session, a node and an epoch > 0", l)
		}
		sessions[i], nodes[i], epochs[i] = l.Session, l.Node, l.Epoch
	}
	renewed := map[string]time.Time{}
	err := s.write(ctx, "renew leases", func(tx pgx.Tx) error {
		clear(renewed)
		rows, err := tx.Query(ctx, `UPDATE session_leases l SET expires = statement_timestamp() + $4 * interval '1 microsecond'
	FROM unnest($1::text[], $2::text[], $3::bigint[]) AS r(session, node, epoch)
	WHERE l.session = r.session AND l.node = r.node AND l.epoch = r.epoch AND l.node <> ''
	RETURNING l.session, l.expires`, sessions, nodes, epochs, ttlArg(ttl))
		if err != nil {
			return fmt.Errorf("postgres: renew leases: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var exp time.Time
			if err := rows.Scan(&id, &exp); err != nil {
				return fmt.Errorf("postgres: renew leases: %w", err)
			}
			renewed[id] = exp.UTC()
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("postgres: renew leases: %w", err)
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
	return s.write(ctx, "release lease of session "+l.Session, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE session_leases SET node = '', expires = statement_timestamp()
	WHERE session = $1 AND node = $2 AND epoch = $3 AND node <> ''`, l.Session, l.Node, l.Epoch); err != nil {
			return fmt.Errorf("postgres: release lease of session %s: %w", l.Session, err)
		}
		return nil
	})
}

// readLease reads session's lease; ok is false when it has none.
func readLease(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, session string) (l store.Lease, ok bool, err error) {
	l.Session = session
	err = q.QueryRow(ctx, `SELECT node, epoch, expires FROM session_leases WHERE session = $1`, session).Scan(&l.Node, &l.Epoch, &l.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Lease{Session: session}, false, nil
	}
	if err != nil {
		return store.Lease{}, false, err
	}
	l.Expires = l.Expires.UTC()
	return l, true, nil
}

// GetLease is the session's lease as stored.
func (s *Store) GetLease(ctx context.Context, session string) (store.Lease, error) {
	l, ok, err := readLease(ctx, s.pool, session)
	if err != nil {
		return store.Lease{}, fmt.Errorf("postgres: get lease of session %s: %w", session, err)
	}
	if !ok {
		return store.Lease{}, fmt.Errorf("lease of session %s: %w", session, store.ErrNotFound)
	}
	return l, nil
}

// ExpiredLeases lists the sessions no node owns, by id.
func (s *Store) ExpiredLeases(ctx context.Context, f store.LeaseFilter) ([]store.Lease, error) {
	states := []string{} // not nil: NULL would match nothing
	for _, st := range f.States {
		states = append(states, string(st))
	}
	var lim any // NULL: no limit
	if f.Limit > 0 {
		lim = int64(f.Limit)
	}
	rows, err := s.pool.Query(ctx, `SELECT s.id, COALESCE(l.node, ''), COALESCE(l.epoch, 0), l.expires
	FROM sessions s LEFT JOIN session_leases l ON l.session = s.id
	WHERE (l.session IS NULL OR l.node = '' OR l.expires <= statement_timestamp())
		AND (cardinality($1::text[]) = 0 OR s.state = ANY($1))
	ORDER BY s.id LIMIT $2`, states, lim)
	if err != nil {
		return nil, fmt.Errorf("postgres: expired leases: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Lease, error) {
		var (
			l       store.Lease
			expires *time.Time
		)
		err := r.Scan(&l.Session, &l.Node, &l.Epoch, &expires)
		l.Expires = tm(expires)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: expired leases: %w", err)
	}
	return out, nil
}

// checkFences locks the leases of the fences' sessions FOR SHARE, in
// session order, and fails with a *store.LeaseLostError unless each has
// its fence's epoch and is not released; a missing session is
// ErrNotFound. It runs first in the transaction of the write it guards.
//
// FOR SHARE is what makes the check hold until the commit: a takeover
// (AcquireLease's UPDATE of the row) waits for every fenced write holding
// the share lock, and a fenced write that comes after a takeover waits for
// it and then reads the new epoch. So once AcquireLease returned epoch
// N+1, no write under epoch N commits. Fenced writes of one session share
// the lock and do not wait for each other.
func checkFences(ctx context.Context, tx pgx.Tx, fences []store.Fence) error {
	if len(fences) == 0 {
		return nil
	}
	ids := make([]string, len(fences))
	for i, f := range fences {
		ids[i] = f.Session
	}
	rows, err := tx.Query(ctx, `SELECT session, node, epoch, expires FROM session_leases
	WHERE session = ANY($1) ORDER BY session FOR SHARE`, ids)
	if err != nil {
		return fmt.Errorf("reading the leases: %w", err)
	}
	cur, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Lease, error) {
		var l store.Lease
		err := r.Scan(&l.Session, &l.Node, &l.Epoch, &l.Expires)
		l.Expires = l.Expires.UTC()
		return l, err
	})
	if err != nil {
		return fmt.Errorf("reading the leases: %w", err)
	}
	by := make(map[string]store.Lease, len(cur))
	for _, l := range cur {
		by[l.Session] = l
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
func lost(ctx context.Context, tx pgx.Tx, f store.Fence) error {
	cur, ok, err := readLease(ctx, tx, f.Session)
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
func sessionExists(ctx context.Context, tx pgx.Tx, session string) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM sessions WHERE id = $1`, session).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("session %s: %w", session, store.ErrNotFound)
	}
	return err
}

// AppendEventsFenced is AppendEventsWith under fences.
func (s *Store) AppendEventsFenced(ctx context.Context, fences []store.Fence, evs []event.Event, msgs []*store.Message) error {
	if err := store.CheckFences(fences, evs, msgs); err != nil {
		return fmt.Errorf("postgres: append events: %w", err)
	}
	if len(evs) == 0 && len(msgs) == 0 {
		return nil
	}
	return s.appendEvents(ctx, fences, evs, msgs)
}

// UpdateSessionFenced is UpdateSession under f.
func (s *Store) UpdateSessionFenced(ctx context.Context, f store.Fence, fn func(*store.Session) error) (*store.Session, error) {
	if err := store.CheckFences([]store.Fence{f}, nil, nil); err != nil {
		return nil, fmt.Errorf("postgres: update session %s: %w", f.Session, err)
	}
	return s.updateSession(ctx, f.Session, &f, fn)
}

// SetMessageStateFenced is SetMessageState under f.
func (s *Store) SetMessageStateFenced(ctx context.Context, f store.Fence, id string, state store.MessageState, turn string) error {
	if err := store.CheckFences([]store.Fence{f}, nil, nil); err != nil {
		return fmt.Errorf("postgres: set state of message %s: %w", id, err)
	}
	return s.setMessageState(ctx, f.Session, id, state, turn, &f)
}
