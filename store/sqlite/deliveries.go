package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/harvest-dev/harvest/store"
)

const deliveryCols = `id, event, payload, received_at, state, attempts, result, done_at, not_before, replays`

func scanDelivery(r scanner) (*store.Delivery, error) {
	var (
		d                         store.Delivery
		received, done, notBefore int64
	)
	if err := r.Scan(&d.ID, &d.Event, &d.Payload, &received, &d.State, &d.Attempts, &d.Result, &done, &notBefore, &d.Replays); err != nil {
		return nil, err
	}
	d.ReceivedAt = tm(received)
	if done != 0 {
		d.DoneAt = tm(done)
	}
	if notBefore != 0 {
		d.NotBefore = tm(notBefore)
	}
	return &d, nil
}

// AddDelivery stores d as pending; an id already stored is ErrConflict.
func (s *Store) AddDelivery(ctx context.Context, d *store.Delivery) error {
	if d.ID == "" || d.Event == "" {
		return errors.New("sqlite: add delivery: id and event must not be empty")
	}
	c := *d
	if c.ReceivedAt.IsZero() {
		c.ReceivedAt = s.now().UTC()
	}
	c.State, c.Attempts, c.Result, c.DoneAt = store.DeliveryPending, 0, "", time.Time{}
	err := s.write(ctx, "sqlite: add delivery "+d.ID, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO deliveries (`+deliveryCols+`) VALUES (?,?,?,?,?,0,'',0,0,0)`,
			c.ID, c.Event, c.Payload, ts(c.ReceivedAt), c.State)
		if isDuplicate(err) {
			return fmt.Errorf("sqlite: delivery %s was received before: %w", c.ID, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("sqlite: add delivery %s: %w", c.ID, err)
		}
		return nil
	})
	if err == nil {
		*d = c
	}
	return err
}

// PendingDeliveries lists pending deliveries, oldest first.
func (s *Store) PendingDeliveries(ctx context.Context, limit int) ([]*store.Delivery, error) {
	q := `SELECT ` + deliveryCols + ` FROM deliveries WHERE state = 'pending' ORDER BY received_at, id`
	args := []any{}
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: pending deliveries: %w", err)
	}
	defer rows.Close()
	var out []*store.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: pending deliveries: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: pending deliveries: %w", err)
	}
	return out, nil
}

// BeginDelivery counts an attempt at a pending delivery.
func (s *Store) BeginDelivery(ctx context.Context, id string) (*store.Delivery, error) {
	var out *store.Delivery
	err := s.write(ctx, "sqlite: begin delivery "+id, func(tx *sql.Tx) error {
		d, err := scanDelivery(tx.QueryRowContext(ctx, `SELECT `+deliveryCols+` FROM deliveries WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("delivery %s: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("sqlite: begin delivery %s: %w", id, err)
		}
		if d.State != store.DeliveryPending {
			return fmt.Errorf("delivery %s is %s: %w", id, d.State, store.ErrConflict)
		}
		d.Attempts++
		if _, err := tx.ExecContext(ctx, `UPDATE deliveries SET attempts = ? WHERE id = ?`, d.Attempts, id); err != nil {
			return fmt.Errorf("sqlite: begin delivery %s: %w", id, err)
		}
		out = d
		return nil
	})
	return out, err
}

// FinishDelivery records a pending delivery's end.
func (s *Store) FinishDelivery(ctx context.Context, id, state, result string) error {
	if state != store.DeliveryDone && state != store.DeliveryFailed {
		return fmt.Errorf("sqlite: finish delivery %s: state %q: want done or failed", id, state)
	}
	return s.write(ctx, "sqlite: finish delivery "+id, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE deliveries SET state = ?, result = ?, done_at = ? WHERE id = ? AND state = 'pending'`,
			state, result, ts(s.now().UTC()), id)
		if err != nil {
			return fmt.Errorf("sqlite: finish delivery %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			if _, err := scanDelivery(tx.QueryRowContext(ctx, `SELECT `+deliveryCols+` FROM deliveries WHERE id = ?`, id)); errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("delivery %s: %w", id, store.ErrNotFound)
			}
			return fmt.Errorf("delivery %s is no longer pending: %w", id, store.ErrConflict)
		}
		return nil
	})
}

// GetDelivery reads a delivery, or ErrNotFound.
func (s *Store) GetDelivery(ctx context.Context, id string) (*store.Delivery, error) {
	d, err := scanDelivery(s.r.QueryRowContext(ctx, `SELECT `+deliveryCols+` FROM deliveries WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("delivery %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get delivery %s: %w", id, err)
	}
	return d, nil
}

