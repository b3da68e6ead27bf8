// Package sqlite is the default store.Store: one SQLite file, nothing to run.
//
// It uses modernc.org/sqlite (pure Go, no cgo), so the harvest binary stays
// static.
//
// The queries and the Go code of every store.Store method are package
// store/sqlstore's, written once for SQLite and PostgreSQL; this package
// gives them SQLite's dialect (sqlstore.go: times as integers, no row
// locks, the Store's clock) and runs them: the pools, the writer's
// transactions and the events' batch insert below. The schema, its
// migrations and the concurrency rules are this package's, and this doc
// says them.
//
// # Schema
//
// Numbered migrations (schema.go) are applied by Open, all pending ones in one
// transaction, and recorded in schema_migrations; a database written by a
// newer harvest (a version this one does not know) is refused rather than
// misread.
//
//	sessions  (sid PK, id UNIQUE)  the scalar fields of store.Session as columns
//	                               (owner, state, created_at, updated_at are
//	                               indexed for ListSessions); repos, limits and
//	                               usage as JSON; sandbox and agent_state as blobs
//	messages  (session, seq) PK    UNIQUE (session, id); seq 1, 2, ... per session;
//	                               UNIQUE (session, key_owner, idem_key) where a
//	                               key is given (MessageByKey), with request_hash
//	events    (sid, seq) PK        type, time, turn, agent, repo, data (the
//	                               payload as JSON, decoded back with event.Decode)
//	locks     (key PK)             holder, expires
//	tokens    (id PK)              name, hash UNIQUE (SHA-256 only), admin
//	deliveries (id PK)             webhook deliveries; pending ones indexed
//	secrets   (scope, name) PK     ciphertext (package secrets seals it; no value
//	                               in clear), key_id, session, set_by; DeleteToken
//	                               deletes the token's user:ID secrets with it
//	nodes     (id PK)              addr, capacity, leases, heartbeat, expires,
//	                               gen, ended, moved
//	session_leases (session PK)    node ('' once released), epoch, gen (the
//	                               node's generation: live while the node's
//	                               heartbeat is, in it); ON DELETE CASCADE
//
// events is the big, hot table: it is WITHOUT ROWID, clustered on (sid,
// seq), where sid is the session's integer rowid, so an append touches one
// B-tree with integer keys and a replay reads consecutive rows. Rows are
// inserted up to 64 to a statement, with statements prepared once.
//
// messages and events reference sessions ON DELETE CASCADE, so DeleteSession
// is one statement and nothing of a deleted session can be left behind or
// appended afterwards (AppendEvents for a missing session is ErrNotFound).
// AppendEventsWith inserts messages and events in the one transaction of
// the journal's batch: a message and its message.queued event are
// committed together or not at all.
//
// Times are INTEGER nanoseconds since the Unix epoch, UTC; 0 is the zero
// time.Time. They come back in UTC.
//
// # Concurrency
//
// SQLite allows one writer at a time. Rather than let writers race for the
// file lock and see SQLITE_BUSY, the Store has two pools:
//
//	writer  one connection (SetMaxOpenConns(1)). Every write is a transaction
//	        on it, started with BEGIN IMMEDIATE. Writers queue in database/sql
//	        for that connection, in Go, honouring their contexts; none of them
//	        ever sees SQLITE_BUSY from another writer of this process.
//	readers a pool of query_only connections. In WAL mode readers never block
//	        the writer nor each other, and see every transaction committed
//	        before their query began.
//
// Read-modify-write operations (UpdateSession, AddMessage's seq,
// AcquireLock, AcquireLease) run entirely inside the writer's transaction,
// so they are atomic without retries.
//
// # Leases and fencing
//
// A session lease (store/leases.go) is one row of session_leases, live
// while its node's heartbeat is, in its generation; its epoch only grows
// (a released lease keeps its row). A fenced write
// (AppendEventsFenced, UpdateSessionFenced, SetMessageStateFenced) reads
// the lease first in its own writer transaction and writes nothing unless
// the epoch is its fence's; as there is one writer, no takeover can come
// between the check and the commit. Expiry is timed by the Store's clock
// (the process's time, as for the locks): a SQLite file is written by one
// machine's processes, which share that clock. Fencing does not look at
// the time at all. Another process on the same file (harvest token create while
// harvest serve runs) is serialised by SQLite's own lock; busy_timeout
// (10 s) makes it wait instead of failing.
//
// # Durability
//
// journal_mode=WAL and synchronous=FULL on every connection: a commit returns
// after the WAL is fsynced, so a write whose call returned nil survives a
// process crash and a power loss. NORMAL would survive a process crash but
// could lose the last commits on power loss, and the journal fans an event
// out as soon as its commit returns: a lost event's seq would then be given
// to a different event after the restart, and a client resuming from it
// would silently skip one. FULL costs one fsync per transaction; the journal
// amortises it by committing events in batches (group commit).
//
// The database file is created 0600: it holds token hashes and agent
// conversations. SQLite gives its -wal and -shm files the same mode.
//
// # Space
//
// A file is made with auto_vacuum=INCREMENTAL (the pragma is given before
// the first table), so what event retention removes
// (store.Store.CompactEvents) is given back to the file system after
// each batch: PRAGMA incremental_vacuum moves the free pages to the end
// of the file and truncates it (at the next checkpoint for the WAL). A
// file made before this version has auto_vacuum=NONE: the pages freed
// stay in it and later writes reuse them (the file stops growing, but does
// not shrink). Converting such a file is one offline rewrite, with the
// server stopped:
//
//	sqlite3 harvest.db 'PRAGMA auto_vacuum=INCREMENTAL; VACUUM;'
//
// (it needs free space for a copy of the database while it runs). From
// then on retention shrinks it as above.
package sqlite
