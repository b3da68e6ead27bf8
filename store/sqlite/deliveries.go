package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/harvest-dev/harvest/store"
)

const deliveryCols = `id, event, payload, received_at, state, attempts, result, done_at`

func scanDelivery(r scanner) (*store.Delivery, error) {
	var (
		d              store.Delivery
		received, done int64
	)
	if err := r.Scan(&d.ID, &d.Event, &d.Payload, &received, &d.State, &d.Attempts, &d.Result, &done); err != nil {
		return nil, err
	}
	d.ReceivedAt = tm(received)
	if done != 0 {
		d.DoneAt = tm(done)
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
		_, err := tx.ExecContext(ctx, `INSERT INTO deliveries (`+deliveryCols+`) VALUES (?,?,?,?,?,0,'',0)`,
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