// PruneDeliveries deletes finished deliveries received before t.
func (s *Store) PruneDeliveries(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.write(ctx, "sqlite: prune deliveries", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM deliveries WHERE state <> 'pending' AND received_at < ?`, ts(before))
		if err != nil {
			return fmt.Errorf("sqlite: prune deliveries: %w", err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return int(n), err
}

// RetryDelivery makes a pending delivery due at notBefore, with why.
func (s *Store) RetryDelivery(ctx context.Context, id string, notBefore time.Time, why string) error {
	return s.postpone(ctx, "retry", `UPDATE deliveries SET not_before = ?, result = ? WHERE id = ? AND state = 'pending'`, id, ts(notBefore), why, id)
}

// DeferDelivery makes a pending delivery due at notBefore and gives back
// the attempt begun.
func (s *Store) DeferDelivery(ctx context.Context, id string, notBefore time.Time, why string) error {
	return s.postpone(ctx, "defer", `UPDATE deliveries SET not_before = ?, result = ?, attempts = MAX(attempts - 1, 0) WHERE id = ? AND state = 'pending'`, id, ts(notBefore), why, id)
}

func (s *Store) postpone(ctx context.Context, verb, q, id string, args ...any) error {
	return s.write(ctx, "sqlite: "+verb+" delivery "+id, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("sqlite: %s delivery %s: %w", verb, id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notPending(ctx, tx, id)
		}
		return nil
	})
}

// notPending explains why a delivery was not updated as a pending one.
func notPending(ctx context.Context, tx *sql.Tx, id string) error {
	var state string
	err := tx.QueryRowContext(ctx, `SELECT state FROM deliveries WHERE id = ?`, id).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("delivery %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("sqlite: delivery %s: %w", id, err)
	}
	return fmt.Errorf("delivery %s is %s: %w", id, state, store.ErrConflict)
}

// ReplayDelivery makes a failed delivery pending again.
func (s *Store) ReplayDelivery(ctx context.Context, id string) (*store.Delivery, error) {
	var out *store.Delivery
	err := s.write(ctx, "sqlite: replay delivery "+id, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE deliveries SET state = 'pending', attempts = 0, not_before = 0, done_at = 0,
	replays = replays + 1, result = 'replayed; it had failed: ' || result WHERE id = ? AND state = 'failed'`, id)
		if err != nil {
			return fmt.Errorf("sqlite: replay delivery %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			var state string
			err := tx.QueryRowContext(ctx, `SELECT state FROM deliveries WHERE id = ?`, id).Scan(&state)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("delivery %s: %w", id, store.ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("sqlite: replay delivery %s: %w", id, err)
			}
			return fmt.Errorf("delivery %s is %s, not failed: only a failed delivery is replayed: %w", id, state, store.ErrConflict)
		}
		out, err = scanDelivery(tx.QueryRowContext(ctx, `SELECT `+deliveryCols+` FROM deliveries WHERE id = ?`, id))
		return err
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
	q += ` ORDER BY received_at DESC, id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list deliveries: %w", err)
	}
	defer rows.Close()
	var out []*store.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list deliveries: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// GitHubMarks lists scope's marks not yet ended.
func (s *Store) GitHubMarks(ctx context.Context, scope string) ([]store.GitHubMark, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT scope, kind, until, note FROM github_marks WHERE scope = ? AND until > ? ORDER BY kind`, scope, ts(s.now()))
	if err != nil {
		return nil, fmt.Errorf("sqlite: github marks of %s: %w", scope, err)
	}
	defer rows.Close()
	var out []store.GitHubMark
	for rows.Next() {
		var m store.GitHubMark
		var until int64
		if err := rows.Scan(&m.Scope, &m.Kind, &until, &m.Note); err != nil {
			return nil, fmt.Errorf("sqlite: github marks of %s: %w", scope, err)
		}
		m.Until = tm(until)
		out = append(out, m)
	}
	return out, rows.Err()
}

// PutGitHubMark records m, keeping a later one.
func (s *Store) PutGitHubMark(ctx context.Context, m store.GitHubMark) error {
	if m.Scope == "" || m.Kind == "" {
		return errors.New("sqlite: put github mark: scope and kind must not be empty")
	}
	return s.write(ctx, "sqlite: put github mark "+m.Scope+" "+m.Kind, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM github_marks WHERE scope = ? AND until <= ?`, m.Scope, ts(s.now())); err != nil {
			return fmt.Errorf("sqlite: put github mark: %w", err)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO github_marks (scope, kind, until, note) VALUES (?, ?, ?, ?)
	ON CONFLICT (scope, kind) DO UPDATE SET until = excluded.until, note = excluded.note WHERE excluded.until > github_marks.until`,
			m.Scope, m.Kind, ts(m.Until), m.Note)
		if err != nil {
			return fmt.Errorf("sqlite: put github mark: %w", err)
		}
		return nil
	})
}

// DeleteGitHubMark removes a mark.
func (s *Store) DeleteGitHubMark(ctx context.Context, scope, kind string) error {
	return s.write(ctx, "sqlite: delete github mark "+scope+" "+kind, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM github_marks WHERE scope = ? AND kind = ?`, scope, kind); err != nil {
			return fmt.Errorf("sqlite: delete github mark: %w", err)
		}
		return nil
	})
}
