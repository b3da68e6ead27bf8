package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

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

func insertMessage(ctx context.Context, tx pgx.Tx, m *store.Message) error {
	if m.ID == "" {
		return fmt.Errorf("postgres: add message to session %s: empty message id", m.Session)
	}
	if m.Key == "" && (m.KeyOwner != "" || len(m.RequestHash) > 0) {
		return fmt.Errorf("postgres: add message %s to session %s: a key owner or request hash without a key", m.ID, m.Session)
	}
	_, err := tx.Exec(ctx, `INSERT INTO messages (`+messageCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		m.Session, m.Seq, m.ID, m.Text, m.Mode, string(m.State), m.Turn, ts(m.CreatedAt), ts(m.DeliveredAt), m.KeyOwner, m.Key, m.RequestHash)
	switch {
	case isDuplicate(err):
		return fmt.Errorf("postgres: add message %s to session %s: a message with this id, or with idempotency key %q of %q, exists: %w", m.ID, m.Session, m.Key, m.KeyOwner, store.ErrConflict)
	case isMissingParent(err):
		return fmt.Errorf("session %s: %w", m.Session, store.ErrNotFound)
	case err != nil:
		return fmt.Errorf("postgres: add message %s to session %s: %w", m.ID, m.Session, err)
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
	err := s.write(ctx, "add message to session "+m.Session, func(tx pgx.Tx) error {
		if err := lockSessions(ctx, tx, []string{c.Session}); err != nil {
			return fmt.Errorf("postgres: add message to session %s: %w", c.Session, err)
		}
		return addMessage(ctx, tx, &c)
	})
	if err == nil {
		*m = c
	}
	return err
}

// lockSessions locks the rows of sessions (sorted, so two transactions
// take them in the same order), FOR NO KEY UPDATE: whoever assigns a
// session's next message seq holds it until commit, so the next one to
// read MAX(seq) — a new statement, hence (READ COMMITTED) a new snapshot —
// sees the row the last one inserted. A missing session is ErrNotFound.
func lockSessions(ctx context.Context, tx pgx.Tx, ids []string) error {
	rows, err := tx.Query(ctx, `SELECT id FROM sessions WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE`, ids)
	if err != nil {
		return err
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	have := make(map[string]bool, len(found))
	for _, id := range found {
		have[id] = true
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
func addMessage(ctx context.Context, tx pgx.Tx, c *store.Message) error {
	if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session = $1`, c.Session).Scan(&c.Seq); err != nil {
		return fmt.Errorf("postgres: add message to session %s: %w", c.Session, err)
	}
	return insertMessage(ctx, tx, c)
}

// Messages lists a session's messages in Seq order, only those in states
// (all when none are given). A session without messages (or that does not
// exist) has none: the result is empty, not ErrNotFound.
func (s *Store) Messages(ctx context.Context, session string, states ...store.MessageState) ([]*store.Message, error) {
	q := `SELECT ` + messageCols + ` FROM messages WHERE session = $1`
	args := []any{session}
	if len(states) > 0 {
		ss := make([]string, len(states))
		for i, st := range states {
			ss[i] = string(st)
		}
		q += ` AND state = ANY($2)`
		args = append(args, ss)
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY seq`, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: messages of session %s: %w", session, err)
	}
	out, err := collect(rows, scanMessage)
	if err != nil {
		return nil, fmt.Errorf("postgres: messages of session %s: %w", session, err)
	}
	return out, nil
}

func scanMessage(row scanner) (*store.Message, error) {
	var (
		m                  store.Message
		state              string
		created, delivered *time.Time
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
		return nil, fmt.Errorf("postgres: message by key of session %s: empty key", session)
	}
	m, err := scanMessage(s.pool.QueryRow(ctx, `SELECT `+messageCols+` FROM messages WHERE session = $1 AND key_owner = $2 AND idem_key = $3`, session, owner, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("message of session %s with idempotency key %q: %w", session, key, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: message by key of session %s: %w", session, err)
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
	var delivered any
	if state == store.MessageDelivered {
		delivered = s.now()
	}
	return s.write(ctx, "set state of message "+id, func(tx pgx.Tx) error {
		if f != nil {
			if err := checkFences(ctx, tx, []store.Fence{*f}); err != nil {
				return fmt.Errorf("postgres: set state of message %s: %w", id, err)
			}
		}
		tag, err := tx.Exec(ctx, `UPDATE messages SET state = $1, turn = $2, delivered_at = COALESCE($3, delivered_at)
	WHERE session = $4 AND id = $5`, string(state), turn, delivered, session, id)
		if err != nil {
			return fmt.Errorf("postgres: set state of message %s of session %s: %w", id, session, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("message %s of session %s: %w", id, session, store.ErrNotFound)
		}
		return nil
	})
}
