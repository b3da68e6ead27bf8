package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// Leases and takeover: who runs a session, and taking over those nobody
// does. See nodes.go for the design and its state machine.

// nodeState is the Manager's part of several-node mode.
type nodeState struct {
	cfg NodeConfig
	// claims serialise, per session, taking a lease and writing under it
	// (Create, Send, the takeover) against giving it up (a runner's exit):
	// a lease is never released between a send's check and its write.
	claims gates
	// held: the leases this node holds, by session (under Manager.mu).
	// They are all of generation gen: the node's heartbeat is their
	// lease (store/leases.go).
	held map[string]*held
	// The node's heartbeat (nodes_fence.go), under Manager.mu: gen is the
	// generation the held leases are in (0: none, the next heartbeat
	// starts one); sent is when the heartbeat or acquire that last
	// confirmed it was sent (this process's clock), deadline is
	// sent+TTL-fenceMargin: the node acts for its sessions until then and
	// no longer; timer fires at deadline (fenceDue); moved is the last
	// Node.Moved seen (-1: none yet).
	gen      int64
	sent     time.Time
	deadline time.Time
	timer    *time.Timer
	moved    int64
	// due is deadline as nanoseconds after base (this process's
	// monotonic clock), for the runners' fenced writes to read without
	// Manager.mu (pastDeadline); 0 before the first heartbeat.
	base time.Time
	due  atomic.Int64
	// beating holds one token: one heartbeat at a time (the renewer's, or
	// an acquire's when the node has no live generation).
	beating chan struct{}
	// kept is closed when the keeper has returned (its leave done): the
	// renewer beats until then and no runner holds a lease.
	kept chan struct{}
	// place serialises checking this node's room and taking a lease for a
	// new or unowned session (Create, takeover), so that two of them do
	// not both take the last place.
	place sync.Mutex
	// kick asks the keeper for a takeover scan now (a place came free).
	kick chan struct{}
	// scan is the takeover's state (nodes_takeover.go).
	scan scanState
}

// held is a lease this node holds.
type held struct {
	lease store.Lease
	// since is when this node took it (its clock): a read of the node's
	// leases sent before then may not show it (checkHeld).
	since time.Time
	// notBefore is when a runner started under this lease may act (the
	// previous owner's deadline has surely passed): see takeoverWait.
	notBefore time.Time
	// gone is set once the lease is lost or the node's deadline passed:
	// the runner's fenced writes then fail here, without a round trip.
	gone *atomic.Bool
}

func (m *Manager) leaseTTL() time.Duration { return m.node.cfg.TTL }

// Owner says which node owns the session, when another live node does
// (elsewhere true, with its id and address), for a caller that forwards
// the session's requests there. With one node, or when this node owns
// it, or nobody does, elsewhere is false: handle the request here.
func (m *Manager) Owner(ctx context.Context, id string) (node store.Node, elsewhere bool, err error) {
	if m.node == nil || !ValidID(id) {
		return store.Node{}, false, nil
	}
	l, err := m.st.GetLease(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Node{}, false, nil
	}
	if err != nil {
		return store.Node{}, false, fmt.Errorf("reading the lease of session %s: %w", id, err)
	}
	if l.Node == "" || l.Node == m.node.cfg.ID {
		return store.Node{}, false, nil
	}
	nodes, err := m.st.ListNodes(ctx)
	if err != nil {
		return store.Node{}, false, fmt.Errorf("listing the nodes: %w", err)
	}
	for _, n := range nodes {
		if n.ID == l.Node {
			return n, n.Addr != "", nil
		}
	}
	return store.Node{}, false, nil // its node is dead: the lease runs out soon
}

// claim makes this node the owner of session id (taking its lease unless
// it holds it) and returns with the session's claim held: call unlock
// once what is written under the lease is written and its runner woken.
// Another node holding the lease is an *ElsewhereError. With one node it
// does nothing.
func (m *Manager) claim(ctx context.Context, id string) (unlock func(), err error) {
	if m.node == nil {
		return func() {}, nil
	}
	unlock = m.node.claims.lock(id)
	m.mu.Lock()
	h := m.node.held[id]
	m.mu.Unlock()
	if h == nil {
		if err := m.acquire(ctx, id); err != nil {
			unlock()
			return nil, err
		}
	}
	return unlock, nil
}

// acquire takes the lease of session id for this node and fences the
// session's events with it. Called with the session's claim held.
func (m *Manager) acquire(ctx context.Context, id string) error {
	// The lease as it was, to know how long the previous owner may still
	// act (takeoverWait).
	prev, perr := m.st.GetLease(ctx, id)
	if perr != nil && !errors.Is(perr, store.ErrNotFound) {
		return fmt.Errorf("reading the lease of session %s: %w", id, perr)
	}
	// A lease is taken in the node's live generation: after a lapse (or
	// at the start) a heartbeat starts one first, which ends the leases of
	// the one before (nodes_fence.go). An acquire whose generation ended
	// here while it was on its way (the node's deadline passed: a busy
	// machine, a slow store) is made once more, in the next generation.
	var l store.Lease
	for attempt := 1; ; attempt++ {
		gen, err := m.liveGen(ctx)
		if err != nil {
			return fmt.Errorf("taking the lease of session %s: %w", id, err)
		}
		sent := time.Now()
		l, err = m.st.AcquireLease(ctx, id, m.node.cfg.ID, m.leaseTTL())
		if err != nil {
			var he *store.LeaseHeldError
			if errors.As(err, &he) {
				e := &ElsewhereError{Session: id, Node: he.Lease.Node}
				if n, ok, _ := m.Owner(ctx, id); ok {
					e.Addr = n.Addr
				}
				return e
			}
			if errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("session %s: %w", id, ErrNotFound)
			}
			return fmt.Errorf("taking the lease of session %s: %w", id, err)
		}
		if err := m.j.Fence(l.Fence(), func(err error) { m.leaseLost(l, err) }); err != nil {
			m.st.ReleaseLease(context.WithoutCancel(ctx), l)
			return err
		}
		h := &held{lease: l, since: sent, notBefore: m.takeoverWait(prev, perr == nil, l), gone: new(atomic.Bool)}
		m.mu.Lock()
		ok, stale := m.adoptLocked(gen, l.Gen, sent)
		if ok {
			m.node.held[id] = h
		}
		m.mu.Unlock()
		m.loseHeld(stale, errGeneration)
		if ok {
			break
		}
		// The lease is of a generation this node no longer acts in, which
		// its next heartbeat ends. Not released: whoever takes it next
		// waits for that generation's end.
		m.j.Unfence(id)
		if attempt == 2 || ctx.Err() != nil {
			return fmt.Errorf("taking the lease of session %s: %w", id, errDeadline)
		}
	}
	m.counts.leasesTaken.Add(1)
	m.log.Debug("took the lease", "session", id, "epoch", l.Epoch, "gen", l.Gen)
	return nil
}

