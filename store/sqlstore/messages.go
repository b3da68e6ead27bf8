package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/harvest-dev/harvest/store"
)

func defaultMessage(m *store.Message, now time.Time) {
	if m.State == "" {
		m.State = store.MessageQueued
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = now
	}
}

const messageCols = `session, seq, id, text, mode, state, turn, created_at, delivered_at, key_owner, idem_key, request_hash`

func (s *Store) insertMessage(ctx context.Context, tx Querier, m *store.Message) error {
	if m.ID == "" {
		return s.errorf("add message to session %s: empty message id", m.Session)
	}
	if m.Key == "" && (m.KeyOwner != "" || len(m.RequestHash) > 0) {
		return s.errorf("add message %s to session %s: a key owner or request hash without a key", m.ID, m.Session)
	}
	_, err := tx.Exec(ctx, `INSERT INTO messages (`+messageCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		m.Session, m.Seq, m.ID, m.Text, m.Mode, string(m.State), m.Turn, s.d.Time(m.CreatedAt), s.d.Time(m.DeliveredAt), m.KeyOwner, m.Key, m.RequestHash)
	switch {
	case s.d.IsDuplicate(err):
		return s.errorf("add message %s to session %s: a message with this id, or with idempotency key %q of %q, exists: %w", m.ID, m.Session, m.Key, m.KeyOwner, store.ErrConflict)
	case s.d.IsMissingParent(err):
		return fmt.Errorf("session %s: %w", m.Session, store.ErrNotFound)
	case err != nil:
		return s.errorf("add message %s to session %s: %w", m.ID, m.Session, err)
	}
	return nil
}

// AddMessage stores m with the session's next Seq (set on m). A zero
// CreatedAt is set to now, an empty State to queued. A missing session is
// ErrNotFound; a message id (or idempotency key) the session already has
// is ErrConflict.
func (s *Store) AddMessage(ctx context.Context, m *store.Message) error {
	c := *m
	defaultMessage(&c, s.now())
	err := s.write(ctx, "add message to session "+m.Session, func(tx Querier) error {
		if err := s.lockSessions(ctx, tx, []string{c.Session}); err != nil {
			return s.errorf("add message to session %s: %w", c.Session, err)
		}
		return s.addMessage(ctx, tx, &c)
	})
	if err == nil {
		*m = c
	}
	return err
}

// lockSessions locks the rows of sessions (sorted, so two transactions
// take them in the same order; PostgreSQL: FOR NO KEY UPDATE, SQLite: its
// one writer): whoever assigns a session's next message seq holds it until
// commit, so the next one to read MAX(seq) — a new statement, hence (READ
// COMMITTED) a new snapshot — sees the row the last one inserted. A
// missing session is ErrNotFound.
func (s *Store) lockSessions(ctx context.Context, tx Querier, ids []string) error {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	rows, err := tx.Query(ctx, `SELECT id FROM sessions WHERE id IN `+in(len(ids))+` ORDER BY id`+s.d.Lock(LockNoKeyUpdate),
		appendStrings(nil, ids)...)
	found, err := collect(rows, err, func(r Row) (*string, error) {
		var id string
		return &id, r.Scan(&id)
	})
	if err != nil {
		return err
	}
	have := make(map[string]bool, len(found))
	for _, id := range found {
		have[*id] = true
	}
	for _, id := range ids {
		if !have[id] {
			return fmt.Errorf("session %s: %w", id, store.ErrNotFound)
		}
	}
	return nil
}

// addMessage inserts c (defaulted) with its session's next Seq, set on c.
// The caller holds the session's row lock (lockSessions).
func (s *Store) addMessage(ctx context.Context, tx Querier, c *store.Message) error {
	if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session = ?`, c.Session).Scan(&c.Seq); err != nil {
		return s.errorf("add message to session %s: %w", c.Session, err)
	}
	return s.insertMessage(ctx, tx, c)
}

// Messages lists a session's messages in Seq order, only those in states
// (all when none are given). A session without messages (or that does not
// exist) has none: the result is empty, not ErrNotFound.
func (s *Store) Messages(ctx context.Context, session string, states ...store.MessageState) ([]*store.Message, error) {
	q := `SELECT ` + messageCols + ` FROM messages WHERE session = ?`
	args := []any{session}
	if len(states) > 0 {
		q += ` AND state IN ` + in(len(states))
		for _, st := range states {
			args = append(args, string(st))
		}
	}
	rows, err := s.reader().Query(ctx, q+` ORDER BY seq`, args...)
	out, err := collect(rows, err, scanMessage)
	if err != nil {
		return nil, s.errorf("messages of session %s: %w", session, err)
	}
	return out, nil
}

func scanMessage(row Row) (*store.Message, error) {
	var (
		m                  store.Message
		state              string
		created, delivered Time
	)
	if err := row.Scan(&m.Session, &m.Seq, &m.ID, &m.Text, &m.Mode, &state, &m.Turn, &created, &delivered, &m.KeyOwner, &m.Key, &m.RequestHash); err != nil {
		return nil, err
	}
	m.State, m.CreatedAt, m.DeliveredAt = store.MessageState(state), created.T, delivered.T
	return &m, nil
}

// MessageByKey finds the message of session that owner sent with the
// idempotency key; ErrNotFound when there is none.
func (s *Store) MessageByKey(ctx context.Context, session, owner, key string) (*store.Message, error) {
	if key == "" {
		return nil, s.errorf("message by key of session %s: empty key", session)
	}
	m, err := scanMessage(s.reader().QueryRow(ctx, `SELECT `+messageCols+` FROM messages WHERE session = ? AND key_owner = ? AND idem_key = ?`, session, owner, key))
	if isNoRows(err) {
		return nil, fmt.Errorf("message of session %s with idempotency key %q: %w", session, key, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("message by key of session %s: %w", session, err)
	}
	return m, nil
}

// SetMessageState moves a message to state and records turn. Moving to
// delivered sets DeliveredAt to now. A missing message is ErrNotFound.
func (s *Store) SetMessageState(ctx context.Context, session, id string, state store.MessageState, turn string) error {
	return s.setMessageState(ctx, session, id, state, turn, nil)
}

// setMessageState is SetMessageState, first checking f (nil: not fenced)
// in its transaction.
func (s *Store) setMessageState(ctx context.Context, session, id string, state store.MessageState, turn string, f *store.Fence) error {
	q, args := `UPDATE messages SET state = ?, turn = ?`, []any{string(state), turn}
	if state == store.MessageDelivered {
		q, args = q+`, delivered_at = ?`, append(args, s.d.Time(s.now()))
	}
	return s.write(ctx, "set state of message "+id, func(tx Querier) error {
		if f != nil {
			if err := s.checkFences(ctx, tx, []store.Fence{*f}); err != nil {
				return s.errorf("set state of message %s: %w", id, err)
			}
		}
		n, err := tx.Exec(ctx, q+` WHERE session = ? AND id = ?`, append(args, session, id)...)
		if err != nil {
			return s.errorf("set state of message %s of session %s: %w", id, session, err)
		}
		if n == 0 {
			return fmt.Errorf("message %s of session %s: %w", id, session, store.ErrNotFound)
		}
		return nil
	})
}
