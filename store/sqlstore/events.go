package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// The events' hot statements: run for every batch the journal reads, so a
// database may prepare them once (Hot; SQLite does).
const (
	eventsQuery = `SELECT seq, type, time, turn, agent, repo, data FROM events
	WHERE sid = (SELECT sid FROM sessions WHERE id = ?) AND seq > ? ORDER BY seq LIMIT ?`
	lastSeqQuery = `SELECT COALESCE(MAX(seq), 0) FROM events WHERE sid = (SELECT sid FROM sessions WHERE id = ?)`
)

// Hot lists the statements worth preparing once.
var Hot = []string{eventsQuery, lastSeqQuery}

// AppendEvents stores evs in one transaction: all or none. A seq already
// stored (or repeated in evs) is ErrConflict; a session that does not
// exist is ErrNotFound.
func (s *Store) AppendEvents(ctx context.Context, evs []event.Event) error {
	return s.AppendEventsWith(ctx, evs, nil)
}

// AppendEventsWith stores msgs (as AddMessage does, in order) and evs (as
// AppendEvents does) in one transaction: all or none. Payloads are encoded
// before the transaction starts, so it holds its connection only for the
// inserts; the events go in as the database inserts a batch best
// (DB.InsertEvents). A message is written to m only once the transaction
// committed.
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
	data := make([][]byte, len(evs))
	var sessions []string
	// last is each session's last seq so far: the journal's batches
	// number each session's events upwards, and then no seq can repeat.
	last := make(map[string]int64, 4)
	ordered := true
	for i, ev := range evs {
		if ev.Session == "" || ev.Seq <= 0 || ev.Data == nil {
			return s.errorf("append events: event %d (session %q, seq %d) needs a session, a seq > 0 and a payload", i, ev.Session, ev.Seq)
		}
		if ev.Seq <= last[ev.Session] {
			ordered = false
		}
		last[ev.Session] = ev.Seq
		b, err := encode(ev.Data)
		if err != nil {
			return s.errorf("append events: encoding event %d of session %s (%s): %w", ev.Seq, ev.Session, ev.Type(), err)
		}
		data[i] = b
		if !slices.Contains(sessions, ev.Session) {
			sessions = append(sessions, ev.Session)
		}
	}
	if !ordered {
		if err := repeated(evs); err != nil {
			return s.errorf("append events: %w", err)
		}
	}
	err := s.write(ctx, "append events", func(tx Querier) error {
		if err := s.checkFences(ctx, tx, fences); err != nil {
			return s.errorf("append events: %w", err)
		}
		if len(msgSessions) > 0 {
			if err := s.lockSessions(ctx, tx, msgSessions); err != nil {
				return s.errorf("append events: %w", err)
			}
		}
		for i := range cs {
			if err := s.addMessage(ctx, tx, &cs[i]); err != nil {
				return s.errorf("append events: %w", err)
			}
		}
		if len(evs) == 0 {
			return nil
		}
		if err := s.db.InsertEvents(ctx, tx, sessions, evs, data); err != nil {
			return s.errorf("append events: %w", err)
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

// repeated is ErrConflict when a (session, seq) appears twice in evs (it
// cannot be inserted; PostgreSQL would abort the transaction without
// saying which).
func repeated(evs []event.Event) error {
	type key struct {
		session string
		seq     int64
	}
	seen := make(map[key]bool, len(evs))
	for _, ev := range evs {
		if seen[key{ev.Session, ev.Seq}] {
			return fmt.Errorf("seq %d of session %s appears twice in the batch: %w", ev.Seq, ev.Session, store.ErrConflict)
		}
		seen[key{ev.Session, ev.Seq}] = true
	}
	return nil
}

// Events returns the events of session with Seq > after, in order, at most
// limit (0: all). A session without events (or that does not exist) has
// none: the result is empty, not ErrNotFound.
func (s *Store) Events(ctx context.Context, session string, after int64, limit int) ([]event.Event, error) {
	lim := s.d.NoLimit()
	if limit > 0 {
		lim = int64(limit)
	}
	rows, err := s.reader().Query(ctx, eventsQuery, session, after, lim)
	if err != nil {
		return nil, s.errorf("events of session %s: %w", session, err)
	}
	defer rows.Close()
	var out []event.Event
	for rows.Next() {
		var (
			ev   = event.Event{Session: session}
			typ  string
			when Time
			data []byte
		)
		if err := rows.Scan(&ev.Seq, &typ, &when, &ev.Turn, &ev.Agent, &ev.Repo, &data); err != nil {
			return nil, s.errorf("events of session %s: %w", session, err)
		}
		ev.Time = when.T
		if ev.Data, err = event.Decode(event.Type(typ), data); err != nil {
			return nil, s.errorf("event %d of session %s: %w", ev.Seq, session, err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, s.errorf("events of session %s: %w", session, err)
	}
	return out, nil
}

// LastSeq is the highest stored seq of session (0 when it has none).
func (s *Store) LastSeq(ctx context.Context, session string) (int64, error) {
	var n int64
	if err := s.reader().QueryRow(ctx, lastSeqQuery, session).Scan(&n); err != nil {
		return 0, s.errorf("last seq of session %s: %w", session, err)
	}
	return n, nil
}

// encode encodes a payload. A payload that encodes itself (the journal's,
// already encoded and checked by json.Marshal when it was appended) is
// taken as it is, without encoding/json's second pass over its output.
func encode(p event.Payload) ([]byte, error) {
	if m, ok := p.(json.Marshaler); ok {
		return m.MarshalJSON()
	}
	return json.Marshal(p)
}
