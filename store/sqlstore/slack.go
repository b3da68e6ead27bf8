package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// Slack (store/slack.go): three tables, slack_events (the ids of the
// events processed), slack_threads (a session's thread) and
// slack_channels (a channel's default repository).

// AddSlackEvent records an event id; one recorded before is ErrConflict.
func (s *Store) AddSlackEvent(ctx context.Context, id string, at time.Time) error {
	if id == "" {
		return s.errorf("add slack event: the id must not be empty")
	}
	if at.IsZero() {
		at = s.now()
	}
	return s.write(ctx, "add slack event "+id, func(tx Querier) error {
		_, err := tx.Exec(ctx, `INSERT INTO slack_events (id, received_at) VALUES (?, ?)`, id, s.d.Time(at))
		if s.d.IsDuplicate(err) {
			return fmt.Errorf("slack event %s was received before: %w", id, store.ErrConflict)
		}
		if err != nil {
			return s.errorf("add slack event %s: %w", id, err)
		}
		return nil
	})
}

// PruneSlackEvents forgets the ids received before t (a pending
// event's is kept until it is done).
func (s *Store) PruneSlackEvents(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.write(ctx, "prune slack events", func(tx Querier) error {
		var err error
		if n, err = tx.Exec(ctx, `DELETE FROM slack_events WHERE received_at < ? AND payload IS NULL`, s.d.Time(before)); err != nil {
			return s.errorf("prune slack events: %w", err)
		}
		return nil
	})
	return int(n), err
}

// PutSlackThread records a session's thread; a second is ErrConflict.
func (s *Store) PutSlackThread(ctx context.Context, t *store.SlackThread) error {
	if t.Session == "" || t.Channel == "" || t.ThreadTS == "" {
		return s.errorf("put slack thread: session, channel and thread ts must not be empty")
	}
	c := *t
	if c.CreatedAt.IsZero() {
		c.CreatedAt = s.now()
	}
	err := s.write(ctx, "put slack thread "+t.Session, func(tx Querier) error {
		_, err := tx.Exec(ctx, `INSERT INTO slack_threads (`+slackThreadCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			c.Session, c.Team, c.Channel, c.ThreadTS, c.User, c.Shown, c.Turn, c.ProgressTS, c.TriggerTS, s.d.Time(c.CreatedAt))
		if s.d.IsDuplicate(err) {
			return fmt.Errorf("session %s has a slack thread: %w", c.Session, store.ErrConflict)
		}
		if err != nil {
			return s.errorf("put slack thread %s: %w", c.Session, err)
		}
		return nil
	})
	if err == nil {
		*t = c
	}
	return err
}

// SetSlackThreadShown records a thread's Shown, never lowering it.
func (s *Store) SetSlackThreadShown(ctx context.Context, session string, seq int64) error {
	return s.write(ctx, "set slack thread shown "+session, func(tx Querier) error {
		var n int64
		err := tx.QueryRow(ctx, `SELECT count(*) FROM slack_threads WHERE session_id = ?`, session).Scan(&n)
		if err != nil {
			return s.errorf("set slack thread shown %s: %w", session, err)
		}
		if n == 0 {
			return fmt.Errorf("slack thread of session %s: %w", session, store.ErrNotFound)
		}
		if _, err := tx.Exec(ctx, `UPDATE slack_threads SET shown = ? WHERE session_id = ? AND shown < ?`, seq, session, seq); err != nil {
			return s.errorf("set slack thread shown %s: %w", session, err)
		}
		return nil
	})
}

// SetSlackThreadTurn records the turn a thread's progress message shows,
// that message's ts and the ts of the message that asked.
func (s *Store) SetSlackThreadTurn(ctx context.Context, session, turn, progressTS, triggerTS string) error {
	return s.write(ctx, "set slack thread turn "+session, func(tx Querier) error {
		n, err := tx.Exec(ctx, `UPDATE slack_threads SET turn = ?, progress_ts = ?, trigger_ts = ? WHERE session_id = ?`, turn, progressTS, triggerTS, session)
		if err != nil {
			return s.errorf("set slack thread turn %s: %w", session, err)
		}
		if n == 0 {
			return fmt.Errorf("slack thread of session %s: %w", session, store.ErrNotFound)
		}
		return nil
	})
}

// slackThreadCols are slack_threads' columns, in the order
// store.SlackThread's scans read them.
const slackThreadCols = `session_id, team, channel, thread_ts, slack_user, shown, turn, progress_ts, trigger_ts, created_at`

