package session

import (
	"context"
	"fmt"
	"slices"

	"github.com/harvest-dev/harvest/store"
)

// Placing sessions by capacity (several nodes, NodeConfig.Capacity > 0,
// or a node below its floor of free space). See "Placement" in nodes.go.

// advertised is the Capacity this node's heartbeat announces: its bound,
// or store.NodeFull while it is below its floor of free space, so that
// other nodes place no new session here.
func (m *Manager) advertised() int {
	if m.full() {
		return store.NodeFull
	}
	return m.node.cfg.Capacity
}

// capacity is this node's bound (0: none; always 0 with one node).
func (m *Manager) capacity() int {
	if m.node == nil {
		return 0
	}
	return m.node.cfg.Capacity
}

// hasRoomLocked says whether this node may take one more session (under
// Manager.mu).
func (m *Manager) hasRoomLocked() bool {
	c := m.capacity()
	return c <= 0 || len(m.node.held) < c
}

// claimIfRoom is claim for a session this node is not bound to run (a
// takeover): full, and nothing taken, when this node has no room (its
// Capacity, or its floor of free space: admission.go).
func (m *Manager) claimIfRoom(ctx context.Context, id string) (unlock func(), full bool, err error) {
	if m.node != nil && m.full() {
		return nil, true, nil
	}
	if m.capacity() <= 0 {
		unlock, err = m.claim(ctx, id)
		return unlock, false, err
	}
	m.node.place.Lock()
	defer m.node.place.Unlock()
	m.mu.Lock()
	room := m.hasRoomLocked()
	m.mu.Unlock()
	if !room {
		return nil, true, nil
	}
	unlock, err = m.claim(ctx, id)
	return unlock, false, err
}

// claimOrQueue is the claim of Create (its new session) and Send (a
// session that may have no owner): queued when this node does not hold
// the session and has no room. The lease is taken all the same, to
// journal what the caller writes, and is given up by release instead of
// running the session.
func (m *Manager) claimOrQueue(ctx context.Context, id string) (unlock func(), queued bool, err error) {
	// Below the floor of free space a node has no room either (a session
	// that reaches here then was admitted: a message to one queued for a
	// place, say).
	low := m.node != nil && m.full()
	if m.capacity() <= 0 && !low {
		unlock, err = m.claim(ctx, id)
		return unlock, false, err
	}
	m.node.place.Lock()
	defer m.node.place.Unlock()
	m.mu.Lock()
	queued = m.node.held[id] == nil && (low || !m.hasRoomLocked())
	m.mu.Unlock()
	unlock, err = m.claim(ctx, id)
	return unlock, queued, err
}

// queuedReason is the state reason of a session waiting for a place.
func (m *Manager) queuedReason() string {
	return fmt.Sprintf("queued: node %s runs its --max-sessions (%d) and no node had room; the first node with room starts it",
		m.node.cfg.ID, m.node.cfg.Capacity)
}

// release gives up the lease of a session claimOrQueue queued (called
// with the session's claim held, what was to be written under it
// journaled).
func (m *Manager) release(id string) {
	m.mu.Lock()
	h := m.node.held[id]
	delete(m.node.held, id)
	m.mu.Unlock()
	if h != nil {
		m.giveUp(h)
	}
	m.kickKeeper() // another queued session may be older
}

// kickKeeper asks the keeper for a takeover scan now: a place came free.
func (m *Manager) kickKeeper() {
	if m.capacity() <= 0 {
		return
	}
	select {
	case m.node.kick <- struct{}{}:
	default:
	}
}

// PlaceNew is where a new session should be created, for a caller that
// forwards creates (harvest serve): when this node is full (its Capacity,
// or below its floor of free space), another live node with room (ok
// true; the one with the most room, a node without a bound first; a node
// advertising store.NodeFull has none). Otherwise, or when every node is
// full, create it here (a node full by Capacity queues it; one below its
// floor refuses it: admission.go).
func (m *Manager) PlaceNew(ctx context.Context) (n store.Node, ok bool, err error) {
	if m.node == nil {
		return store.Node{}, false, nil
	}
	low := m.full()
	if m.capacity() <= 0 && !low {
		return store.Node{}, false, nil
	}
	m.mu.Lock()
	room := m.hasRoomLocked()
	m.mu.Unlock()
	if room && !low {
		return store.Node{}, false, nil
	}
	nodes, err := m.st.ListNodes(ctx)
	if err != nil {
		return store.Node{}, false, fmt.Errorf("listing the nodes to place a new session: %w", err)
	}
	free := func(n store.Node) int {
		switch {
		case n.Capacity == store.NodeFull:
			return 0 // below its floor of free space
		case n.Capacity <= 0:
			return int(^uint(0) >> 1)
		}
		return n.Capacity - n.Leases
	}
	nodes = slices.DeleteFunc(nodes, func(n store.Node) bool {
		return n.ID == m.node.cfg.ID || n.Addr == "" || free(n) <= 0
	})
	if len(nodes) == 0 {
		return store.Node{}, false, nil
	}
	best := slices.MaxFunc(nodes, func(a, b store.Node) int { return free(a) - free(b) })
	return best, true, nil
}
