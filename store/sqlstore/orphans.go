package sqlstore

import (
	"context"
	"slices"
	"strings"

	"github.com/harvest-dev/harvest/store"
)

// orphanStates are the states of a session that needs a node: the live
// ones (store.State.Live). A suspended one needs a node only with a
// queued message (the query's outer condition).
var orphanStates = []store.State{
	store.StatePending, store.StateProvisioning, store.StateIdle, store.StateWorking,
	store.StateWaiting, store.StateCancelling,
}

// needingNode is the SQL condition on a session's state (sessions s) that
// it may need a node: a live state, or suspended. Written out, not bound:
// both databases use the partial index sessions_needing_node (schema
// "node-leases") only when the query's condition is its predicate, which
// they cannot know of a bound parameter when they plan it.
var needingNode = func() string {
	q := "s.state IN ("
	for _, st := range append(slices.Clone(orphanStates), store.StateSuspended) {
		q += "'" + string(st) + "', "
	}
	return strings.TrimSuffix(q, ", ") + ")"
}()

// Orphans lists the sessions a takeover scan may take (see store.Leases):
// one statement, whatever their number. It reads the sessions that may
// need a node through the partial index sessions_needing_node (never the
// ended ones, which only grow), their leases by primary key and their
// holders' rows; the queued messages are counted per orphan through the
// messages' primary key (session, seq); the total is a window count taken
// before the LIMIT.
func (s *Store) Orphans(ctx context.Context, limit int) ([]store.Orphan, int, error) {
	if limit < 0 {
		return nil, 0, s.errorf("orphans: limit %d: want 0 (all) or more", limit)
	}
	now, nowArgs := s.leaseNow()
	q := `SELECT id, node, epoch, gen, expires, state, created_at, queued, COUNT(*) OVER () FROM (
	SELECT s.id, COALESCE(l.node, '') AS node, COALESCE(l.epoch, 0) AS epoch, COALESCE(l.gen, 0) AS gen,
		` + leaseExpires + ` AS expires, s.state, s.created_at,
		(SELECT COUNT(*) FROM messages m WHERE m.session = s.id AND m.state = ?) AS queued
	FROM sessions s LEFT JOIN session_leases l ON l.session = s.id LEFT JOIN nodes n ON n.id = l.node
	WHERE ` + needingNode + ` AND (l.session IS NULL OR ` + leaseExpired(now) + `)
) o WHERE state <> ? OR queued > 0
ORDER BY CASE WHEN state <> ? OR queued > 0 THEN 0 ELSE 1 END, created_at, id`
	a := args([]any{string(store.MessageQueued)}, nowArgs, []any{string(store.StateSuspended), string(store.StateIdle)})
	if limit > 0 {
		q += " LIMIT ?"
		a = append(a, int64(limit))
	}
	var total int
	rows, err := s.reader().Query(ctx, q, a...)
	out, err := collect(rows, err, func(r Row) (*store.Orphan, error) {
		var (
			o            store.Orphan
			exp, created Time
			state        string
		)
		err := r.Scan(&o.Lease.Session, &o.Lease.Node, &o.Lease.Epoch, &o.Lease.Gen, &exp, &state, &created, &o.Queued, &total)
		o.Lease.Expires, o.CreatedAt, o.State = exp.T, created.T, store.State(state)
		return &o, err
	})
	if err != nil {
		return nil, 0, s.errorf("orphans: %w", err)
	}
	return values(out), total, nil
}
