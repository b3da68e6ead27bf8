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
	held map[string]*held
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
	// sent is when the last acquire or renewal that succeeded was sent
	// (this process's clock): the lease is surely ours until sent+TTL.
	sent time.Time
	// deadline is sent+TTL-fenceMargin (this process's monotonic clock):
	// the node acts for the session until then and no longer, whether a
	// renewal is on its way or not (nodes_fence.go). Under Manager.mu.
	deadline time.Time
	// timer fires at deadline (fenceDue); reset at every renewal.
	timer *time.Timer
	// notBefore is when a runner started under this lease may act (the
	// previous owner's deadline has surely passed): see takeoverWait.
	notBefore time.Time
	// gone is set once the lease is lost or its deadline passed: the
	// runner's fenced writes then fail here, without a round trip.
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
	sent := time.Now()
	l, err := m.st.AcquireLease(ctx, id, m.node.cfg.ID, m.leaseTTL())
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
	h := &held{lease: l, sent: sent, deadline: sent.Add(m.leaseTTL() - fenceMargin(m.leaseTTL())),
		notBefore: m.takeoverWait(prev, perr == nil, l), gone: new(atomic.Bool)}
	m.mu.Lock()
	if old := m.node.held[id]; old != nil {
		old.timer.Stop()
	}
	m.node.held[id] = h
	h.timer = time.AfterFunc(time.Until(h.deadline), func() { m.fenceDue(h) })
	m.mu.Unlock()
	m.counts.leasesTaken.Add(1)
	m.log.Debug("took the lease", "session", id, "epoch", l.Epoch)
	return nil
}

// leaseLost: l is not this node's any more (a fenced write or a renewal
// was refused, or it could not be renewed in time). The session's runner,
// if it runs under l, stops at once (nodes.go: the turn is interrupted).
func (m *Manager) leaseLost(l store.Lease, cause error) {
	m.loseLease(l, cause, nil)
}

// loseLease is leaseLost when due(h) holds for this node's lease h of
// l's session and epoch (under Manager.mu; nil: always).
func (m *Manager) loseLease(l store.Lease, cause error, due func(*held) bool) {
	m.mu.Lock()
	h := m.node.held[l.Session]
	mine := h != nil && h.lease.Epoch == l.Epoch && (due == nil || due(h))
	if mine {
		delete(m.node.held, l.Session)
		h.gone.Store(true)
		h.timer.Stop()
	} else if due != nil {
		m.mu.Unlock()
		return
	}
	if r := m.runners[l.Session]; r != nil && r.fence.Epoch == l.Epoch {
		r.cancel(errLeaseLost)
	}
	m.mu.Unlock()
	if mine {
		m.counts.leasesLost.Add(1)
		m.j.Unfence(l.Session)
		m.log.Warn("lost the lease of a session: its runner stops here; whichever node takes the session next recovers it", "session", l.Session, "epoch", l.Epoch, "err", cause)
	}
}

// giveUp releases h (the session's runner is gone and will not write
// again): its events are flushed first, so that none is refused.
// Called with the session's claim held.
func (m *Manager) giveUp(h *held) {
	id := h.lease.Session
	h.timer.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.j.Flush(ctx, id); err != nil {
		m.log.Warn("writing a session's last events before giving up its lease", "session", id, "err", err)
	}
	if err := m.st.ReleaseLease(ctx, h.lease); err != nil {
		m.log.Warn("releasing the lease of a session (it runs out by itself)", "session", id, "err", err)
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

// startKeeper starts the goroutines that keep this node's heartbeat and
// leases and take over the sessions nobody owns (Recover calls it once):
// the keeper, and the renewer (nodes_fence.go), apart so that a long
// scan never delays a renewal.
func (m *Manager) startKeeper() {
	m.builds.Add(2)
	go func() {
		defer m.builds.Done()
		m.keep()
	}()
	go func() {
		defer m.builds.Done()
		m.renewer()
	}()
}

// keep runs every TTL/3 until Close: heartbeat, sweep the carried packs,
// take over the sessions whose lease ran out.
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
		if _, err := m.st.HeartbeatNode(ctx, store.Node{ID: m.node.cfg.ID, Addr: m.node.cfg.Addr, Capacity: m.advertised()}, ttl); err != nil && ctx.Err() == nil {
			m.log.Warn("heartbeat", "err", err)
		}
		m.carry.sweep(ctx)
		if err := m.takeover(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("looking for sessions to take over", "err", err)
		}
		cancel()
		t.Reset(ttl / 3)
	}
}

// leave is the keeper's last act, at Close: the node leaves the list (no
// request is forwarded to it any more), and leases it holds for no runner
// (a takeover that raced with Close) are given up; runners give up their
// own as they stop.
func (m *Manager) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.st.RemoveNode(ctx, m.node.cfg.ID); err != nil {
		m.log.Warn("leaving the nodes", "err", err)
	}
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

// renewLeases renews every lease this node holds. A renewal refused is a
// lost lease; one that fails (the store is unreachable) for so long that
// the lease may have run out is treated as lost too: the runner stops
// acting before another node may start.
func (m *Manager) renewLeases(ctx context.Context) {
	ttl := m.leaseTTL()
	m.mu.Lock()
	hs := make([]held, 0, len(m.node.held))
	for _, h := range m.node.held {
		hs = append(hs, *h)
	}
	m.mu.Unlock()
	if len(hs) == 0 {
		return
	}
	// All at once: one round trip, however many sessions this node runs
	// (a busy node renewing one by one could run out of time).
	ls := make([]store.Lease, len(hs))
	for i, h := range hs {
		ls[i] = h.lease
	}
	sent := time.Now()
	renewed, err := m.st.RenewLeases(ctx, ls, ttl)
	if err != nil {
		// Each lease's timer stops its session at its deadline if no
		// renewal succeeds before (fenceDue).
		m.log.Warn("renewing the leases; retrying", "leases", len(hs), "err", err)
		return
	}
	m.counts.leasesRenewed.Add(uint64(len(renewed)))
	ok := make(map[string]store.Lease, len(renewed))
	for _, l := range renewed {
		ok[l.Session] = l
	}
	extended := make(map[string]time.Time, len(renewed))
	defer func() { m.fenceBoxes(ctx, extended) }()
	for _, h := range hs {
		l, done := ok[h.lease.Session]
		m.mu.Lock()
		cur := m.node.held[h.lease.Session]
		m.mu.Unlock()
		if cur == nil || cur.lease.Epoch != h.lease.Epoch {
			continue // released or replaced meanwhile
		}
		if done {
			m.mu.Lock()
			late := false
			if cur := m.node.held[l.Session]; cur != nil && cur.lease.Epoch == l.Epoch {
				late = !m.extendLocked(cur, l, sent)
				if !late {
					extended[l.Session] = cur.deadline
				}
			}
			m.mu.Unlock()
			if late {
				m.loseLease(l, errDeadline, pastDeadline)
			}
			continue
		}
		m.leaseLost(h.lease, fmt.Errorf("the renewal found the lease taken over or released: %w", store.ErrLeaseLost))
	}
}
