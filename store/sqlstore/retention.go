package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// Event retention: store/retention.go states the contract, event's
// retention.go what is removed and what a reader sees instead.

// notLive are the states whose sessions retention may compact.
var notLive = []any{string(store.StateSuspended), string(store.StateStopped), string(store.StateFailed)}

// RetentionCandidates lists the sessions not live and last updated before
// before, after the key after by (updated_at, id), at most limit, each
// with whether its events are all compacted (its progress mark is at its
// last seq). One index range on sessions (updated_at) and, per session,
// two primary key lookups.
func (s *Store) RetentionCandidates(ctx context.Context, before time.Time, after store.RetentionKey, limit int) ([]store.RetentionCandidate, error) {
	if limit <= 0 {
		return nil, s.errorf("retention candidates: limit %d: give how many sessions to list (> 0)", limit)
	}
	args := append([]any{}, notLive...)
	args = append(args, s.d.Time(before))
	keyset := ""
	if !after.UpdatedAt.IsZero() || after.ID != "" {
		keyset = ` AND (s.updated_at, s.id) > (?, ?)`
		args = append(args, s.d.Time(after.UpdatedAt), after.ID)
	}
	args = append(args, limit)
	rows, err := s.reader().Query(ctx, `SELECT s.id, s.updated_at,
	COALESCE((SELECT r.through_seq FROM event_retention r WHERE r.sid = s.sid), 0),
	COALESCE((SELECT MAX(e.seq) FROM events e WHERE e.sid = s.sid), 0)
FROM sessions s
WHERE s.state IN `+in(len(notLive))+` AND s.updated_at < ?`+keyset+`
ORDER BY s.updated_at, s.id LIMIT ?`, args...)
	if err != nil {
		return nil, s.errorf("retention candidates: %w", err)
	}
	defer rows.Close()
	var out []store.RetentionCandidate
	for rows.Next() {
		var (
			c             store.RetentionCandidate
			at            Time
			through, last int64
		)
		if err := rows.Scan(&c.ID, &at, &through, &last); err != nil {
			return nil, s.errorf("retention candidates: %w", err)
		}
		c.UpdatedAt, c.Compacted = at.T, through >= last
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.errorf("retention candidates: %w", err)
	}
	return out, nil
}

// retained is an event CompactEvents read: its seq, type, time and
// payload size, and a marker's payload.
type retained struct {
	seq    int64
	typ    event.Type
	at     Time
	size   int64
	marker []byte
}

func (r *retained) removable() bool { return r.typ == event.TypeEventsCompacted || event.Bulky(r.typ) }

