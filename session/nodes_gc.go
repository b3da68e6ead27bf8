package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/store"
)

// Collecting what a node no longer needs: the janitor.
//
// A session leaves things on the machine that ran it: its workspace
// directory (DataDir/workspaces/session/{id}) and, with disks, its image
// (DataDir/disks/session/{id}.img), mounted at that directory through a
// loop device. Delete removes them on the node that handles it; what no
// request ever removes is collected here:
//
//   - a deleted session's leftovers: the node that deleted it was another
//     one, or the delete failed halfway, or this node was down;
//   - with several nodes that do not share the data directory, the copy of
//     a session another node has taken over and restored (the session's
//     checkpoint names another copy: store.Checkpoint.Instance): this
//     copy is stale for good — if the session comes back here, it is
//     restored from the checkpoint over it anyway (nodes_carry.go);
//   - with several nodes, the nodes whose heartbeat ran out NodeGone ago
//     (store.RemoveDeadNodes; their leases stay until taken over);
//   - with Config.EventRetention, the bulky events of sessions not live
//     for that long (nodes_retention.go).
//
// What is never removed: anything of a session this node runs (a runner,
// even one stopping) or holds the lease of, or is deleting; the copy of a
// session whose checkpoint names this copy or that has no checkpoint
// (this copy is then the current one, or the only one: a suspended
// session resumes from it); workflows' directories (their nodes share the
// data directory). With --shared-data (nodes sharing the data directory:
// Config.CarryMax < 0) no copy is stale — every node sees the one copy —
// so nothing is removed but dead nodes; a lone server
// removes only the leftovers of deleted sessions, as its Delete would.
//
// Each session is decided and removed under its gate and (several nodes)
// its claim, so a takeover, a create or a delete of the same session waits
// for it, and it re-reads what it decides on under them. Removing a disk
// unmounts it lazily (a box still holding it keeps it until it ends; the
// next round sees the loop device gone) and deletes its image, then the
// directory.
//
// The janitor is one goroutine (startJanitor, from Recover; owned by
// Manager.builds): a round at once, then every CleanEvery on the
// Manager's clock, until Close.

// DefaultCleanEvery is Config.CleanEvery's default.
const DefaultCleanEvery = 10 * time.Minute

// DefaultNodeGone is Config.NodeGone's default: an hour without a
// heartbeat. A node is listed (ListNodes) only while its heartbeat is
// live anyway; this only bounds the table.
const DefaultNodeGone = time.Hour

// startJanitor starts the goroutine that collects, now and every
// CleanEvery, what this node no longer needs (Recover calls it once).
func (m *Manager) startJanitor() {
	m.builds.Add(1)
	go func() {
		defer m.builds.Done()
		for {
			// The next round is due CleanEvery after this one began, not
			// after it ended: a clock that moved on meanwhile (a test's)
			// is not missed.
			start := m.clock.Now()
			ctx, cancel := context.WithTimeout(m.base, max(m.cfg.CleanEvery, time.Minute))
			m.clean(ctx, start)
			cancel()
			at, stop := m.clock.At(start.Add(m.cfg.CleanEvery))
			select {
			case <-at:
				stop()
			case <-m.base.Done():
				stop()
				return
			}
		}
	}()
}

// cleaned counts what the janitor removed (Stats and tests).
type cleaned struct {
	rounds, copies, nodes int64
}

// clean is one round of the janitor, begun at start (its clock's time).
func (m *Manager) clean(ctx context.Context, start time.Time) {
	n, err := m.collectStale(ctx)
	if err != nil && ctx.Err() == nil {
		m.log.Warn("collecting the workspaces and disks of sessions this node no longer has", "err", err)
	}
	var nodes []string
	if m.node != nil {
		nodes, err = m.st.RemoveDeadNodes(ctx, m.cfg.NodeGone)
		if err != nil && ctx.Err() == nil {
			m.log.Warn("removing the dead nodes", "err", err)
		}
		if len(nodes) > 0 {
			m.log.Info("removed the nodes dead for long", "nodes", nodes, "gone", m.cfg.NodeGone)
		}
	}
	if err := m.retain(ctx, max(m.cfg.CleanEvery, time.Minute)); err != nil && ctx.Err() == nil {
		m.log.Warn("event retention: compacting the events of sessions not live for long", "err", err)
	}
	m.gc.mu.Lock()
	m.gc.n.rounds++
	m.gc.n.copies += int64(n)
	m.gc.n.nodes += int64(len(nodes))
	m.gc.began = start
	if m.gc.done != nil {
		close(m.gc.done)
	}
	m.gc.done = make(chan struct{})
	m.gc.mu.Unlock()
}

