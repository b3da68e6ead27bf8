package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/event"
)

// Querier runs statements: a database's pool (the reads) or a write's
// transaction. Statements are written with ? placeholders; a Querier of a
// database that numbers them ($1, $2: PostgreSQL) rewrites them (Rebind).
type Querier interface {
	// Exec runs a statement and returns how many rows it changed.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	// QueryRow runs a query whose first row Scan reads; no row is an
	// error that errors.Is sql.ErrNoRows (pgx's ErrNoRows is one).
	QueryRow(ctx context.Context, query string, args ...any) Row
}

// Row is one row of QueryRow.
type Row interface{ Scan(dest ...any) error }

// Rows is the result of Query. Close may be called more than once.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// DB is how a database's store package runs statements: reads on its pool,
// writes in its own kind of transaction.
type DB interface {
	// Reader runs reads (SQLite: the query_only pool; PostgreSQL: the pool).
	Reader() Querier
	// Write runs fn in one write transaction and commits it; fn's error
	// aborts and nothing is written. How a write begins (SQLite: BEGIN
	// IMMEDIATE on the one writer connection; PostgreSQL: READ COMMITTED,
	// run again on a deadlock or serialization failure, so fn must have
	// no effect outside tx) is the database's. what names the write in
	// begin's and commit's errors.
	Write(ctx context.Context, what string, fn func(tx Querier) error) error
	// WriteOnce is Write for a write that calls a caller's function: fn
	// runs once, never again on a retry. It must take its row locks in an
	// order that cannot deadlock (one row).
	WriteOnce(ctx context.Context, what string, fn func(tx Querier) error) error
	// Snapshot runs fn in a read-only transaction whose statements all see
	// one state of the database (SQLite: a read transaction on the
	// readers' pool, WAL's snapshot; PostgreSQL: REPEATABLE READ).
	Snapshot(ctx context.Context, what string, fn func(tx Querier) error) error

	// InsertEvents inserts a batch of events in tx, the way the database
	// does it best: SQLite's multi-row INSERTs of up to 64 events,
	// prepared once; PostgreSQL's one INSERT of arrays (unnest), one round
	// trip whatever the batch's size. sessions are the batch's sessions,
	// data the events' encoded payloads. A session that does not exist is
	// store.ErrNotFound; a seq already stored is store.ErrConflict, naming
	// it.
	InsertEvents(ctx context.Context, tx Querier, sessions []string, evs []event.Event, data [][]byte) error
}

// Store is the shared implementation of the store.Store methods moved
// here; a database's Store embeds it.
type Store struct {
	db  DB
	d   Dialect
	now func() time.Time
}

// New makes the shared Store over db and d. now is the clock of the times
// the store sets itself, in UTC and at the precision the database keeps.
func New(db DB, d Dialect, now func() time.Time) *Store {
	return &Store{db: db, d: d, now: now}
}

// errorf is fmt.Errorf with the database's name in front ("sqlite: ...").
func (s *Store) errorf(format string, args ...any) error {
	return fmt.Errorf(s.d.Name()+": "+format, args...)
}

func (s *Store) write(ctx context.Context, what string, fn func(tx Querier) error) error {
	return s.db.Write(ctx, what, fn)
}

func (s *Store) reader() Querier { return s.db.Reader() }

// isNoRows reports QueryRow's "no row".
func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// collect scans every row with scan.
func collect[T any](rows Rows, err error, scan func(Row) (*T, error)) ([]*T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// values is what ps point to, for the calls that return values.
func values[T any](ps []*T) []T {
	var out []T
	for _, p := range ps {
		out = append(out, *p)
	}
	return out
}

// in is "(?,?,?)" for n values (n >= 1).
func in(n int) string { return "(?" + strings.Repeat(",?", n-1) + ")" }

// Time is a scan target for a time column, whichever way the database
// keeps it: SQLite's INTEGER nanoseconds since the epoch (0: the zero
// time) or PostgreSQL's timestamptz (NULL: the zero time). It comes back
// in UTC.
type Time struct{ T time.Time }

// Scan implements sql.Scanner (pgx uses it too).
func (t *Time) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		t.T = time.Time{}
	case int64:
		t.T = time.Time{}
		if v != 0 {
			t.T = time.Unix(0, v).UTC()
		}
	case time.Time:
		t.T = v.UTC()
	default:
		return fmt.Errorf("sqlstore: a time column holds %T, want an integer or a timestamp", src)
	}
	return nil
}

// Rebind rewrites q's ? placeholders as $1, $2, ... (PostgreSQL's), leaving
// those in quoted strings and identifiers alone.
func Rebind(q string) string {
	if !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 8)
	n := 0
	var quote byte
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