// CompactEvents compacts up to batch events of session id after its
// progress mark, in one transaction (store/retention.go), then gives the
// freed space back where the database does that (Dialect.Reclaim).
func (s *Store) CompactEvents(ctx context.Context, id string, idleBefore time.Time, batch int) (store.Compacted, error) {
	if batch <= 0 {
		return store.Compacted{}, s.errorf("compact events of session %s: batch %d: give how many events to read at most (> 0)", id, batch)
	}
	var out store.Compacted
	err := s.write(ctx, "compact events of session "+id, func(tx Querier) error {
		out = store.Compacted{}
		var (
			sid     int64
			state   string
			updated Time
		)
		err := tx.QueryRow(ctx, `SELECT sid, state, updated_at FROM sessions WHERE id = ?`+s.d.Lock(LockNoKeyUpdate), id).Scan(&sid, &state, &updated)
		if isNoRows(err) {
			return s.errorf("compact events of session %s: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return s.errorf("compact events of session %s: %w", id, err)
		}
		err = tx.QueryRow(ctx, `SELECT through_seq FROM event_retention WHERE sid = ?`, sid).Scan(&out.Through)
		if err != nil && !isNoRows(err) {
			return s.errorf("compact events of session %s: reading its progress: %w", id, err)
		}
		switch {
		case store.State(state).Live():
			out.Skipped = store.SkippedLive
			return nil
		case !updated.T.Before(idleBefore):
			out.Skipped = store.SkippedActive
			return nil
		}
		evs, err := s.retainedEvents(ctx, tx, sid, out.Through, batch)
		if err != nil {
			return s.errorf("compact events of session %s: %w", id, err)
		}
		fresh := len(evs)
		if len(evs) > 0 && evs[0].seq <= out.Through {
			fresh-- // the event at the mark, read again to join its run
		}
		out.Done = fresh < batch
		if len(evs) == 0 {
			return nil
		}
		for i := 0; i < len(evs); {
			if !evs[i].removable() {
				i++
				continue
			}
			j := i
			for j < len(evs) && evs[j].removable() {
				j++
			}
			if err := s.compactRun(ctx, tx, sid, evs[i:j], &out); err != nil {
				return s.errorf("compact events of session %s: %w", id, err)
			}
			i = j
		}
		out.Through = evs[len(evs)-1].seq
		if _, err := tx.Exec(ctx, `INSERT INTO event_retention (sid, through_seq, compacted_at) VALUES (?, ?, ?)
ON CONFLICT (sid) DO UPDATE SET through_seq = excluded.through_seq, compacted_at = excluded.compacted_at`,
			sid, out.Through, s.d.Time(s.now())); err != nil {
			return s.errorf("compact events of session %s: recording its progress: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return store.Compacted{}, err
	}
	if out.Removed > 0 {
		if err := s.reclaim(ctx); err != nil {
			return out, s.errorf("compact events of session %s: giving the freed space back: %w", id, err)
		}
	}
	return out, nil
}

// retainedEvents reads session sid's events from seq from (the progress
// mark: its event again, so that a run the last batch ended in goes on)
// to batch events after it.
func (s *Store) retainedEvents(ctx context.Context, tx Querier, sid, from int64, batch int) ([]retained, error) {
	limit := batch
	if from > 0 {
		limit++
	}
	rows, err := tx.Query(ctx, `SELECT seq, type, time, length(data), CASE WHEN type = ? THEN data END
FROM events WHERE sid = ? AND seq >= ? ORDER BY seq LIMIT ?`, string(event.TypeEventsCompacted), sid, from, limit)
	if err != nil {
		return nil, fmt.Errorf("reading its events from seq %d: %w", from, err)
	}
	defer rows.Close()
	var out []retained
	for rows.Next() {
		var (
			r   retained
			typ string
		)
		if err := rows.Scan(&r.seq, &typ, &r.at, &r.size, &r.marker); err != nil {
			return nil, fmt.Errorf("reading its events from seq %d: %w", from, err)
		}
		r.typ = event.Type(typ)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading its events from seq %d: %w", from, err)
	}
	return out, nil
}

// compactRun replaces run (events with no kept one between them, in seq
// order) by one marker at its last seq, unless it is one marker already.
func (s *Store) compactRun(ctx context.Context, tx Querier, sid int64, run []retained, out *store.Compacted) error {
	bulky, markers := 0, 0
	var bytes int64
	for _, r := range run {
		if r.typ == event.TypeEventsCompacted {
			markers++
		} else {
			bulky++
			bytes += r.size
		}
	}
	if bulky == 0 && markers <= 1 {
		return nil
	}
	first, last := run[0], run[len(run)-1]
	m := event.EventsCompacted{From: first.seq, To: last.seq, Reason: event.RetentionReason}
	if first.typ == event.TypeEventsCompacted {
		var was event.EventsCompacted
		if err := json.Unmarshal(first.marker, &was); err != nil {
			return fmt.Errorf("the events.compacted event at seq %d: %w", first.seq, err)
		}
		m.From = min(m.From, was.From)
	}
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM events WHERE sid = ? AND seq >= ? AND seq <= ?`, sid, first.seq, last.seq); err != nil {
		return fmt.Errorf("removing its events %d to %d: %w", first.seq, last.seq, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO events (sid, seq, type, time, turn, agent, repo, data) VALUES (?, ?, ?, ?, '', '', '', ?)`,
		sid, last.seq, string(event.TypeEventsCompacted), s.d.Time(last.at.T), data); err != nil {
		return fmt.Errorf("storing the events.compacted event at seq %d: %w", last.seq, err)
	}
	out.Removed += bulky
	out.Bytes += bytes
	out.Markers += 1 - markers
	return nil
}

// reclaim gives the space compaction freed back to the file system, where
// the database does it as a statement (Dialect.Reclaim: SQLite's
// incremental vacuum; PostgreSQL's autovacuum needs nothing).
func (s *Store) reclaim(ctx context.Context) error {
	q := s.d.Reclaim()
	if q == "" {
		return nil
	}
	return s.write(ctx, "reclaim space", func(tx Querier) error {
		rows, err := tx.Query(ctx, q)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
		}
		return rows.Err()
	})
}
