package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// Slack events kept until done (store/slack_inbox.go): slack_events'
// payload column, NULL once done.

// AddSlackEventPending records an event id with its payload, pending;
// one recorded before is ErrConflict.
func (s *Store) AddSlackEventPending(ctx context.Context, id string, payload []byte, at time.Time) error {
	if id == "" || len(payload) == 0 {
		return s.errorf("add pending slack event: the id and the payload must not be empty")
	}
	if at.IsZero() {
		at = s.now()
	}
	return s.write(ctx, "add pending slack event "+id, func(tx Querier) error {
		_, err := tx.Exec(ctx, `INSERT INTO slack_events (id, received_at, payload) VALUES (?, ?, ?)`, id, s.d.Time(at), payload)
		if s.d.IsDuplicate(err) {
			return fmt.Errorf("slack event %s was received before: %w", id, store.ErrConflict)
		}
		if err != nil {
			return s.errorf("add pending slack event %s: %w", id, err)
		}
		return nil
	})
}

// SlackEventDone drops an event's payload.
func (s *Store) SlackEventDone(ctx context.Context, id string) error {
	return s.write(ctx, "slack event done "+id, func(tx Querier) error {
		if _, err := tx.Exec(ctx, `UPDATE slack_events SET payload = NULL WHERE id = ? AND payload IS NOT NULL`, id); err != nil {
			return s.errorf("slack event %s done: %w", id, err)
		}
		return nil
	})
}

// PendingSlackEvents lists the events with a payload, oldest first.
func (s *Store) PendingSlackEvents(ctx context.Context) ([]store.SlackEvent, error) {
	rows, err := s.reader().Query(ctx, `SELECT id, received_at, payload FROM slack_events WHERE payload IS NOT NULL ORDER BY received_at, id`)
	out, err := collect(rows, err, func(r Row) (*store.SlackEvent, error) {
		var (
			e  store.SlackEvent
			at Time
		)
		err := r.Scan(&e.ID, &at, &e.Payload)
		e.ReceivedAt = at.T
		return &e, err
	})
	if err != nil {
		return nil, s.errorf("pending slack events: %w", err)
	}
	return values(out), nil
}
