package sqlstore

import "time"

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
}
