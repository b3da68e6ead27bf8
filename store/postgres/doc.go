// Package postgres is the store.Store on a PostgreSQL database (harvest
// serve --store postgres://...): state on a database server instead of a
// file, which several harvest nodes share (the nodes' heartbeats, the
// sessions' fenced leases, the locks and the delivery claims here are
// how they hand sessions between them: package session, "Several
// nodes"). It passes the same conformance suite
// as store/sqlite (store/storetest) and keeps the same semantics; where
// the two databases differ, this doc says how.
//
// The queries and the Go code of every store.Store method are package
// store/sqlstore's, written once for both databases; this package gives
// them PostgreSQL's dialect (sqlstore.go: $n placeholders, timestamptz,
// jsonb, row and advisory locks, the server's clock) and runs them. The
// schema, its migrations and the isolation rules below are this
// package's.
//
// It uses pgx (github.com/jackc/pgx/v5) through a pgxpool.Pool: pure Go,
// so the binary stays static. The pool's size is pgxpool's default
// (the larger of 4 and the CPUs); the URL's pool_max_conns changes it.
//
// # Schema and migrations
//
// Numbered migrations (migrations/NNNN_name.sql, embedded) are applied by
// Open, all pending ones in one transaction, and recorded in
// schema_migrations. That transaction first takes a transaction-scoped
// advisory lock (pg_advisory_xact_lock, one fixed key): when several nodes
// start at once against a new or older database, one migrates and the
// others wait on the lock, then find nothing left to do. PostgreSQL's DDL
// is transactional, so a migration that fails leaves the schema as it was.
// A database whose schema_migrations has a version this harvest does not
// know was written by a newer harvest, and Open refuses it rather than
// misread it.
//
// The tables mirror store/sqlite's (see its doc): sessions (sid identity
// PK, id UNIQUE), messages (session, seq), events (sid, seq), locks,
// tokens, deliveries, environments, secrets, memory_entities,
// memory_observations, memory_relations, memory_seeded, web_sessions,
// nodes, session_leases, users, identities, signin_flows, oauth_grants,
// audit (its id an identity
// column: ids increase in the order entries are inserted, not always in
// the order they commit, so a reader paging the log by id while it is
// written may miss an entry committed late; the log's readers are people).
// Differences:
//
//   - Times are timestamptz, so they keep microseconds (SQLite's integers
//     keep nanoseconds); NULL is the zero time.Time; they come back in UTC.
//     Times the store sets itself are truncated to microseconds first, so
//     what a call returns is what a later read gives.
//   - The JSON that ListSessions filters on (collab's workflow, github's
//     repo and number) is jsonb, with expression indexes; an optional
//     field is NULL rather than ”. Event payloads are bytea: the bytes
//     the journal encoded, not re-parsed.
//   - Ids and the secrets' scope and name are COLLATE "C", so results are
//     ordered by bytes as SQLite orders them, whatever the database's
//     locale.
//   - An observation's text has no unique index (a btree entry is capped
//     near 2.7 kB): the scope's lock (below) keeps an entity's texts
//     unique. Memory search folds ASCII case only, as SQLite's lower():
//     the columns and the searched text are COLLATE "C".
//
// # Isolation and seq allocation
//
// Every write is one READ COMMITTED transaction. Read-modify-write
// operations lock what they read instead of relying on a stronger
// isolation level:
//
//   - UpdateSession reads the session FOR NO KEY UPDATE, so concurrent
//     updates queue on the row and none is lost; appends of the session's
//     events (whose foreign key takes FOR KEY SHARE) do not wait for it.
//
//   - A message's seq (AddMessage, AppendEventsWith, CreateSession's first
//     message) is MAX(seq)+1 read after locking the session's row FOR NO
//     KEY UPDATE (several sessions: in id order, so two transactions never
//     wait for each other in a cycle). The next writer of that session's
//     messages waits for the lock, and its MAX(seq) — a new statement, so
//     under READ COMMITTED a new snapshot — sees the row just committed:
//     message seqs are unique and gapless per session.
//
//   - Event seqs are assigned by the caller (the journal, one per session
//     on a node); the (sid, seq) primary key makes a seq stored twice
//     ErrConflict, so two writers can never both believe they own a seq —
//     a second concurrent insert of the same key waits for the first to
//     commit, then fails. A batch is one INSERT ... SELECT FROM unnest(...)
//     of arrays: one statement and one round trip whatever its size.
//
//   - Every memory write of a scope (repository, owner) first takes the
//     scope's pg_advisory_xact_lock (two keys: a memory constant and a
//     hash of the scope), so one scope's writes run one at a time: the
//     size bound (MemoryWrite.MaxBytes), summed after the write's rows are
//     in, cannot be passed by two racing writers, and SeedMemory's "never
//     seeded and empty" holds until it commits.
//
//   - AcquireLock is one INSERT ... ON CONFLICT DO UPDATE ... WHERE the
//     lease is the holder's or over, timed by the server's clock
//     (clock_timestamp()), so nodes with different clocks agree on expiry.
//
//   - A node's heartbeat is the lease of every session it holds: a lease
//     row is an assignment (node, epoch, the node's generation), written
//     only when the session changes hands. AcquireLease locks the
//     session's lease row (FOR UPDATE; a missing one is inserted, racing
//     inserters waiting for the winner), so racing nodes get one winner
//     per epoch; when another node holds it, it locks that node's row FOR
//     UPDATE to judge its heartbeat, and ends the generation of an expired
//     one in that row: a heartbeat of that node racing with the takeover
//     waits for the row (ON CONFLICT locks it too) and then sees the
//     generation ended, whatever its statement's time, so it cannot
//     revive the lease just taken. Expiry is judged by
//     statement_timestamp(): one instant per statement on the server's
//     clock, the same for every node whatever its own clock says.
//
//   - A fenced write (AppendEventsFenced, UpdateSessionFenced,
//     SetMessageStateFenced) reads its sessions' lease rows FOR SHARE in
//     its transaction before writing, and writes nothing unless each has
//     its fence's epoch. The share lock is held to the commit: a takeover,
//     which updates the row, waits for the fenced writes in flight, and a
//     fenced write after a takeover waits for it and reads the new epoch
//     (READ COMMITTED re-reads a row it waited for). So once AcquireLease
//     returned epoch N+1, no write of epoch N commits — the conformance
//     suite's FenceRace fails within a few runs without FOR SHARE. Fenced
//     writes of one session share the lock and do not queue on it. A
//     fenced append locks the lease rows before the sessions' rows (a
//     DeleteSession, sessions' row then the lease it cascades to, may then
//     deadlock with it: the append is retried, as any write); a fenced
//     UpdateSession, which is not retried, locks the session's row first,
//     in DeleteSession's order.
//
// SERIALIZABLE would make the same guarantees by aborting and retrying
// conflicting transactions; explicit row locks make them by waiting, which
// is cheaper for the hot rows here (one session's messages, one lock) and
// never calls a caller's function twice. A transaction PostgreSQL still
// aborts as a deadlock or serialization failure (40P01, 40001) is retried
// from the start a few times (Store.write); UpdateSession and
// UpdateEnvironment, which call the caller's function and hold a single
// row lock (so cannot deadlock), are not.
//
// # Durability
//
// A write has happened when its call returns nil: its COMMIT returned.
// That survives a crash of harvest, and of PostgreSQL as long as the server
// runs with fsync and synchronous_commit on (their defaults; with a
// synchronous standby, what synchronous_commit says). The store does not
// override the server's settings.
//
// # Space
//
// The events event retention removes (store.Store.CompactEvents) are
// deleted rows: PostgreSQL's autovacuum makes their space reusable by
// later inserts (the table stops growing; its size on disk does not go
// down), and TOAST'ed payloads go with their rows. Giving the space back
// to the file system is VACUUM FULL events (an exclusive lock while it
// rewrites the table) or pg_repack, an operator's choice; the store runs
// neither.
//
// # Errors
//
// Missing rows are store.ErrNotFound, unique violations (23505) that the
// contract names are store.ErrConflict, a foreign key violation (23503: the
// session was deleted meanwhile) is ErrNotFound; each is wrapped with what
// was missing or taken. Open's errors say what to fix: the URL's form, an
// unreachable server (its host and port, and what to check), a refused
// user, a missing database.
package postgres
