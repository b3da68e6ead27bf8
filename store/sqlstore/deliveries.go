package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/harvest-dev/harvest/store"
)

const deliveryCols = `id, event, payload, received_at, state, attempts, result, done_at, not_before, replays`

func scanDelivery(r Row) (*store.Delivery, error) {
	var (
		d                         store.Delivery
		received, done, notBefore Time
	)
	if err := r.Scan(&d.ID, &d.Event, &d.Payload, &received, &d.State, &d.Attempts, &d.Result, &done, &notBefore, &d.Replays); err != nil {
		return nil, err
	}
	d.ReceivedAt, d.DoneAt, d.NotBefore = received.T, done.T, notBefore.T
	return &d, nil
}

// AddDelivery stores d as pending, or as done with its Result when its
// State is done; an id already stored is ErrConflict.
func (s *Store) AddDelivery(ctx context.Context, d *store.Delivery) error {
	if d.ID == "" || d.Event == "" {
		return s.errorf("add delivery: id and event must not be empty")
	}
	c := *d
	if c.ReceivedAt.IsZero() {
		c.ReceivedAt = s.now()
	}
	q := `INSERT INTO deliveries (id, event, payload, received_at, state) VALUES (?, ?, ?, ?, ?)`
	if c.State == store.DeliveryDone {
		q = `INSERT INTO deliveries (id, event, payload, received_at, state, result, done_at) VALUES (?, ?, ?, ?, ?, ?, ?)`
		c.Attempts, c.DoneAt = 0, s.now()
	} else {
		c.State, c.Attempts, c.Result, c.DoneAt = store.DeliveryPending, 0, "", time.Time{}
	}
	if c.Payload == nil {
		c.Payload = []byte{}
	}
	args := []any{c.ID, c.Event, c.Payload, s.d.Time(c.ReceivedAt), c.State}
	if c.State == store.DeliveryDone {
		args = append(args, c.Result, s.d.Time(c.DoneAt))
	}
	err := s.write(ctx, "add delivery "+d.ID, func(tx Querier) error {
		_, err := tx.Exec(ctx, q, args...)
		if s.d.IsDuplicate(err) {
			return s.errorf("delivery %s was received before: %w", c.ID, store.ErrConflict)
		}
		if err != nil {
			return s.errorf("add delivery %s: %w", c.ID, err)
		}
		return nil
	})
	if err == nil {
		*d = c
	}
	return err
}

// PendingDeliveries lists pending deliveries, oldest first, at most limit
// (0: all).
func (s *Store) PendingDeliveries(ctx context.Context, limit int) ([]*store.Delivery, error) {
	q := `SELECT ` + deliveryCols + ` FROM deliveries WHERE state = 'pending' ORDER BY received_at, id`
	var args []any
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, int64(limit))
	}
	rows, err := s.reader().Query(ctx, q, args...)
	out, err := collect(rows, err, scanDelivery)
	if err != nil {
		return nil, s.errorf("pending deliveries: %w", err)
	}
	return out, nil
}