// leaseLost: l is not this node's any more (a fenced write was refused,
// or its session was deleted). The session's runner, if it runs under l,
// stops at once (nodes.go: the turn is interrupted).
func (m *Manager) leaseLost(l store.Lease, cause error) {
	m.mu.Lock()
	h := m.node.held[l.Session]
	if h == nil || h.lease.Epoch != l.Epoch {
		h = nil
		if r := m.runners[l.Session]; r != nil && r.fence.Epoch == l.Epoch {
			r.cancel(errLeaseLost)
		}
	} else {
		delete(m.node.held, l.Session)
	}
	m.mu.Unlock()
	if h != nil {
		m.loseHeld([]*held{h}, cause)
	}
}

// loseHeld stops acting under the leases hs, which are no longer in
// held: their fenced writes fail here, their runners stop at once.
func (m *Manager) loseHeld(hs []*held, cause error) {
	if len(hs) == 0 {
		return
	}
	m.mu.Lock()
	for _, h := range hs {
		h.gone.Store(true)
		if r := m.runners[h.lease.Session]; r != nil && r.fence.Epoch == h.lease.Epoch {
			r.cancel(errLeaseLost)
		}
	}
	m.mu.Unlock()
	for _, h := range hs {
		m.counts.leasesLost.Add(1)
		m.j.Unfence(h.lease.Session)
		m.log.Warn("lost the lease of a session: its runner stops here; whichever node takes the session next recovers it", "session", h.lease.Session, "epoch", h.lease.Epoch, "err", cause)
	}
}

// giveUp releases h (the session's runner is gone and will not write
// again): its events are flushed first, so that none is refused.
// Called with the session's claim held.
func (m *Manager) giveUp(h *held) {
	id := h.lease.Session
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.j.Flush(ctx, id); err != nil {
		m.log.Warn("writing a session's last events before giving up its lease", "session", id, "err", err)
	}
	if err := m.st.ReleaseLease(ctx, h.lease); err != nil {
		m.log.Warn("releasing the lease of a session (it runs out with this node's generation)", "session", id, "err", err)
	}
	m.j.Unfence(id)
}

// dropHeld forgets this node's lease of session id when it is of epoch
// (under Manager.mu), returning it.
func (m *Manager) dropHeldLocked(id string, epoch int64) *held {
	if m.node == nil {
		return nil
	}
	h := m.node.held[id]
	if h == nil || h.lease.Epoch != epoch {
		return nil
	}
	delete(m.node.held, id)
	return h
}

// startKeeper starts the goroutines that keep this node's heartbeat —
// the lease of every session it holds — and take over the sessions nobody
// owns (Recover calls it once): the renewer (nodes_fence.go), which beats
// at once and then every TTL/3, and the keeper, apart so that a long scan
// never delays a heartbeat.
func (m *Manager) startKeeper() {
	m.builds.Add(2)
	go func() {
		defer m.builds.Done()
		defer close(m.node.kept)
		m.keep()
	}()
	go func() {
		defer m.builds.Done()
		m.renewer()
	}()
}

// keep runs every TTL/3 until Close: sweep the carried packs, take over
// the sessions whose lease ran out.
func (m *Manager) keep() {
	ttl := m.leaseTTL()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-m.base.Done():
			m.leave()
			return
		case <-t.C:
		case <-m.node.kick:
			t.Stop() // Go ≥ 1.23: no stale tick after Stop or Reset
		}
		ctx, cancel := context.WithTimeout(m.base, ttl)
		m.carry.sweep(ctx)
		if err := m.takeover(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("looking for sessions to take over", "err", err)
		}
		cancel()
		t.Reset(ttl / 3)
	}
}

// leave is the keeper's last act, at Close: leases it holds for no runner
// (a takeover that raced with Close) are given up; runners give up their
// own as they stop. The renewer's heartbeats say the node is leaving
// meanwhile (no address, no room: nothing is forwarded or placed here),
// and once no runner holds a lease it takes the node off the list
// (nodes_fence.go).
func (m *Manager) leave() {
	m.mu.Lock()
	var idle []string
	for id := range m.node.held {
		if m.runners[id] == nil {
			idle = append(idle, id)
		}
	}
	m.mu.Unlock()
	for _, id := range idle {
		unlock := m.node.claims.lock(id)
		m.mu.Lock()
		var h *held
		if m.runners[id] == nil {
			h = m.node.held[id]
			delete(m.node.held, id)
		}
		m.mu.Unlock()
		if h != nil {
			m.giveUp(h)
		}
		unlock()
	}
}
