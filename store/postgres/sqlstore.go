package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlstore"
)

// The queries shared with store/sqlite are package sqlstore's; this file
// is PostgreSQL's side of them: its dialect and how it runs statements
// (through pgx, the ? placeholders rebound as $n) and writes.

var _ store.Copier = (*Store)(nil)

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

// Now is the server's clock (clock_timestamp(): the time of the call, not
// of the transaction's start), so every node agrees on expiry.
func (dialect) Now(time.Time) (string, []any) { return "clock_timestamp()", nil }

// ScopeLock is a transaction-scoped advisory lock on (space, key).
func (dialect) ScopeLock(space, key int32) (string, []any) {
	return "SELECT pg_advisory_xact_lock(?, ?)", []any{space, key}
}

// Contains folds ASCII case only, as SQLite's lower(): the text is
// COLLATE "C" whatever the database's locale.
func (dialect) Contains(col string) string {
	return "strpos(lower(" + col + `), lower(?::text COLLATE "C")) > 0`
}

func (dialect) After(_ time.Time, d time.Duration) (string, []any) {
	return "clock_timestamp() + ? * interval '1 microsecond'", []any{d.Microseconds()}
}

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
type db struct{ s *Store }

func (d db) Reader() sqlstore.Querier { return pgQuerier{d.s.pool} }

func (d db) Write(ctx context.Context, what string, fn func(tx sqlstore.Querier) error) error {
	return d.s.write(ctx, what, func(tx pgx.Tx) error { return fn(pgQuerier{tx}) })
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

// WriteOnce is one attempt of write: fn calls a caller's function, which
// must not run twice.
func (d db) WriteOnce(ctx context.Context, what string, fn func(tx sqlstore.Querier) error) error {
	return d.s.attempt(ctx, what, func(tx pgx.Tx) error { return fn(pgQuerier{tx}) })
}

// shared makes the Store's sqlstore.Store.
func (s *Store) shared() *sqlstore.Store {
	return sqlstore.New(db{s}, dialect{}, func() time.Time { return s.now() })
}