// deliveryState explains why a delivery was not updated: it does not
// exist (ErrNotFound) or is in another state (ErrConflict, with why).
func (s *Store) deliveryState(ctx context.Context, tx Querier, id, why string) error {
	var state string
	err := tx.QueryRow(ctx, `SELECT state FROM deliveries WHERE id = ?`, id).Scan(&state)
	if isNoRows(err) {
		return fmt.Errorf("delivery %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return s.errorf("delivery %s: %w", id, err)
	}
	return fmt.Errorf("delivery %s is %s%s: %w", id, state, why, store.ErrConflict)
}

// BeginDelivery counts an attempt at a pending delivery and returns it;
// one no longer pending is ErrConflict.
func (s *Store) BeginDelivery(ctx context.Context, id string) (*store.Delivery, error) {
	var out *store.Delivery
	err := s.write(ctx, "begin delivery "+id, func(tx Querier) error {
		d, err := scanDelivery(tx.QueryRow(ctx, `UPDATE deliveries SET attempts = attempts + 1 WHERE id = ? AND state = 'pending'
	RETURNING `+deliveryCols, id))
		if isNoRows(err) {
			return s.deliveryState(ctx, tx, id, "")
		}
		if err != nil {
			return s.errorf("begin delivery %s: %w", id, err)
		}
		out = d
		return nil
	})
	return out, err
}

// FinishDelivery records a pending delivery's end.
func (s *Store) FinishDelivery(ctx context.Context, id, state, result string) error {
	if state != store.DeliveryDone && state != store.DeliveryFailed {
		return s.errorf("finish delivery %s: state %q: want done or failed", id, state)
	}
	return s.postpone(ctx, "finish", `UPDATE deliveries SET state = ?, result = ?, done_at = ? WHERE id = ? AND state = 'pending'`,
		id, state, result, s.d.Time(s.now()), id)
}

// GetDelivery reads a delivery, or ErrNotFound.
func (s *Store) GetDelivery(ctx context.Context, id string) (*store.Delivery, error) {
	d, err := scanDelivery(s.reader().QueryRow(ctx, `SELECT `+deliveryCols+` FROM deliveries WHERE id = ?`, id))
	if isNoRows(err) {
		return nil, fmt.Errorf("delivery %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("get delivery %s: %w", id, err)
	}
	return d, nil
}

// PruneDeliveries deletes finished deliveries received before t and
// returns how many.
func (s *Store) PruneDeliveries(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.write(ctx, "prune deliveries", func(tx Querier) error {
		var err error
		n, err = tx.Exec(ctx, `DELETE FROM deliveries WHERE state <> 'pending' AND received_at < ?`, s.d.Time(before))
		if err != nil {
			return s.errorf("prune deliveries: %w", err)
		}
		return nil
	})
	return int(n), err
}

// RetryDelivery makes a pending delivery due at notBefore, with why.
func (s *Store) RetryDelivery(ctx context.Context, id string, notBefore time.Time, why string) error {
	return s.postpone(ctx, "retry", `UPDATE deliveries SET not_before = ?, result = ? WHERE id = ? AND state = 'pending'`,
		id, s.d.Time(notBefore), why, id)
}

// DeferDelivery makes a pending delivery due at notBefore and gives back
// the attempt begun.
func (s *Store) DeferDelivery(ctx context.Context, id string, notBefore time.Time, why string) error {
	return s.postpone(ctx, "defer", `UPDATE deliveries SET not_before = ?, result = ?,
	attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END WHERE id = ? AND state = 'pending'`,
		id, s.d.Time(notBefore), why, id)
}

// postpone runs q, an update of the pending delivery id.
func (s *Store) postpone(ctx context.Context, verb, q, id string, args ...any) error {
	return s.write(ctx, verb+" delivery "+id, func(tx Querier) error {
		n, err := tx.Exec(ctx, q, args...)
		if err != nil {
			return s.errorf("%s delivery %s: %w", verb, id, err)
		}
		if n == 0 {
			return s.deliveryState(ctx, tx, id, "")
		}
		return nil
	})
}

// ReplayDelivery makes a failed delivery pending again.
func (s *Store) ReplayDelivery(ctx context.Context, id string) (*store.Delivery, error) {
	var out *store.Delivery
	err := s.write(ctx, "replay delivery "+id, func(tx Querier) error {
		zero := s.d.Time(time.Time{})
		d, err := scanDelivery(tx.QueryRow(ctx, `UPDATE deliveries SET state = 'pending', attempts = 0, not_before = ?, done_at = ?,
	replays = replays + 1, result = 'replayed; it had failed: ' || result WHERE id = ? AND state = 'failed' RETURNING `+deliveryCols,
			zero, zero, id))
		if isNoRows(err) {
			return s.deliveryState(ctx, tx, id, ", not failed: only a failed delivery is replayed")
		}
		if err != nil {
			return s.errorf("replay delivery %s: %w", id, err)
		}
		out = d
		return nil
	})
	return out, err
}

// ListDeliveries lists deliveries, newest first.
func (s *Store) ListDeliveries(ctx context.Context, f store.DeliveryFilter) ([]*store.Delivery, error) {
	q := `SELECT ` + deliveryCols + ` FROM deliveries`
	var args []any
	if f.State != "" {
		q += ` WHERE state = ?`
		args = append(args, f.State)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.reader().Query(ctx, q+` ORDER BY received_at DESC, id DESC LIMIT ?`, append(args, int64(limit))...)
	out, err := collect(rows, err, scanDelivery)
	if err != nil {
		return nil, s.errorf("list deliveries: %w", err)
	}
	return out, nil
}

// GitHubMarks lists scope's marks not yet ended.
func (s *Store) GitHubMarks(ctx context.Context, scope string) ([]store.GitHubMark, error) {
	rows, err := s.reader().Query(ctx, `SELECT scope, kind, until, note FROM github_marks WHERE scope = ? AND until > ? ORDER BY kind`,
		scope, s.d.Time(s.now()))
	ms, err := collect(rows, err, func(r Row) (*store.GitHubMark, error) {
		var (
			m     store.GitHubMark
			until Time
		)
		err := r.Scan(&m.Scope, &m.Kind, &until, &m.Note)
		m.Until = until.T
		return &m, err
	})
	if err != nil {
		return nil, s.errorf("github marks of %s: %w", scope, err)
	}
	return values(ms), nil
}

// PutGitHubMark records m, keeping a later one.
func (s *Store) PutGitHubMark(ctx context.Context, m store.GitHubMark) error {
	if m.Scope == "" || m.Kind == "" {
		return s.errorf("put github mark: scope and kind must not be empty")
	}
	return s.write(ctx, "put github mark "+m.Scope+" "+m.Kind, func(tx Querier) error {
		if _, err := tx.Exec(ctx, `DELETE FROM github_marks WHERE scope = ? AND until <= ?`, m.Scope, s.d.Time(s.now())); err != nil {
			return s.errorf("put github mark: %w", err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO github_marks (scope, kind, until, note) VALUES (?, ?, ?, ?)
	ON CONFLICT (scope, kind) DO UPDATE SET until = excluded.until, note = excluded.note WHERE excluded.until > github_marks.until`,
			m.Scope, m.Kind, s.d.Time(m.Until), m.Note)
		if err != nil {
			return s.errorf("put github mark: %w", err)
		}
		return nil
	})
}

// DeleteGitHubMark removes a mark.
func (s *Store) DeleteGitHubMark(ctx context.Context, scope, kind string) error {
	return s.write(ctx, "delete github mark "+scope+" "+kind, func(tx Querier) error {
		if _, err := tx.Exec(ctx, `DELETE FROM github_marks WHERE scope = ? AND kind = ?`, scope, kind); err != nil {
			return s.errorf("delete github mark: %w", err)
		}
		return nil
	})
}
