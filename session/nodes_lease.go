package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
	m.mu.Lock()
	m.node.held[id] = &held{lease: l, sent: sent}
	m.mu.Unlock()
	m.counts.leasesTaken.Add(1)
	m.log.Debug("took the lease", "session", id, "epoch", l.Epoch)
	return nil
}

// leaseLost: l is not this node's any more (a fenced write or a renewal
// was refused, or it could not be renewed in time). The session's runner,
// if it runs under l, stops at once, leaving the box alone.
func (m *Manager) leaseLost(l store.Lease, cause error) {
	m.mu.Lock()
	h := m.node.held[l.Session]
	mine := h != nil && h.lease.Epoch == l.Epoch
	if mine {
		delete(m.node.held, l.Session)
	}
	if r := m.runners[l.Session]; r != nil && r.fence.Epoch == l.Epoch {
		r.cancel(errLeaseLost)
	}
	m.mu.Unlock()
	if mine {
		m.counts.leasesLost.Add(1)
		m.j.Unfence(l.Session)
		m.log.Warn("lost the lease of a session: its runner stops here; the node that took it over goes on", "session", l.Session, "epoch", l.Epoch, "err", cause)
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

// startKeeper starts the goroutine that keeps this node's heartbeat and
// leases and takes over the sessions nobody owns (Recover calls it once).
func (m *Manager) startKeeper() {
	m.builds.Add(1)
	go func() {
		defer m.builds.Done()
		m.keep()
	}()
}

// keep runs every TTL/3 until Close: heartbeat, renew the leases held,
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
		m.renewLeases(ctx)
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
		for _, h := range hs {
			if time.Since(h.sent) > ttl-ttl/6 {
				m.leaseLost(h.lease, fmt.Errorf("the lease could not be renewed before it may run out: %w", err))
			}
		}
		m.log.Warn("renewing the leases; retrying", "leases", len(hs), "err", err)
		return
	}
	m.counts.leasesRenewed.Add(uint64(len(renewed)))
	ok := make(map[string]store.Lease, len(renewed))
	for _, l := range renewed {
		ok[l.Session] = l
	}
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
			if cur := m.node.held[l.Session]; cur != nil && cur.lease.Epoch == l.Epoch {
				cur.lease, cur.sent = l, sent
			}
			m.mu.Unlock()
			continue
		}
		m.leaseLost(h.lease, fmt.Errorf("the renewal found the lease taken over or released: %w", store.ErrLeaseLost))
	}
}

// fencedStore is a runner's store in several-node mode: its session's
// updates and message deliveries are fenced with the runner's lease, and
// one refused stops the runner (lost).
type fencedStore struct {
	store.Store
	f    store.Fence
	lost func(error)
}

func (s fencedStore) UpdateSession(ctx context.Context, id string, fn func(*store.Session) error) (*store.Session, error) {
	if id != s.f.Session {
		return s.Store.UpdateSession(ctx, id, fn)
	}
	v, err := s.Store.UpdateSessionFenced(ctx, s.f, fn)
	if errors.Is(err, store.ErrLeaseLost) {
		s.lost(err)
	}
	return v, err
}

func (s fencedStore) SetMessageState(ctx context.Context, session, id string, state store.MessageState, turn string) error {
	if session != s.f.Session {
		return s.Store.SetMessageState(ctx, session, id, state, turn)
	}
	err := s.Store.SetMessageStateFenced(ctx, s.f, id, state, turn)
	if errors.Is(err, store.ErrLeaseLost) {
		s.lost(err)
	}
	return err
}
