package session

import (
	"context"
	"slices"

	"github.com/harvest-dev/harvest/store"
)

// Taking over the sessions nobody owns: the keeper's scan, and which of
// them this node takes. See "Leases" and "Placement" in nodes.go.

// takeover claims the sessions that need a runner and that no node owns
// (never leased, released, or their owner's lease ran out: it died or
// paused) and starts them as Recover starts one: a live session's runner
// reattaches or replaces its box and marks a turn it finds interrupted; a
// suspended one with queued messages resumes.
func (m *Manager) takeover(ctx context.Context) error {
	ls, err := m.st.ExpiredLeases(ctx, store.LeaseFilter{States: []store.State{
		store.StatePending, store.StateProvisioning, store.StateIdle, store.StateWorking,
		store.StateCancelling, store.StateWaiting, store.StateSuspended,
	}})
	if err != nil {
		return err
	}
	var cands []*takeoverCand
	for _, l := range ls {
		if ctx.Err() != nil || m.isClosed() {
			return nil
		}
		m.mu.Lock()
		_, mine := m.node.held[l.Session]
		m.mu.Unlock()
		if mine || m.isDeleting(l.Session) {
			continue
		}
		s, err := m.st.GetSession(ctx, l.Session)
		if err != nil {
			continue // deleted meanwhile
		}
		if l.Epoch == 0 && s.State == store.StatePending && m.clock.Now().Sub(s.CreatedAt) < m.leaseTTL() {
			continue // just created: its node takes the lease in a moment
		}
		if s.State == store.StateSuspended {
			q, err := m.st.Messages(ctx, s.ID, store.MessageQueued)
			if err != nil || len(q) == 0 {
				continue
			}
		}
		cands = append(cands, &takeoverCand{s: s, l: l})
	}
	// Oldest first: with a bounded node (Capacity), the sessions queued
	// for a place start in the order they were created.
	slices.SortStableFunc(cands, func(a, b *takeoverCand) int { return a.s.CreatedAt.Compare(b.s.CreatedAt) })
	for _, c := range cands {
		if ctx.Err() != nil || m.isClosed() || m.isDeleting(c.s.ID) {
			return nil
		}
		unlock, full, err := m.claimIfRoom(ctx, c.s.ID)
		if full {
			return nil // the rest wait for a place here or on another node
		}
		if err != nil {
			continue // another node was quicker
		}
		m.counts.takenOver.Add(1)
		m.log.Info("taking over a session nobody owns", "session", c.s.ID, "state", c.s.State, "previous", c.l.Node, "epoch", c.l.Epoch)
		m.wake(c.s.ID, wakeOpts{start: true})
		unlock()
	}
	return nil
}

type takeoverCand struct {
	s *store.Session
	l store.Lease
}
