package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
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

func insertMessage(ctx context.Context, tx *sql.Tx, m *store.Message) error {
	if m.ID == "" {
		return fmt.Errorf("sqlite: add message to session %s: empty message id", m.Session)
	}
	if m.Key == "" && (m.KeyOwner != "" || len(m.RequestHash) > 0) {
		return fmt.Errorf("sqlite: add message %s to session %s: a key owner or request hash without a key", m.ID, m.Session)
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO messages (session, seq, id, text, mode, state, turn, created_at, delivered_at, key_owner, idem_key, request_hash)
	VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`, m.Session, m.Seq, m.ID, m.Text, m.Mode, string(m.State), m.Turn, ts(m.CreatedAt), ts(m.DeliveredAt), m.KeyOwner, m.Key, m.RequestHash)
	if isDuplicate(err) {
		return fmt.Errorf("sqlite: add message %s to session %s: a message with this id, or with idempotency key %q of %q, exists: %w", m.ID, m.Session, m.Key, m.KeyOwner, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("sqlite: add message %s to session %s: %w", m.ID, m.Session, err)
	}
	return nil
}

// AddMessage stores m with the session's next Seq (set on m). A zero
// CreatedAt is set to now, an empty State to queued. A missing session is
// ErrNotFound; a message id (or idempotency key) the session already has
// is ErrConflict.
func (s *Store) AddMessage(ctx context.Context, m *store.Message) error {
	c := *m
	defaultMessage(&c, s.now().UTC())
	err := s.write(ctx, "sqlite: add message to session "+m.Session, func(tx *sql.Tx) error {
		return addMessage(ctx, tx, &c)
	})
	if err == nil {
		*m = c
	}
	return err
}

// addMessage inserts m (defaulted) with the session's next Seq, set on m.
func addMessage(ctx context.Context, tx *sql.Tx, c *store.Message) error {
	var exists int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = ?`, c.Session).Scan(&exists)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("session %s: %w", c.Session, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("sqlite: add message to session %s: %w", c.Session, err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session = ?`, c.Session).Scan(&c.Seq); err != nil {
		return fmt.Errorf("sqlite: add message to session %s: %w", c.Session, err)
	}
	return insertMessage(ctx, tx, c)
}

const messageCols = `session, seq, id, text, mode, state, turn, created_at, delivered_at, key_owner, idem_key, request_hash`

// Messages lists a session's messages in Seq order, only those in states
// (all when none are given). A session without messages (or that does not
// exist) has none: the result is empty, not ErrNotFound.
func (s *Store) Messages(ctx context.Context, session string, states ...store.MessageState) ([]*store.Message, error) {
	q := `SELECT ` + messageCols + ` FROM messages WHERE session = ?`
	args := []any{session}
	if len(states) > 0 {
		q += " AND state IN (?" + strings.Repeat(",?", len(states)-1) + ")"
		for _, st := range states {
			args = append(args, string(st))
		}
	}
	rows, err := s.r.QueryContext(ctx, q+" ORDER BY seq", args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: messages of session %s: %w", session, err)
	}
	defer rows.Close()
	var out []*store.Message
	for rows.Next() {
		m, err := scanMessage(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: messages of session %s: %w", session, err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: messages of session %s: %w", session, err)
	}
	return out, nil
}

func scanMessage(row interface{ Scan(...any) error }) (*store.Message, error) {
	var (
		m                  store.Message
		state              string
		created, delivered int64
	)
	if err := row.Scan(&m.Session, &m.Seq, &m.ID, &m.Text, &m.Mode, &state, &m.Turn, &created, &delivered, &m.KeyOwner, &m.Key, &m.RequestHash); err != nil {
		return nil, err
	}
	m.State, m.CreatedAt, m.DeliveredAt = store.MessageState(state), tm(created), tm(delivered)
	return &m, nil
}

// MessageByKey finds the message of session that owner sent with the
// idempotency key; ErrNotFound when there is none.
func (s *Store) MessageByKey(ctx context.Context, session, owner, key string) (*store.Message, error) {
	if key == "" {
		return nil, fmt.Errorf("sqlite: message by key of session %s: empty key", session)
	}
	m, err := scanMessage(s.r.QueryRowContext(ctx, `SELECT `+messageCols+` FROM messages WHERE session = ? AND key_owner = ? AND idem_key = ?`, session, owner, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("message of session %s with idempotency key %q: %w", session, key, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: message by key of session %s: %w", session, err)
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
	var delivered int64
	if state == store.MessageDelivered {
		delivered = ts(s.now())
	}
	return s.write(ctx, "sqlite: set state of message "+id, func(tx *sql.Tx) error {
		if f != nil {
			if err := checkFence(ctx, tx, *f, ""); err != nil {
				return fmt.Errorf("sqlite: set state of message %s: %w", id, err)
			}
		}
		res, err := tx.ExecContext(ctx, `UPDATE messages SET state = ?, turn = ?,
	delivered_at = CASE WHEN ? <> 0 THEN ? ELSE delivered_at END
	WHERE session = ? AND id = ?`, string(state), turn, delivered, delivered, session, id)
		if err != nil {
			return fmt.Errorf("sqlite: set state of message %s of session %s: %w", id, session, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("message %s of session %s: %w", id, session, store.ErrNotFound)
		}
		return nil
	})
}
