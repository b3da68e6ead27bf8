package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-dev/harvest/store"
)

const deliveryCols = `id, event, payload, received_at, state, attempts, result, done_at, not_before, replays`

func scanDelivery(r scanner) (*store.Delivery, error) {
	var (
		d               store.Delivery
		received        time.Time
		done, notBefore *time.Time
	)
	if err := r.Scan(&d.ID, &d.Event, &d.Payload, &received, &d.State, &d.Attempts, &d.Result, &done, &notBefore, &d.Replays); err != nil {
		return nil, err
	}
	d.ReceivedAt, d.DoneAt, d.NotBefore = received.UTC(), tm(done), tm(notBefore)
	return &d, nil
}

// AddDelivery stores d as pending; an id already stored is ErrConflict.
func (s *Store) AddDelivery(ctx context.Context, d *store.Delivery) error {
	if d.ID == "" || d.Event == "" {
		return errors.New("postgres: add delivery: id and event must not be empty")
	}
	c := *d
	if c.ReceivedAt.IsZero() {
		c.ReceivedAt = s.now()
	}
	c.State, c.Attempts, c.Result, c.DoneAt = store.DeliveryPending, 0, "", time.Time{}
	if c.Payload == nil {
		c.Payload = []byte{}
	}
	err := s.write(ctx, "add delivery "+d.ID, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO deliveries (id, event, payload, received_at, state) VALUES ($1, $2, $3, $4, $5)`,
			c.ID, c.Event, c.Payload, c.ReceivedAt, c.State)
		if isDuplicate(err) {
			return fmt.Errorf("postgres: delivery %s was received before: %w", c.ID, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("postgres: add delivery %s: %w", c.ID, err)
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
	var lim any // NULL: no limit
	if limit > 0 {
		lim = int64(limit)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryCols+` FROM deliveries WHERE state = 'pending' ORDER BY received_at, id LIMIT $1`, lim)
	if err != nil {
		return nil, fmt.Errorf("postgres: pending deliveries: %w", err)
	}
	out, err := collect(rows, scanDelivery)
	if err != nil {
		return nil, fmt.Errorf("postgres: pending deliveries: %w", err)
	}
	return out, nil
}

// notPending explains why a delivery was not updated as a pending one:
// it does not exist (ErrNotFound) or is no longer pending (ErrConflict).
func notPending(ctx context.Context, tx pgx.Tx, id string) error {
	var state string
	err := tx.QueryRow(ctx, `SELECT state FROM deliveries WHERE id = $1`, id).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("delivery %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("postgres: delivery %s: %w", id, err)
	}
	return fmt.Errorf("delivery %s is %s: %w", id, state, store.ErrConflict)
}

// BeginDelivery counts an attempt at a pending delivery and returns it;
// one no longer pending is ErrConflict.
func (s *Store) BeginDelivery(ctx context.Context, id string) (*store.Delivery, error) {
	var out *store.Delivery
	err := s.write(ctx, "begin delivery "+id, func(tx pgx.Tx) error {
		d, err := scanDelivery(tx.QueryRow(ctx, `UPDATE deliveries SET attempts = attempts + 1 WHERE id = $1 AND state = 'pending'
	RETURNING `+deliveryCols, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return notPending(ctx, tx, id)
		}
		if err != nil {
			return fmt.Errorf("postgres: begin delivery %s: %w", id, err)
		}
		out = d
		return nil
	})
	return out, err
}

// FinishDelivery records a pending delivery's end.
func (s *Store) FinishDelivery(ctx context.Context, id, state, result string) error {
	if state != store.DeliveryDone && state != store.DeliveryFailed {
		return fmt.Errorf("postgres: finish delivery %s: state %q: want done or failed", id, state)
	}
	return s.write(ctx, "finish delivery "+id, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE deliveries SET state = $1, result = $2, done_at = $3 WHERE id = $4 AND state = 'pending'`,
			state, result, s.now(), id)
		if err != nil {
			return fmt.Errorf("postgres: finish delivery %s: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return notPending(ctx, tx, id)
		}
		return nil
	})
}

// GetDelivery reads a delivery, or ErrNotFound.
func (s *Store) GetDelivery(ctx context.Context, id string) (*store.Delivery, error) {
	d, err := scanDelivery(s.pool.QueryRow(ctx, `SELECT `+deliveryCols+` FROM deliveries WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("delivery %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get delivery %s: %w", id, err)
	}
	return d, nil
}

// PruneDeliveries deletes finished deliveries received before t and
// returns how many.
func (s *Store) PruneDeliveries(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.write(ctx, "prune deliveries", func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM deliveries WHERE state <> 'pending' AND received_at < $1`, before)
		if err != nil {
			return fmt.Errorf("postgres: prune deliveries: %w", err)
		}
		n = tag.RowsAffected()
		return nil
	})
	return int(n), err
}

