package store

import (
	"context"
	"time"
)

// Event retention (package event's retention.go says what is kept and
// how a reader sees what was removed; package session's janitor runs it).
//
// CompactEvents works on one session in bounded batches, each one write
// transaction that:
//
//   - reads the session's row under a lock (PostgreSQL: FOR NO KEY
//     UPDATE, which a session update waits for and an event insert does
//     not; SQLite: its one writer) and does nothing unless the session is
//     not live (suspended, stopped, failed) and was last updated before
//     the given instant. So a session resumed meanwhile is fenced: its
//     resume's state change waits for the batch, and no batch after it
//     removes anything. Two nodes compacting one session run one batch
//     at a time, each going on from the other's progress.
//   - reads the next events from the session's progress mark (the
//     event_retention row: every event through Through has been
//     compacted) and replaces each run of bulky events (event.Bulky; a
//     marker already there, from an earlier batch, joins its run) by one
//     events.compacted marker at the run's last seq, From its first.
//   - moves the progress mark to the last event it read.
//
// Seqs are never renumbered and LastSeq never goes back (the marker keeps
// a compacted tail's last seq), so the journal goes on with the next seq
// when the session comes back.
//
// Space: SQLite gives the freed pages back to the file system after each
// batch (PRAGMA incremental_vacuum) in a database made by this version;
// one made before it keeps them for reuse by later writes (its file does
// not shrink) until it is converted once, offline (store/sqlite's doc).
// PostgreSQL's autovacuum makes the deleted rows' space reusable (VACUUM
// FULL or pg_repack gives it back to the file system).

// RetentionCandidate is a session whose events retention may compact
// (RetentionCandidates): not live, last updated at UpdatedAt. Compacted
// says whether every event it has is compacted already (nothing to do).
type RetentionCandidate struct {
	ID        string
	UpdatedAt time.Time
	Compacted bool
}

// RetentionKey is a place in the list RetentionCandidates walks: by
// UpdatedAt, then ID. The zero key is its start.
type RetentionKey struct {
	UpdatedAt time.Time
	ID        string
}

// Compacted is what one CompactEvents call did.
type Compacted struct {
	// Removed is how many events it removed, Bytes their payloads' size,
	// Markers how many events.compacted events the session has more (a
	// marker merged into a new run counts -1).
	Removed, Markers int
	Bytes            int64
	// Through is the session's progress mark after the call: every event
	// with a seq up to it is compacted.
	Through int64
	// Done: the session has no event after Through (at the time of the
	// call): nothing more to do until it has.
	Done bool
	// Skipped, when not empty, says why nothing was done: the session is
	// live ("live") or was updated at or after idleBefore ("active").
	Skipped string
}

// EventRetention is the part of a Store the retention janitor uses.
type EventRetention interface {
	// RetentionCandidates lists the sessions that are not live and were
	// last updated before before, after key after in the order (UpdatedAt,
	// ID), at most limit (> 0). Each says whether it has events not yet
	// compacted.
	RetentionCandidates(ctx context.Context, before time.Time, after RetentionKey, limit int) ([]RetentionCandidate, error)
	// CompactEvents compacts at most batch (> 0) of session id's events
	// after its progress mark, in one transaction, if the session is not
	// live and was last updated before idleBefore (see the top of this
	// file). A missing session is ErrNotFound.
	CompactEvents(ctx context.Context, id string, idleBefore time.Time, batch int) (Compacted, error)
}

// Skipped reasons (Compacted.Skipped).
const (
	SkippedLive   = "live"
	SkippedActive = "active"
)
