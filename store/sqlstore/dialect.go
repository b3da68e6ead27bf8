package sqlstore

import "time"

// Clock is which of the database server's clocks Dialect.Now reads.
type Clock int

const (
	// ClockCall is the time of the call (PostgreSQL's clock_timestamp()):
	// the locks'.
	ClockCall Clock = iota
	// ClockStatement is one instant for the whole statement (PostgreSQL's
	// statement_timestamp()), so a statement compares and sets times
	// against the same now: the leases', nodes' and checkpoints'.
	ClockStatement
)

// LockMode is a row lock a read-modify-write takes on what it reads
// (Dialect.Lock).
type LockMode int

const (
	// LockUpdate: the row will be changed or deleted (FOR UPDATE).
	LockUpdate LockMode = iota
	// LockNoKeyUpdate: the row will be changed but not its key, so rows
	// that refer to it (a session's events) are not held up (FOR NO KEY
	// UPDATE).
	LockNoKeyUpdate
	// LockShare: the row must not change until the commit (FOR SHARE).
	LockShare
)

// Dialect is what differs between the databases, named: each method is one
// difference the package doc lists. The queries themselves are written once,
// in the SQL both databases speak, with ? placeholders.
type Dialect interface {
	// Name is the database's name, in front of every error ("sqlite").
	Name() string
	// Time encodes t for a time column (Time decodes it): SQLite's INTEGER
	// nanoseconds (0 for the zero time), PostgreSQL's timestamptz (NULL
	// for the zero time).
	Time(t time.Time) any
	// IsDuplicate reports a unique or primary key violation.
	IsDuplicate(err error) bool
	// IsMissingParent reports a foreign key violation: the row a row refers
	// to (a session) is gone.
	IsMissingParent(err error) bool

	// Lock is the clause a SELECT ends with to lock the rows it reads
	// until the commit: PostgreSQL's FOR UPDATE and kin; "" for SQLite,
	// whose one writer runs a whole write transaction alone.
	Lock(m LockMode) string
	// Now is the SQL for the instant a lock, lease or node's expiry is
	// judged at, and its arguments; After is that instant plus d. SQLite:
	// a ? bound to now, the Store's clock (a SQLite file is written by one
	// machine's processes, which share it). PostgreSQL: the server's clock
	// (c says which of its clocks), so nodes whose clocks differ agree.
	Now(c Clock, now time.Time) (string, []any)
	After(c Clock, now time.Time, d time.Duration) (string, []any)

	// ScopeLock is the statement that makes the writes of one scope (a
	// memory scope: two keys, a space and a hash of the scope) run one at
	// a time, held to the commit: PostgreSQL's pg_advisory_xact_lock; ""
	// for SQLite, whose one writer already does.
	ScopeLock(space, key int32) (string, []any)
	// Contains is the condition that col contains the text bound to its
	// one ?, folding ASCII case only: SQLite's instr(lower(col),
	// lower(?)) > 0, PostgreSQL's strpos with the text COLLATE "C" (so its
	// lower() folds as SQLite's, whatever the database's locale).
	Contains(col string) string

	// JSONAbsent is what an optional JSON column holds when the value is
	// absent: SQLite's '' (its columns are NOT NULL TEXT), PostgreSQL's
	// NULL. JSONPresent is the condition that col holds a value.
	JSONAbsent() any
	JSONPresent(col string) string
	// JSONText and JSONInt extract a field of a JSON object column as text
	// or as an integer, written as the database's expression indexes are
	// (SQLite's json_extract(col, '$.field'), PostgreSQL's col->>'field'),
	// so a query using them uses the index.
	JSONText(col, field string) string
	JSONInt(col, field string) string

	// NoLimit is the LIMIT argument that sets no limit: SQLite's -1,
	// PostgreSQL's NULL.
	NoLimit() any

	// Reclaim is the statement that gives the space of deleted rows back
	// to the file system after event retention removed some: SQLite's
	// PRAGMA incremental_vacuum (a no-op in a file made without
	// auto_vacuum); "" for PostgreSQL, whose autovacuum makes the space
	// reusable by itself.
	Reclaim() string
}
