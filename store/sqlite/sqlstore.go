package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlstore"
)

// The queries shared with store/postgres are package sqlstore's; this
// file is SQLite's side of them: its dialect, how it runs statements
// (database/sql, the hot ones prepared once) and writes, and how it
// inserts a batch of events.

// querier is a sqlstore.Querier on the readers' pool or a transaction;
// the statements in hot (prepared on the pool) run prepared.
type querier struct {
	q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
	tx  *sql.Tx // when q is a transaction
	hot map[string]*sql.Stmt
}

func (q querier) stmt(ctx context.Context, query string) *sql.Stmt {
	st := q.hot[query]
	if st != nil && q.tx != nil {
		st = q.tx.StmtContext(ctx, st)
	}
	return st
}

func (q querier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q querier) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	var (
		rows *sql.Rows
		err  error
	)
	if st := q.stmt(ctx, query); st != nil {
		rows, err = st.QueryContext(ctx, args...)
	} else {
		rows, err = q.q.QueryContext(ctx, query, args...)
	}
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (q querier) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	if st := q.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return q.q.QueryRowContext(ctx, query, args...)
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }

// The copier's calls (harvest store migrate) are sqlstore's too.
var _ store.Copier = (*Store)(nil)

// db is the Store's sqlstore.DB: reads on the query_only pool, writes on
// the writer connection (BEGIN IMMEDIATE).
type db struct {
	s *Store
	r sqlstore.Querier // the readers' pool, made once
}

func (d db) Reader() sqlstore.Querier { return d.r }

func (d db) Write(ctx context.Context, what string, fn func(tx sqlstore.Querier) error) error {
	return d.s.write(ctx, "sqlite: "+what, func(tx *sql.Tx) error { return fn(querier{q: tx, tx: tx}) })
}

// WriteOnce is Write: a SQLite write is never run again.
func (d db) WriteOnce(ctx context.Context, what string, fn func(tx sqlstore.Querier) error) error {
	return d.Write(ctx, what, fn)
}

// Snapshot runs fn in a read transaction on the readers' pool: WAL gives
// it one snapshot from its first read to its end.
func (d db) Snapshot(ctx context.Context, what string, fn func(tx sqlstore.Querier) error) error {
	tx, err := d.s.r.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: %s: begin: %w", what, err)
	}
	defer tx.Rollback()
	return fn(querier{q: tx, tx: tx})
}

// InsertEvents looks the sessions' sids up and inserts the events in
// multi-row INSERTs of up to 64 (prepared statements of 1, 2, 4, ... 64
// rows): far fewer statements than one per event.
func (d db) InsertEvents(ctx context.Context, q sqlstore.Querier, sessions []string, evs []event.Event, data [][]byte) error {
	s, tx := d.s, q.(querier).tx
	sids := make(map[string]int64, len(sessions))
	for _, id := range sessions {
		var sid int64
		err := tx.StmtContext(ctx, s.sid).QueryRowContext(ctx, id).Scan(&sid)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("session %s: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		sids[id] = sid
	}
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
			return conflict(ctx, tx, chunk, sids)
		}
		if err != nil {
			return err
		}
		start += len(chunk)
	}
	return nil
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

// conflict names the first event of chunk whose seq is already stored,
// for the error of a refused batch (SQLite's transaction goes on after a
// failed statement, so it can look).
func conflict(ctx context.Context, tx *sql.Tx, chunk []event.Event, sids map[string]int64) error {
	for _, ev := range chunk {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM events WHERE sid = ? AND seq = ?`, sids[ev.Session], ev.Seq).Scan(&one); err == nil {
			return fmt.Errorf("session %s already has an event with seq %d: %w", ev.Session, ev.Seq, store.ErrConflict)
		}
	}
	return fmt.Errorf("a seq is already stored: %w", store.ErrConflict)
}

// shared makes the Store's sqlstore.Store (once its pools are open).
func (s *Store) shared() *sqlstore.Store {
	return sqlstore.New(db{s: s, r: querier{q: s.r, hot: s.hot}}, dialect{}, func() time.Time { return s.now().UTC() })
}

// dialect is SQLite's sqlstore.Dialect.
type dialect struct{}

func (dialect) Name() string               { return "sqlite" }
func (dialect) Time(t time.Time) any       { return ts(t) }
func (dialect) IsDuplicate(err error) bool { return isDuplicate(err) }
func (dialect) IsMissingParent(err error) bool {
	return code(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}

// Lock is no clause: the one writer runs each write transaction alone.
func (dialect) Lock(sqlstore.LockMode) string { return "" }

// Now is the Store's clock, bound as a parameter, whichever clock is asked.
func (dialect) Now(_ sqlstore.Clock, now time.Time) (string, []any) { return "?", []any{ts(now)} }
func (dialect) After(_ sqlstore.Clock, now time.Time, d time.Duration) (string, []any) {
	return "?", []any{ts(now.Add(d))}
}

// ScopeLock is nothing: the one writer runs each write alone.
func (dialect) ScopeLock(space, key int32) (string, []any) { return "", nil }

func (dialect) Contains(col string) string { return "instr(lower(" + col + "), lower(?)) > 0" }

func (dialect) JSONAbsent() any               { return "" }
func (dialect) JSONPresent(col string) string { return col + " <> ''" }
func (dialect) JSONText(col, field string) string {
	return "json_extract(" + col + ", '$." + field + "')"
}
func (dialect) JSONInt(col, field string) string { return dialect{}.JSONText(col, field) }
func (dialect) NoLimit() any                     { return int64(-1) }

// Reclaim frees the file's free pages (the database is made with
// auto_vacuum INCREMENTAL: sqlite.go).
func (dialect) Reclaim() string { return "PRAGMA incremental_vacuum" }
