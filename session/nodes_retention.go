package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// Event retention: the janitor's part that keeps the store from growing
// forever (Config.EventRetention, harvest serve --event-retention).
//
// The events of a session that has not been live for EventRetention
// (suspended, stopped or failed, and its row not updated since) are
// compacted to the turn-level record: the bulky events (text, thinking,
// tool calls, terminal bytes) are removed and each run of them leaves an
// events.compacted marker with the seqs it stands for (package event's
// retention.go says what is kept and why; store/retention.go how one
// batch is done). Seqs are never renumbered: a reader resuming inside a
// removed run gets the marker, and a session that comes back goes on
// with the next seq.
//
// Each janitor round (nodes_gc.go), after the stale copies:
//
//	AcquireLock("harvest:event-retention")   one node at a time; the others
//	  │  (held, not ours: skip the round)    skip (a round is bounded by its
//	  ▼                                      context; the lock outlives it)
//	RetentionCandidates(cutoff, cursor)      sessions not live, updated before
//	  │  pages of retentionPage              cutoff = now − EventRetention,
//	  ▼                                      by (updated_at, id) from cursor
//	CompactEvents(id, cutoff, batch)         one transaction per batch; until
//	  │  ... until Done or Skipped           the session is done, or is live
//	  ▼                                      or updated again (fenced)
//	cursor = (updated_at, id)                only past a session finished
//	ReleaseLock
//
// The cursor is the node's, in memory: the first round after a start
// walks every session older than the cutoff (those compacted already cost
// two index lookups each in the query), later rounds only those that
// crossed the cutoff since, because a session that becomes a candidate
// again (it was resumed, then ended) has a new updated_at, after the
// cursor. A round that ends (its context) inside a session leaves the
// cursor before it: the next round goes on from the session's progress
// mark, in the store.
//
// Resuming a session races nothing: every batch re-reads the session's
// state and updated_at under its row lock in its own transaction, so a
// batch either committed before the resume's state change (and removed
// only what was past retention then) or sees the session live or
// updated and removes nothing. The events a resumed session appends come
// after its last seq and are never read by a batch that began before.
//
// The per-session bound on events (a live session with a million events)
// is not built: retention compacts only sessions that are not live, and
// a live session's runner reads its own recent events (repair.go). The
// journal's coalescing of live pieces (package journal) is what keeps a
// live session's events few.

// retentionLock is the store lock the node compacting events holds.
const retentionLock = "harvest:event-retention"

// Batch sizes: sessions listed per query, events read per transaction
// (each transaction holds SQLite's one writer for a few milliseconds).
const (
	retentionPage  = 100
	retentionBatch = 500
)

// retentionState is the retention janitor's cursor and counts.
type retentionState struct {
	mu     sync.Mutex
	cursor store.RetentionKey
	n      Retained
	// at is the clock's time at the last round's start (tests).
	at time.Time
	// batch is the events read per transaction (retentionBatch; tests
	// make it small), between is called after each batch that was not the
	// session's last (tests).
	batch   int
	between func(id string)
}

// Retained counts what event retention did since the Manager started.
type Retained struct {
	// Rounds counts the rounds this node compacted in (held the lock).
	Rounds int64
	// Sessions counts the sessions compacted to the end; Skipped those
	// found live or updated again partway.
	Sessions, Skipped int64
	// Events and Bytes are the events removed and their payloads' size.
	Events, Bytes int64
	// Failed counts the sessions passed over for an error of their own
	// (logged; tried again after a restart).
	Failed int64
}

// Retained returns what event retention did since the Manager started.
func (m *Manager) Retained() Retained {
	m.ret.mu.Lock()
	defer m.ret.mu.Unlock()
	return m.ret.n
}

// retentionHolder names this server in the retention lock: its node id,
// or, on a lone server, its process.
func (m *Manager) retentionHolder() string {
	if m.node != nil {
		return "node:" + m.node.cfg.ID
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("server:%s:%d", host, os.Getpid())
}

// retain is event retention's part of a janitor round (see the top of
// this file).
func (m *Manager) retain(ctx context.Context, round time.Duration) error {
	if m.cfg.EventRetention <= 0 {
		return nil
	}
	now := m.clock.Now()
	m.ret.mu.Lock()
	m.ret.at = now
	m.ret.mu.Unlock()
	holder := m.retentionHolder()
	if _, err := m.st.AcquireLock(ctx, retentionLock, holder, round+time.Minute); err != nil {
		if errors.Is(err, store.ErrLocked) {
			return nil // another node compacts this round
		}
		return fmt.Errorf("taking the retention lock: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := m.st.ReleaseLock(rctx, retentionLock, holder); err != nil {
			m.log.Warn("releasing the retention lock (it expires by itself)", "err", err)
		}
	}()
	m.ret.mu.Lock()
	m.ret.n.Rounds++
	cursor, batch := m.ret.cursor, m.ret.batch
	m.ret.mu.Unlock()
	if batch <= 0 {
		batch = retentionBatch
	}
	cutoff := now.Add(-m.cfg.EventRetention)
	var did Retained
	defer func() {
		if did.Events > 0 {
			m.log.Info("event retention: compacted the events of sessions not live since "+cutoff.UTC().Format(time.RFC3339),
				"sessions", did.Sessions, "events", did.Events, "bytes", did.Bytes, "skipped", did.Skipped)
		}
	}()
	for {
		cs, err := m.st.RetentionCandidates(ctx, cutoff, cursor, retentionPage)
		if err != nil {
			return fmt.Errorf("listing the sessions to compact: %w", err)
		}
		for _, c := range cs {
			if !c.Compacted {
				done, err := m.compactOne(ctx, c.ID, cutoff, batch, &did)
				switch {
				case err != nil && (errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil):
					return fmt.Errorf("compacting the events of session %s: %w", c.ID, err)
				case err != nil:
					// Not the store's state but this session's: the others
					// go on; it is tried again after a restart.
					m.log.Warn("event retention: skipping a session whose events could not be compacted", "session", c.ID, "err", err)
					m.ret.mu.Lock()
					m.ret.n.Failed++
					m.ret.mu.Unlock()
				case !done:
					return nil // the round's context ended: go on next round
				}
			}
			cursor = store.RetentionKey{UpdatedAt: c.UpdatedAt, ID: c.ID}
			m.ret.mu.Lock()
			m.ret.cursor = cursor
			m.ret.mu.Unlock()
		}
		if len(cs) < retentionPage {
			return nil
		}
	}
}

// compactOne compacts session id batch by batch until it is done, found
// live or updated again (done: true), or ctx ends (false).
func (m *Manager) compactOne(ctx context.Context, id string, cutoff time.Time, batch int, did *Retained) (bool, error) {
	for {
		if ctx.Err() != nil {
			return false, nil
		}
		c, err := m.st.CompactEvents(ctx, id, cutoff, batch)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return true, nil // deleted meanwhile
		case err != nil && ctx.Err() != nil:
			return false, nil
		case err != nil:
			return false, err
		}
		m.ret.mu.Lock()
		m.ret.n.Events += int64(c.Removed)
		m.ret.n.Bytes += c.Bytes
		did.Events += int64(c.Removed)
		did.Bytes += c.Bytes
		switch {
		case c.Skipped != "":
			m.ret.n.Skipped++
			did.Skipped++
		case c.Done:
			m.ret.n.Sessions++
			did.Sessions++
		}
		between := m.ret.between
		m.ret.mu.Unlock()
		if c.Skipped != "" || c.Done {
			return true, nil
		}
		if between != nil {
			between(id)
		}
	}
}
