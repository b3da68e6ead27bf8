package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// AppendEvents stores evs in one transaction: all or none. A seq already
// stored (or repeated in evs) is ErrConflict; a session that does not
// exist is ErrNotFound.
func (s *Store) AppendEvents(ctx context.Context, evs []event.Event) error {
	return s.AppendEventsWith(ctx, evs, nil)
}

// AppendEventsWith stores msgs (as AddMessage does, in order) and evs (as
// AppendEvents does) in one transaction: all or none. Payloads are encoded
// before the transaction starts; the events go in one INSERT of arrays
// (unnest), whatever the batch's size: one round trip. A message is
// written to m only once the transaction committed.
func (s *Store) AppendEventsWith(ctx context.Context, evs []event.Event, msgs []*store.Message) error {
	if len(evs) == 0 && len(msgs) == 0 {
		return nil
	}
	return s.appendEvents(ctx, nil, evs, msgs)
}

// appendEvents is AppendEventsWith, first checking fences (none: not
// fenced) in its transaction.
func (s *Store) appendEvents(ctx context.Context, fences []store.Fence, evs []event.Event, msgs []*store.Message) error {
	cs := make([]store.Message, len(msgs))
	now := s.now()
	var msgSessions []string
	for i, m := range msgs {
		cs[i] = *m
		defaultMessage(&cs[i], now)
		if !slices.Contains(msgSessions, m.Session) {
			msgSessions = append(msgSessions, m.Session)
		}
	}
	cols := eventColumns{
		seq: make([]int64, len(evs)), typ: make([]string, len(evs)), time: make([]pgtype.Timestamptz, len(evs)),
		turn: make([]string, len(evs)), agent: make([]string, len(evs)), repo: make([]string, len(evs)), data: make([][]byte, len(evs)),
	}
	var sessions []string
	type key struct {
		session string
		seq     int64
	}
	seen := make(map[key]bool, len(evs))
	for i, ev := range evs {
		if ev.Session == "" || ev.Seq <= 0 || ev.Data == nil {
			return fmt.Errorf("postgres: append events: event %d (session %q, seq %d) needs a session, a seq > 0 and a payload", i, ev.Session, ev.Seq)
		}
		if seen[key{ev.Session, ev.Seq}] {
			return fmt.Errorf("postgres: append events: seq %d of session %s appears twice in the batch: %w", ev.Seq, ev.Session, store.ErrConflict)
		}
		seen[key{ev.Session, ev.Seq}] = true
		b, err := encode(ev.Data)
		if err != nil {
			return fmt.Errorf("postgres: append events: encoding event %d of session %s (%s): %w", ev.Seq, ev.Session, ev.Type(), err)
		}
		cols.seq[i], cols.typ[i], cols.turn[i], cols.agent[i], cols.repo[i], cols.data[i] = ev.Seq, string(ev.Type()), ev.Turn, ev.Agent, ev.Repo, b
		cols.time[i] = pgtype.Timestamptz{Time: ev.Time, Valid: !ev.Time.IsZero()}
		if !slices.Contains(sessions, ev.Session) {
			sessions = append(sessions, ev.Session)
		}
	}
	err := s.write(ctx, "append events", func(tx pgx.Tx) error {
		if err := checkFences(ctx, tx, fences); err != nil {
			return fmt.Errorf("postgres: append events: %w", err)
		}
		if len(msgSessions) > 0 {
			if err := lockSessions(ctx, tx, msgSessions); err != nil {
				return fmt.Errorf("postgres: append events: %w", err)
			}
		}
		for i := range cs {
			if err := addMessage(ctx, tx, &cs[i]); err != nil {
				return fmt.Errorf("postgres: append events: %w", err)
			}
		}
		if len(evs) == 0 {
			return nil
		}
		sids, err := sessionIDs(ctx, tx, sessions)
		if err != nil {
			return fmt.Errorf("postgres: append events: %w", err)
		}
		cols.sid = make([]int64, len(evs))
		for i, ev := range evs {
			cols.sid[i] = sids[ev.Session]
		}
		_, err = tx.Exec(ctx, `INSERT INTO events (sid, seq, type, time, turn, agent, repo, data)
	SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::timestamptz[], $5::text[], $6::text[], $7::text[], $8::bytea[])`,
			cols.sid, cols.seq, cols.typ, cols.time, cols.turn, cols.agent, cols.repo, cols.data)
		switch {
		case isDuplicate(err):
			return fmt.Errorf("postgres: append events: %w", conflict(err, sids))
		case isMissingParent(err): // deleted since sessionIDs read it
			return fmt.Errorf("postgres: append events: a session of the batch was deleted: %w", store.ErrNotFound)
		case err != nil:
			return fmt.Errorf("postgres: append events: %w", err)
		}
		return nil
	})
	if err == nil {
		for i, m := range msgs {
			*m = cs[i]
		}
	}
	return err
}

