package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlstore"
)

// The queries shared with store/sqlite are package sqlstore's; this file
// is PostgreSQL's side of them: its dialect, how it runs statements
// (through pgx, the ? placeholders rebound as $n) and writes, and how it
// inserts a batch of events.

// dialect is PostgreSQL's sqlstore.Dialect.
type dialect struct{}

func (dialect) Name() string                   { return "postgres" }
func (dialect) Time(t time.Time) any           { return ts(t) }
func (dialect) IsDuplicate(err error) bool     { return isDuplicate(err) }
func (dialect) IsMissingParent(err error) bool { return isMissingParent(err) }

func (dialect) Lock(m sqlstore.LockMode) string {
	switch m {
	case sqlstore.LockNoKeyUpdate:
		return " FOR NO KEY UPDATE"
	case sqlstore.LockShare:
		return " FOR SHARE"
	}
	return " FOR UPDATE"
}

// Now is the server's clock: clock_timestamp() (the time of the call) or
// statement_timestamp() (one instant per statement), so every node agrees
// on expiry whatever its own clock says.
func (dialect) Now(c sqlstore.Clock, _ time.Time) (string, []any) {
	if c == sqlstore.ClockStatement {
		return "statement_timestamp()", nil
	}
	return "clock_timestamp()", nil
}

func (d dialect) After(c sqlstore.Clock, now time.Time, ttl time.Duration) (string, []any) {
	clock, _ := d.Now(c, now)
	return clock + " + ? * interval '1 microsecond'", []any{ttl.Microseconds()}
}

// ScopeLock is a transaction-scoped advisory lock on (space, key).
func (dialect) ScopeLock(space, key int32) (string, []any) {
	return "SELECT pg_advisory_xact_lock(?, ?)", []any{space, key}
}

// Contains folds ASCII case only, as SQLite's lower(): the text is
// COLLATE "C" whatever the database's locale.
func (dialect) Contains(col string) string {
	return "strpos(lower(" + col + `), lower(?::text COLLATE "C")) > 0`
}

func (dialect) JSONAbsent() any                   { return nil }
func (dialect) JSONPresent(col string) string     { return col + " IS NOT NULL" }
func (dialect) JSONText(col, field string) string { return col + "->>'" + field + "'" }
func (dialect) JSONInt(col, field string) string  { return "(" + col + "->>'" + field + "')::bigint" }

// Reclaim: nothing; autovacuum makes deleted rows' space reusable.
func (dialect) Reclaim() string { return "" }
func (dialect) NoLimit() any    { return nil }

// pgQuerier is a sqlstore.Querier on the pool or a transaction.
type pgQuerier struct {
	q interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}
}

// rebound caches sqlstore.Rebind: the shared queries are a few hundred
// strings, most of them constants.
var rebound sync.Map // string -> string

func rebind(q string) string {
	if v, ok := rebound.Load(q); ok {
		return v.(string)
	}
	r := sqlstore.Rebind(q)
	rebound.Store(q, r)
	return r
}

func (q pgQuerier) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := q.q.Exec(ctx, rebind(sql), args...)
	return tag.RowsAffected(), err
}

func (q pgQuerier) Query(ctx context.Context, sql string, args ...any) (sqlstore.Rows, error) {
	rows, err := q.q.Query(ctx, rebind(sql), args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (q pgQuerier) QueryRow(ctx context.Context, sql string, args ...any) sqlstore.Row {
	return q.q.QueryRow(ctx, rebind(sql), args...)
}

// db is the Store's sqlstore.DB: reads on the pool, writes in write's
// READ COMMITTED transactions (retried on deadlocks).
type db struct {
	s *Store
	r sqlstore.Querier // the pool, made once
}

func (d db) Reader() sqlstore.Querier { return d.r }

func (d db) Write(ctx context.Context, what string, fn func(tx sqlstore.Querier) error) error {
	return d.s.write(ctx, what, func(tx pgx.Tx) error { return fn(pgQuerier{tx}) })
}

// WriteOnce is one attempt of write: fn calls a caller's function, which
// must not run twice.
func (d db) WriteOnce(ctx context.Context, what string, fn func(tx sqlstore.Querier) error) error {
	return d.s.attempt(ctx, what, func(tx pgx.Tx) error { return fn(pgQuerier{tx}) })
}

// Snapshot runs fn in a REPEATABLE READ, read-only transaction.
func (d db) Snapshot(ctx context.Context, what string, fn func(tx sqlstore.Querier) error) error {
	tx, err := d.s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("postgres: %s: begin: %w", what, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	return fn(pgQuerier{tx})
}

// InsertEvents looks the sessions' sids up in one query and inserts the
// batch in one INSERT ... SELECT FROM unnest(...) of arrays: one round trip
// whatever its size. A seq stored twice fails the statement (and the
// transaction): the unique violation's detail names it.
func (d db) InsertEvents(ctx context.Context, q sqlstore.Querier, sessions []string, evs []event.Event, data [][]byte) error {
	tx := q.(pgQuerier).q
	sids, err := sessionIDs(ctx, tx, sessions)
	if err != nil {
		return err
	}
	n := len(evs)
	var (
		sid, seq               = make([]int64, n), make([]int64, n)
		typ, turn, agent, repo = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		when                   = make([]pgtype.Timestamptz, n)
	)
	for i, ev := range evs {
		sid[i], seq[i], typ[i], turn[i], agent[i], repo[i] = sids[ev.Session], ev.Seq, string(ev.Type()), ev.Turn, ev.Agent, ev.Repo
		when[i] = pgtype.Timestamptz{Time: ev.Time, Valid: !ev.Time.IsZero()}
	}
	_, err = tx.Exec(ctx, `INSERT INTO events (sid, seq, type, time, turn, agent, repo, data)
	SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::timestamptz[], $5::text[], $6::text[], $7::text[], $8::bytea[])`,
		sid, seq, typ, when, turn, agent, repo, data)
	switch {
	case isDuplicate(err):
		return conflict(err, sids)
	case isMissingParent(err): // deleted since sessionIDs read it
		return fmt.Errorf("a session of the batch was deleted: %w", store.ErrNotFound)
	}
	return err
}

// sessionIDs maps the sessions' ids to their sids; a missing session is
// ErrNotFound.
func sessionIDs(ctx context.Context, tx interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, ids []string) (map[string]int64, error) {
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
// violation's detail ("Key (sid, seq)=(7, 5) already exists."): the
// transaction is aborted, so it cannot look.
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

// shared makes the Store's sqlstore.Store.
func (s *Store) shared() *sqlstore.Store {
	return sqlstore.New(db{s: s, r: pgQuerier{s.pool}}, dialect{}, func() time.Time { return s.now() })
}