// gcState is the janitor's counts.
type gcState struct {
	mu    sync.Mutex
	n     cleaned
	began time.Time     // when the last round to end began
	done  chan struct{} // closed at the end of the next round (nil: none yet asked)
}

// cleanRound returns the janitor's counts so far and a channel closed at
// the end of its next round (tests).
func (m *Manager) cleanRound() (cleaned, <-chan struct{}) {
	n, _, done := m.cleanRoundBegan()
	return n, done
}

// cleanRoundBegan is cleanRound with when the last round to end began:
// a round that began before a time is done when began is not before it,
// else done is closed at the end of a later one (tests).
func (m *Manager) cleanRoundBegan() (cleaned, time.Time, <-chan struct{}) {
	m.gc.mu.Lock()
	defer m.gc.mu.Unlock()
	if m.gc.done == nil {
		m.gc.done = make(chan struct{})
	}
	return m.gc.n, m.gc.began, m.gc.done
}

// collectStale removes the workspace copies and disks of the sessions
// this node no longer has (see the top of this file) and returns how many
// sessions' it removed.
func (m *Manager) collectStale(ctx context.Context) (int, error) {
	if m.node != nil && m.carry == nil {
		return 0, nil // --shared-data: the one copy is every node's
	}
	ids, err := m.localSessions()
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, id := range ids {
		if ctx.Err() != nil {
			break
		}
		removed, err := m.collectOne(ctx, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("session %s: %w", id, err))
		}
		if removed {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// localSessions lists the sessions with a workspace directory or a disk
// image in this node's data directory.
func (m *Manager) localSessions() ([]string, error) {
	var ids []string
	dirs, err := os.ReadDir(filepath.Join(m.cfg.DataDir, "workspaces", "session"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, d := range dirs {
		if d.IsDir() {
			ids = append(ids, d.Name())
		}
	}
	imgs, err := os.ReadDir(filepath.Join(m.cfg.DataDir, "disks", "session"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, f := range imgs {
		if id, ok := strings.CutSuffix(f.Name(), ".img"); ok && !f.IsDir() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// collectOne removes session id's copy here if it is stale (see the top
// of this file); removed says whether it did.
func (m *Manager) collectOne(ctx context.Context, id string) (removed bool, err error) {
	if !ValidID(id) {
		return false, nil // not a session's: not ours to judge
	}
	defer m.gates.lock(id)() // lock order: the gate, then the claim
	if m.node != nil {
		defer m.node.claims.lock(id)()
	}
	if m.inUse(id) {
		return false, nil
	}
	s, err := m.st.GetSession(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// Deleted: its leftovers go, on every kind of server.
		s = &store.Session{ID: id}
	case err != nil:
		return false, err
	case m.node == nil:
		return false, nil // a lone server's own session
	case s.Collab.Workflow != "":
		return false, nil
	default:
		stale, err := m.staleCopy(ctx, s)
		if err != nil || !stale {
			return false, err
		}
	}
	if m.inUse(id) { // (a runner started while the store was read)
		return false, nil
	}
	return true, m.removeCopy(s)
}

// inUse says whether this node runs session id, holds its lease or is
// deleting it.
func (m *Manager) inUse(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runners[id] != nil || m.deleting[id] {
		return true
	}
	return m.node != nil && m.node.held[id] != nil
}

// staleCopy says whether the copy of s here is not the current one and
// never will be: its checkpoint names another copy.
func (m *Manager) staleCopy(ctx context.Context, s *store.Session) (bool, error) {
	cp, err := m.st.GetCheckpoint(ctx, s.ID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil // this copy may be the only one
	}
	if err != nil {
		return false, fmt.Errorf("reading its checkpoint: %w", err)
	}
	inst, err := m.carry.instanceHere(s)
	if err != nil {
		return false, err
	}
	return inst != cp.Instance, nil
}

// removeCopy removes s's disk (unmounted, its image deleted) and
// workspace directory here.
func (m *Manager) removeCopy(s *store.Session) error {
	dir, err := WorkspaceDir(m.cfg.DataDir, Scope{Session: s.ID})
	if err != nil {
		return err
	}
	d := disk.Disk{Image: filepath.Join(m.cfg.DataDir, "disks", "session", s.ID+".img"), Dir: dir}
	if err := m.removeImage(d); err != nil {
		return fmt.Errorf("removing its disk: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing its workspace: %s", m.hideDataDir(err.Error()))
	}
	m.carry.forget(s.ID)
	m.log.Info("removed the workspace of a session this node no longer has", "session", s.ID)
	return nil
}
