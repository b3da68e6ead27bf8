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
//     package doc says why). Reads go to DB.Reader: SQLite's query_only
//     pool, PostgreSQL's pool.
//
// Still per database, with the methods not yet moved (each store
// package's doc describes them): the locking clauses (FOR NO KEY UPDATE,
// FOR SHARE) and the scoped advisory locks, whose clock times locks,
// leases and nodes, the event batch insert (prepared power-of-two
// statements in SQLite, unnest arrays in PostgreSQL), message seq
// allocation, and the store.Store methods not yet in this package.
// As each family moves here, the dialect grows by the differences it
// needs, each with its name and why.
//
// Migrations stay per database (store/sqlite's schema.go,
// store/postgres's migrations/): the DDL must differ (STRICT and WITHOUT
// ROWID tables, INTEGER times, identity columns, COLLATE "C", jsonb and its
// expression indexes). TestSchemasAgree migrates both and checks that
// they describe the same tables and columns.
package sqlstore