// RetryDelivery makes a pending delivery due at notBefore, with why.
func (s *Store) RetryDelivery(ctx context.Context, id string, notBefore time.Time, why string) error {
	return s.postpone(ctx, "retry", `UPDATE deliveries SET not_before = $1, result = $2 WHERE id = $3 AND state = 'pending'`, id, ts(notBefore), why, id)
}

// DeferDelivery makes a pending delivery due at notBefore and gives back
// the attempt begun.
func (s *Store) DeferDelivery(ctx context.Context, id string, notBefore time.Time, why string) error {
	return s.postpone(ctx, "defer", `UPDATE deliveries SET not_before = $1, result = $2, attempts = GREATEST(attempts - 1, 0) WHERE id = $3 AND state = 'pending'`, id, ts(notBefore), why, id)
}

func (s *Store) postpone(ctx context.Context, verb, q, id string, args ...any) error {
	return s.write(ctx, verb+" delivery "+id, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("postgres: %s delivery %s: %w", verb, id, err)
		}
		if tag.RowsAffected() == 0 {
			return notPending(ctx, tx, id)
		}
		return nil
	})
}

// ReplayDelivery makes a failed delivery pending again.
func (s *Store) ReplayDelivery(ctx context.Context, id string) (*store.Delivery, error) {
	var out *store.Delivery
	err := s.write(ctx, "replay delivery "+id, func(tx pgx.Tx) error {
		d, err := scanDelivery(tx.QueryRow(ctx, `UPDATE deliveries SET state = 'pending', attempts = 0, not_before = NULL, done_at = NULL,
	replays = replays + 1, result = 'replayed; it had failed: ' || result WHERE id = $1 AND state = 'failed' RETURNING `+deliveryCols, id))
		if errors.Is(err, pgx.ErrNoRows) {
			var state string
			err := tx.QueryRow(ctx, `SELECT state FROM deliveries WHERE id = $1`, id).Scan(&state)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("delivery %s: %w", id, store.ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("postgres: replay delivery %s: %w", id, err)
			}
			return fmt.Errorf("delivery %s is %s, not failed: only a failed delivery is replayed: %w", id, state, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("postgres: replay delivery %s: %w", id, err)
		}
		out = d
		return nil
	})
	return out, err
}

// ListDeliveries lists deliveries, newest first.
func (s *Store) ListDeliveries(ctx context.Context, f store.DeliveryFilter) ([]*store.Delivery, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryCols+` FROM deliveries WHERE ($1 = '' OR state = $1) ORDER BY received_at DESC, id DESC LIMIT $2`, f.State, int64(limit))
	if err != nil {
		return nil, fmt.Errorf("postgres: list deliveries: %w", err)
	}
	out, err := collect(rows, scanDelivery)
	if err != nil {
		return nil, fmt.Errorf("postgres: list deliveries: %w", err)
	}
	return out, nil
}

// GitHubMarks lists scope's marks not yet ended.
func (s *Store) GitHubMarks(ctx context.Context, scope string) ([]store.GitHubMark, error) {
	rows, err := s.pool.Query(ctx, `SELECT scope, kind, until, note FROM github_marks WHERE scope = $1 AND until > $2 ORDER BY kind`, scope, s.now())
	if err != nil {
		return nil, fmt.Errorf("postgres: github marks of %s: %w", scope, err)
	}
	ms, err := collect(rows, func(r scanner) (*store.GitHubMark, error) {
		var m store.GitHubMark
		err := r.Scan(&m.Scope, &m.Kind, &m.Until, &m.Note)
		m.Until = m.Until.UTC()
		return &m, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: github marks of %s: %w", scope, err)
	}
	out := make([]store.GitHubMark, len(ms))
	for i, m := range ms {
		out[i] = *m
	}
	return out, nil
}

// PutGitHubMark records m, keeping a later one.
func (s *Store) PutGitHubMark(ctx context.Context, m store.GitHubMark) error {
	if m.Scope == "" || m.Kind == "" {
		return errors.New("postgres: put github mark: scope and kind must not be empty")
	}
	return s.write(ctx, "put github mark "+m.Scope+" "+m.Kind, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM github_marks WHERE scope = $1 AND until <= $2`, m.Scope, s.now()); err != nil {
			return fmt.Errorf("postgres: put github mark: %w", err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO github_marks (scope, kind, until, note) VALUES ($1, $2, $3, $4)
	ON CONFLICT (scope, kind) DO UPDATE SET until = excluded.until, note = excluded.note WHERE excluded.until > github_marks.until`,
			m.Scope, m.Kind, m.Until, m.Note)
		if err != nil {
			return fmt.Errorf("postgres: put github mark: %w", err)
		}
		return nil
	})
}

// DeleteGitHubMark removes a mark.
func (s *Store) DeleteGitHubMark(ctx context.Context, scope, kind string) error {
	return s.write(ctx, "delete github mark "+scope+" "+kind, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM github_marks WHERE scope = $1 AND kind = $2`, scope, kind); err != nil {
			return fmt.Errorf("postgres: delete github mark: %w", err)
		}
		return nil
	})
}
