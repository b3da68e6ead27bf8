// Package sqlstore is the store.Store written once for both SQL
// databases: the queries and the Go code around them (validation, the
// read-modify-write, scanning rows, errors) live here, and store/sqlite and
// store/postgres each give it a small, named Dialect and a DB that runs
// their statements. Adding a table and its queries means writing them
// here, once; the conformance suite (store/storetest) runs them on both.
//
// # Why this shape, and not generated code
//
// This is the shape of Temporal's SQL persistence: one implementation of
// every query over per-database plugins, each plugin a handful of named
// differences. The alternative the issue offered, sqlc (queries in .sql
// files, Go generated from them), was not chosen because:
//
//   - sqlc generates code per engine: a SQLite package and a PostgreSQL
//     package from two sets of queries (its engines parse different
//     dialects), so the pair of files per family would stay, generated.
//   - What differs here is rarely a whole query. It is an expression
//     (whose clock times a lease), a column's encoding (integer
//     nanoseconds or timestamptz), a locking clause, how a write
//     transaction begins and which errors it retries. A dialect names
//     each such difference once; generated code would repeat the query
//     around it.
//   - Much of a store method is Go, not SQL: the fenced writes' checks,
//     the memory bound, the delivery queue's states. sqlc would generate
//     only the statements, and that Go would still be written twice.
//
// # What is shared, what is the database's
//
// Shared (here): the SQL text, written with ? placeholders in the SQL both
// databases speak (INSERT ... ON CONFLICT DO UPDATE, RETURNING, IN lists),
// the rows' scanning (Time reads either database's times), the errors'
// wording ("sqlite: ..." or "postgres: ..." in front, Dialect.Name), and
// the Go logic of every moved method.
//
// The database's (Dialect, and DB in its store package):
//
//   - Placeholders: ? here; PostgreSQL's DB rebinds them to $1, $2, ...
//     (Rebind, cached per query string).
//   - Times: SQLite keeps INTEGER nanoseconds (0 for the zero time),
//     PostgreSQL timestamptz (NULL for the zero time; its Store's clock
//     truncates to microseconds). Dialect.Time encodes, Time decodes
//     both.
//   - JSON: TEXT in SQLite, jsonb in PostgreSQL; both take the encoded
//     text as a string and give it back as bytes.
//   - Errors: Dialect.IsDuplicate and IsMissingParent classify a
//     database's unique and foreign key violations as store.ErrConflict
//     and store.ErrNotFound.
//   - Transactions: DB.Write. SQLite begins IMMEDIATE on its one writer
//     connection (one writer at a time, so a read-modify-write in it is
//     atomic); PostgreSQL runs READ COMMITTED with row locks and runs the
//     transaction again on a deadlock or a serialization failure (its
//     package doc says why; DB.WriteOnce is the write that calls a
//     caller's function, never run twice). Reads go to DB.Reader:
//     SQLite's query_only pool, PostgreSQL's pool; DB.Snapshot is a read
//     of several statements that see one state (ReadMemory).
//   - Row locks: Dialect.Lock is PostgreSQL's FOR UPDATE, FOR NO KEY
//     UPDATE or FOR SHARE on what a read-modify-write reads (a session's
//     row before its update or its next message seq, the leases a fenced
//     write checks); nothing in SQLite, whose one writer runs each write
//     transaction alone. The code that takes them is the same.
//   - Scoped locks: Dialect.ScopeLock is PostgreSQL's
//     pg_advisory_xact_lock on a memory scope (its writes run one at a
//     time, so its size bound holds); nothing in SQLite.
//   - Clocks: Dialect.Now and After are the instant a lock, lease, node
//     or checkpoint is judged at. PostgreSQL's server clock
//     (clock_timestamp() for locks, statement_timestamp() for the rest),
//     so nodes with different clocks agree; SQLite's Store clock, bound
//     as a parameter (a file is written by one machine's processes). Each
//     decision (AcquireLock, HeartbeatNode) is one statement on both:
//     INSERT ... ON CONFLICT DO UPDATE ... WHERE ... RETURNING; AcquireLease
//     is one transaction that locks the rows it judges (leases.go).
//   - JSON fields in a WHERE (ListSessions): Dialect.JSONText and JSONInt
//     are written as each database's expression indexes are, so the
//     index is used; an absent optional JSON value is SQLite's empty text and
//     PostgreSQL's NULL (JSONAbsent, JSONPresent).
//   - Case-folded search (memory): Dialect.Contains. Full-text search,
//     when it comes, is a dialect method too.
//   - A batch of events: DB.InsertEvents. SQLite inserts it in prepared
//     multi-row INSERTs of up to 64 rows; PostgreSQL in one INSERT of
//     unnest arrays, one round trip whatever its size. A seq stored
//     twice is named from a probe (SQLite) or the violation's detail
//     (PostgreSQL, whose aborted transaction cannot probe).
//   - Prepared statements: SQLite's DB prepares the events' hot reads
//     (Hot) once; pgx caches the statements it sees by itself.
//
// Lists are IN (?, ?, ...) in both, not PostgreSQL's arrays: one query
// text, and the lists here are short (a session's states, a scope's
// names); the two batch writes that can be long are the dialect's
// (InsertEvents) or chunked (RemoveDeadNodes, a checkpoint's packs).
//
// What stays in each store package: opening the database (its URL or
// file, pools, pragmas, migrations), DB and Dialect, and what only one
// of them has (SQLite's Claim and HoldWrites; PostgreSQL's reconnecting
// pool and its error for an unreachable server).
//
// Migrations stay per database (store/sqlite's schema.go,
// store/postgres's migrations/): the DDL must differ (STRICT and WITHOUT
// ROWID tables, INTEGER times, identity columns, COLLATE "C", jsonb and its
// expression indexes). TestSchemasAgree migrates both and checks that
// they describe the same tables and columns.
package sqlstore