// SlackThread reads a session's thread.
func (s *Store) SlackThread(ctx context.Context, session string) (*store.SlackThread, error) {
	var (
		t       store.SlackThread
		created Time
	)
	err := s.reader().QueryRow(ctx, `SELECT `+slackThreadCols+` FROM slack_threads WHERE session_id = ?`, session).
		Scan(&t.Session, &t.Team, &t.Channel, &t.ThreadTS, &t.User, &t.Shown, &t.Turn, &t.ProgressTS, &t.TriggerTS, &created)
	if isNoRows(err) {
		return nil, fmt.Errorf("slack thread of session %s: %w", session, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("slack thread of session %s: %w", session, err)
	}
	t.CreatedAt = created.T
	return &t, nil
}

// SetSlackChannel records or replaces a channel's default repository.
func (s *Store) SetSlackChannel(ctx context.Context, c *store.SlackChannel) error {
	if c.Channel == "" || c.Repo == "" {
		return s.errorf("set slack channel: channel and repo must not be empty")
	}
	v := *c
	v.UpdatedAt = s.now()
	err := s.write(ctx, "set slack channel "+c.Channel, func(tx Querier) error {
		_, err := tx.Exec(ctx, `INSERT INTO slack_channels (team, channel, repo, set_by, updated_at) VALUES (?, ?, ?, ?, ?)
	ON CONFLICT (team, channel) DO UPDATE SET repo = excluded.repo, set_by = excluded.set_by, updated_at = excluded.updated_at`,
			v.Team, v.Channel, v.Repo, v.SetBy, s.d.Time(v.UpdatedAt))
		if err != nil {
			return s.errorf("set slack channel %s: %w", v.Channel, err)
		}
		return nil
	})
	if err == nil {
		*c = v
	}
	return err
}

// SlackChannel reads a channel's default repository.
func (s *Store) SlackChannel(ctx context.Context, team, channel string) (*store.SlackChannel, error) {
	var (
		c       store.SlackChannel
		updated Time
	)
	err := s.reader().QueryRow(ctx, `SELECT team, channel, repo, set_by, updated_at FROM slack_channels WHERE team = ? AND channel = ?`, team, channel).
		Scan(&c.Team, &c.Channel, &c.Repo, &c.SetBy, &updated)
	if isNoRows(err) {
		return nil, fmt.Errorf("slack channel %s: %w", channel, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("slack channel %s: %w", channel, err)
	}
	c.UpdatedAt = updated.T
	return &c, nil
}

// DumpSlackEvents lists the event ids recorded, by id.
func (s *Store) DumpSlackEvents(ctx context.Context) ([]store.SlackEvent, error) {
	rows, err := s.reader().Query(ctx, `SELECT id, received_at, payload FROM slack_events ORDER BY id`)
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
		return nil, s.errorf("dump slack events: %w", err)
	}
	return values(out), nil
}

// DumpSlackThreads lists every thread, by session.
func (s *Store) DumpSlackThreads(ctx context.Context) ([]*store.SlackThread, error) {
	rows, err := s.reader().Query(ctx, `SELECT `+slackThreadCols+` FROM slack_threads ORDER BY session_id`)
	out, err := collect(rows, err, func(r Row) (*store.SlackThread, error) {
		var (
			t       store.SlackThread
			created Time
		)
		err := r.Scan(&t.Session, &t.Team, &t.Channel, &t.ThreadTS, &t.User, &t.Shown, &t.Turn, &t.ProgressTS, &t.TriggerTS, &created)
		t.CreatedAt = created.T
		return &t, err
	})
	if err != nil {
		return nil, s.errorf("dump slack threads: %w", err)
	}
	return out, nil
}

// DumpSlackChannels lists every channel's default repository, by team
// then channel.
func (s *Store) DumpSlackChannels(ctx context.Context) ([]*store.SlackChannel, error) {
	rows, err := s.reader().Query(ctx, `SELECT team, channel, repo, set_by, updated_at FROM slack_channels ORDER BY team, channel`)
	out, err := collect(rows, err, func(r Row) (*store.SlackChannel, error) {
		var (
			c       store.SlackChannel
			updated Time
		)
		err := r.Scan(&c.Team, &c.Channel, &c.Repo, &c.SetBy, &updated)
		c.UpdatedAt = updated.T
		return &c, err
	})
	if err != nil {
		return nil, s.errorf("dump slack channels: %w", err)
	}
	return out, nil
}

// LoadSlackChannel stores c as it is.
func (s *Store) LoadSlackChannel(ctx context.Context, c *store.SlackChannel) error {
	what := "slack channel " + c.Team + " " + c.Channel
	if c.Channel == "" || c.Repo == "" || c.UpdatedAt.IsZero() {
		return s.errorf("load %s: channel, repo and updated_at must be set", what)
	}
	return s.write(ctx, "load "+what, func(tx Querier) error {
		_, err := tx.Exec(ctx, `INSERT INTO slack_channels (team, channel, repo, set_by, updated_at) VALUES (?, ?, ?, ?, ?)`,
			c.Team, c.Channel, c.Repo, c.SetBy, s.d.Time(c.UpdatedAt))
		return s.Loaded(what, err)
	})
}