// eventColumns are a batch of events as the columns of the INSERT.
type eventColumns struct {
	sid, seq               []int64
	typ, turn, agent, repo []string
	time                   []pgtype.Timestamptz
	data                   [][]byte
}

// sessionIDs maps the sessions' ids to their sids; a missing session is
// ErrNotFound.
func sessionIDs(ctx context.Context, tx pgx.Tx, ids []string) (map[string]int64, error) {
	rows, err := tx.Query(ctx, `SELECT id, sid FROM sessions WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	sids := make(map[string]int64, len(ids))
	for rows.Next() {
		var (
			id  string
			sid int64
		)
		if err := rows.Scan(&id, &sid); err != nil {
			return nil, err
		}
		sids[id] = sid
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, id := range ids {
		if _, ok := sids[id]; !ok {
			return nil, fmt.Errorf("session %s: %w", id, store.ErrNotFound)
		}
	}
	return sids, nil
}

// conflict names the event whose seq is already stored, from the unique
// violation's detail ("Key (sid, seq)=(7, 5) already exists.").
func conflict(err error, sids map[string]int64) error {
	var pe *pgconn.PgError
	var sid, seq int64
	if errors.As(err, &pe) {
		if _, serr := fmt.Sscanf(pe.Detail, "Key (sid, seq)=(%d, %d) already exists.", &sid, &seq); serr == nil {
			for id, n := range sids {
				if n == sid {
					return fmt.Errorf("session %s already has an event with seq %d: %w", id, seq, store.ErrConflict)
				}
			}
		}
	}
	return fmt.Errorf("a seq is already stored: %w", store.ErrConflict)
}

// Events returns the events of session with Seq > after, in order, at most
// limit (0: all). A session without events (or that does not exist) has
// none: the result is empty, not ErrNotFound.
func (s *Store) Events(ctx context.Context, session string, after int64, limit int) ([]event.Event, error) {
	var lim any // NULL: no limit
	if limit > 0 {
		lim = int64(limit)
	}
	rows, err := s.pool.Query(ctx, `SELECT seq, type, time, turn, agent, repo, data FROM events
	WHERE sid = (SELECT sid FROM sessions WHERE id = $1) AND seq > $2 ORDER BY seq LIMIT $3`, session, after, lim)
	if err != nil {
		return nil, fmt.Errorf("postgres: events of session %s: %w", session, err)
	}
	defer rows.Close()
	var out []event.Event
	for rows.Next() {
		var (
			ev   = event.Event{Session: session}
			typ  string
			when *time.Time
			data []byte
		)
		if err := rows.Scan(&ev.Seq, &typ, &when, &ev.Turn, &ev.Agent, &ev.Repo, &data); err != nil {
			return nil, fmt.Errorf("postgres: events of session %s: %w", session, err)
		}
		ev.Time = tm(when)
		if ev.Data, err = event.Decode(event.Type(typ), data); err != nil {
			return nil, fmt.Errorf("postgres: event %d of session %s: %w", ev.Seq, session, err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: events of session %s: %w", session, err)
	}
	return out, nil
}

// LastSeq is the highest stored seq of session (0 when it has none).
func (s *Store) LastSeq(ctx context.Context, session string) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) FROM events WHERE sid = (SELECT sid FROM sessions WHERE id = $1)`, session).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: last seq of session %s: %w", session, err)
	}
	return n, nil
}

// encode encodes a payload. A payload that encodes itself (the journal's,
// already encoded) is taken as it is.
func encode(p event.Payload) ([]byte, error) {
	if m, ok := p.(json.Marshaler); ok {
		return m.MarshalJSON()
	}
	return json.Marshal(p)
}
