package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strings"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// AppendEvents stores evs in one transaction: all or none. Payloads are
// encoded before the transaction starts, so the writer connection is held
// only for the inserts. A seq already stored (or repeated in evs) is
// ErrConflict; a session that does not exist is ErrNotFound.
func (s *Store) AppendEvents(ctx context.Context, evs []event.Event) error {
	return s.AppendEventsWith(ctx, evs, nil)
}

// AppendEventsWith stores msgs (as AddMessage does, in order) and evs (as
// AppendEvents does) in one transaction: all or none. A message is
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
	now := s.now().UTC()
	for i, m := range msgs {
		cs[i] = *m
		defaultMessage(&cs[i], now)
	}
	data := make([][]byte, len(evs))
	var sessions []string
	seen := map[string]bool{}
	for i, ev := range evs {
		if ev.Session == "" || ev.Seq <= 0 || ev.Data == nil {
			return fmt.Errorf("sqlite: append events: event %d (session %q, seq %d) needs a session, a seq > 0 and a payload", i, ev.Session, ev.Seq)
		}
		b, err := encode(ev.Data)
		if err != nil {
			return fmt.Errorf("sqlite: append events: encoding event %d of session %s (%s): %w", ev.Seq, ev.Session, ev.Type(), err)
		}
		data[i] = b
		if !seen[ev.Session] {
			seen[ev.Session] = true
			sessions = append(sessions, ev.Session)
		}
	}
	sids := make(map[string]int64, len(sessions))
	err := s.write(ctx, "sqlite: append events", func(tx *sql.Tx) error {
		if err := checkFences(ctx, tx, fences); err != nil {
			return fmt.Errorf("sqlite: append events: %w", err)
		}
		for i := range cs {
			if err := addMessage(ctx, tx, &cs[i]); err != nil {
				return fmt.Errorf("sqlite: append events: %w", err)
			}
		}
		for _, id := range sessions {
			var sid int64
			err := tx.StmtContext(ctx, s.sid).QueryRowContext(ctx, id).Scan(&sid)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("sqlite: append events: session %s: %w", id, store.ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("sqlite: append events: %w", err)
			}
			sids[id] = sid
		}
		// Multi-row INSERTs of up to 64 events (prepared statements of
		// 1, 2, 4, ... 64 rows): far fewer statements than one per event.
		args := make([]any, 0, 8<<insertLog)
		for start := 0; start < len(evs); {
			k := min(bits.Len(uint(len(evs)-start))-1, insertLog)
			chunk := evs[start : start+1<<k]
			args = args[:0]
			for i, ev := range chunk {
				args = append(args, sids[ev.Session], ev.Seq, string(ev.Type()), ts(ev.Time), ev.Turn, ev.Agent, ev.Repo, data[start+i])
			}
			_, err := tx.StmtContext(ctx, s.insert[k]).ExecContext(ctx, args...)
			if isDuplicate(err) {
				return fmt.Errorf("sqlite: append events: %w", conflict(ctx, tx, chunk, sids))
			}
			if err != nil {
				return fmt.Errorf("sqlite: append events: %w", err)
			}
			start += len(chunk)
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

// Events returns the events of session with Seq > after, in order, at most
// limit (0: all). A session without events (or that does not exist) has
// none: the result is empty, not ErrNotFound.
func (s *Store) Events(ctx context.Context, session string, after int64, limit int) ([]event.Event, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := s.events.QueryContext(ctx, session, after, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: events of session %s: %w", session, err)
	}
	defer rows.Close()
	var out []event.Event
	for rows.Next() {
		var (
			ev   = event.Event{Session: session}
			typ  string
			when int64
			data []byte
		)
		if err := rows.Scan(&ev.Seq, &typ, &when, &ev.Turn, &ev.Agent, &ev.Repo, &data); err != nil {
			return nil, fmt.Errorf("sqlite: events of session %s: %w", session, err)
		}
		ev.Time = tm(when)
		if ev.Data, err = event.Decode(event.Type(typ), data); err != nil {
			return nil, fmt.Errorf("sqlite: event %d of session %s: %w", ev.Seq, session, err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: events of session %s: %w", session, err)
	}
	return out, nil
}

// LastSeq is the highest stored seq of session (0 when it has none).
func (s *Store) LastSeq(ctx context.Context, session string) (int64, error) {
	var n int64
	if err := s.lastSeq.QueryRowContext(ctx, session).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: last seq of session %s: %w", session, err)
	}
	return n, nil
}

// insertLog: one INSERT statement writes at most 1<<insertLog events.
const insertLog = 6

func insertEvents(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO events (sid, seq, type, time, turn, agent, repo, data) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?,?,?)")
	}
	return b.String()
}

// conflict names the first event of chunk whose seq is already stored (or
// repeated in chunk), for the error of a refused batch.
func conflict(ctx context.Context, tx *sql.Tx, chunk []event.Event, sids map[string]int64) error {
	seen := map[string]map[int64]bool{}
	for _, ev := range chunk {
		if seen[ev.Session] == nil {
			seen[ev.Session] = map[int64]bool{}
		}
		if seen[ev.Session][ev.Seq] {
			return fmt.Errorf("seq %d of session %s appears twice in the batch: %w", ev.Seq, ev.Session, store.ErrConflict)
		}
		seen[ev.Session][ev.Seq] = true
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM events WHERE sid = ? AND seq = ?`, sids[ev.Session], ev.Seq).Scan(&one); err == nil {
			return fmt.Errorf("session %s already has an event with seq %d: %w", ev.Session, ev.Seq, store.ErrConflict)
		}
	}
	return fmt.Errorf("a seq is already stored: %w", store.ErrConflict)
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
