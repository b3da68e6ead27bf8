package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlstore"
)

// The queries shared with store/postgres are package sqlstore's; this
// file is SQLite's side of them: its dialect and how it runs a write.

var _ store.Copier = (*Store)(nil)

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

// Now is the Store's clock, bound as a parameter.
func (dialect) Now(now time.Time) (string, []any) { return "?", []any{ts(now)} }

// ScopeLock is nothing: the one writer runs each write alone.
func (dialect) ScopeLock(space, key int32) (string, []any) { return "", nil }

func (dialect) Contains(col string) string { return "instr(lower(" + col + "), lower(?)) > 0" }

func (dialect) After(now time.Time, d time.Duration) (string, []any) {
	return "?", []any{ts(now.Add(d))}
}

// db is the Store's sqlstore.DB: reads on the query_only pool, writes on
// the writer connection (BEGIN IMMEDIATE).
type db struct {
	s *Store
	r sqlstore.Querier
}

func (d db) Reader() sqlstore.Querier { return d.r }

func (d db) Write(ctx context.Context, what string, fn func(tx sqlstore.Querier) error) error {
	return d.s.write(ctx, "sqlite: "+what, func(tx *sql.Tx) error { return fn(sqlstore.SQL(tx)) })
}

// Snapshot runs fn in a read transaction on the readers' pool: WAL gives
// it one snapshot from its first read to its end.
func (d db) Snapshot(ctx context.Context, what string, fn func(tx sqlstore.Querier) error) error {
	tx, err := d.s.r.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: %s: begin: %w", what, err)
	}
	defer tx.Rollback()
	return fn(sqlstore.SQL(tx))
}

// WriteOnce is Write: a SQLite write is never run again.
func (d db) WriteOnce(ctx context.Context, what string, fn func(tx sqlstore.Querier) error) error {
	return d.Write(ctx, what, fn)
}

// shared makes the Store's sqlstore.Store (once its pools are open).
func (s *Store) shared() *sqlstore.Store {
	return sqlstore.New(db{s: s, r: sqlstore.SQL(s.r)}, dialect{}, func() time.Time { return s.now().UTC() })
}
