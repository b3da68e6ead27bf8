package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/store"
)

// Self-fencing: a node acts for a session only until its lease's
// deadline on its own clock, and a new owner acts only once the old
// owner's deadline has surely passed. See "Self-fencing" in nodes.go.

// fenceMargin is how long before its lease may run out (sent+TTL, from
// when the acquire or renewal that succeeded was sent) a node stops
// acting for a session: TTL/6 (1.67 s at the default TTL of 10 s). The
// box's watchdog kills its processes at the same deadline. It covers the
// node's own delay in stopping (its timer firing late on a loaded
// machine, the agent's kill) and leaves two renewals (every TTL/3) to
// succeed before it.
func fenceMargin(ttl time.Duration) time.Duration { return ttl / 6 }

// fenceSkew is how long after the store's expiry of the previous owner's
// lease a new owner waits before it acts (takeoverWait): TTL/6 (1.67 s at
// the default TTL). The old owner stopped fenceMargin before that expiry
// on its clock; the skew bound covers the store's clock running ahead of
// the old owner's (a step forward of PostgreSQL's clock, a drift) by up to
// that much more. So the old owner's tools are dead fenceMargin+fenceSkew
// (TTL/3) before the new owner's start, as long as the store's clock and
// the nodes' monotonic clocks do not disagree by more than fenceSkew over
// a TTL.
func fenceSkew(ttl time.Duration) time.Duration { return ttl / 6 }

// errDeadline: the lease's renew deadline passed on this node's clock
// before a renewal succeeded. It unwraps to store.ErrLeaseLost.
var errDeadline = fmt.Errorf("%w: its renew deadline passed on this node's clock before a renewal succeeded (the store is slow or out of reach, or this node was paused)", store.ErrLeaseLost)

// errFenced is what a runner's fenced write fails with once its lease is
// gone on this node: written nowhere. It unwraps to store.ErrLeaseLost.
var errFenced = fmt.Errorf("%w: this node no longer holds the session's lease", store.ErrLeaseLost)

// pastDeadline is loseLease's due for a lease whose deadline passed.
func pastDeadline(h *held) bool { return !time.Now().Before(h.deadline) }

// extendLocked records a renewal of h sent at sent (under Manager.mu),
// unless h's deadline passed already: then the node stopped acting (or is
// about to, fenceDue), the box's watchdog killed its processes, and it
// reports false.
func (m *Manager) extendLocked(h *held, l store.Lease, sent time.Time) bool {
	if pastDeadline(h) {
		return false
	}
	h.lease, h.sent = l, sent
	h.deadline = sent.Add(m.leaseTTL() - fenceMargin(m.leaseTTL()))
	h.timer.Reset(time.Until(h.deadline))
	return true
}

// fenceDue is h's timer: at its deadline the lease is lost here, whether
// the renewal returned or not; the runner stops at once.
func (m *Manager) fenceDue(h *held) {
	m.loseLease(h.lease, errDeadline, func(cur *held) bool { return cur == h && pastDeadline(h) })
}

// takeoverWait is when a runner of this node's new lease l may act:
// when the previous lease prev (known: read just before the acquire) was
// another ownership that ran out, fenceSkew after its expiry on the
// store's clock (the store's time at the acquire is l.Expires-TTL); when
// the epoch moved by more than one meanwhile, fenceSkew from now. A
// released lease (its owner stopped, flushed and let go) or a first one
// needs no wait.
func (m *Manager) takeoverWait(prev store.Lease, known bool, l store.Lease) time.Time {
	now := time.Now()
	skew := fenceSkew(m.leaseTTL())
	switch {
	case known && (prev.Epoch == 0 || prev.Node == ""):
		return time.Time{}
	case known && prev.Epoch == l.Epoch && prev.Node == l.Node:
		return time.Time{} // still ours: a renewal
	case known && prev.Epoch+1 == l.Epoch:
		at := l.Expires.Add(-m.leaseTTL())
		if wait := skew - at.Sub(prev.Expires); wait > 0 {
			return now.Add(wait)
		}
		return time.Time{}
	case !known && l.Epoch == 1:
		return time.Time{} // never leased before
	}
	return now.Add(skew)
}

// waitFence holds a runner back until its lease's notBefore
// (takeoverWait): false when it was stopped meanwhile.
func (r *runner) waitFence() bool {
	d := time.Until(r.notBefore)
	if d <= 0 {
		return true
	}
	r.log.Info("waiting for the previous owner's lease deadline to pass surely before acting", "wait", d.Round(time.Millisecond))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// renewer renews this node's leases every TTL/3 until Close, and during
// Close while a runner still holds one (the runners give theirs up as
// they stop; one that takes longer than a TTL to stop would otherwise
// lose its lease and with it the events that say how it stopped).
func (m *Manager) renewer() {
	ttl := m.leaseTTL()
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		<-t.C
		if m.base.Err() != nil && !m.runnerHoldsLease() {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(m.base), ttl/3)
		m.renewLeases(ctx)
		cancel()
	}
}

// runnerHoldsLease reports whether a runner runs under a lease this
// node holds.
func (m *Manager) runnerHoldsLease() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, h := range m.node.held {
		if r := m.runners[id]; r != nil && r.fence.Epoch == h.lease.Epoch {
			return true
		}
	}
	return false
}

// fencedLog journals under one lease; nothing once the lease is gone
// here (lost, or its deadline passed: nodes_fence.go).
type fencedLog struct {
	j    *journal.Journal
	f    store.Fence
	gone func() bool
}

func (l fencedLog) Append(ev event.Event) (int64, error) {
	if l.gone() {
		return 0, errFenced
	}
	return l.j.AppendFenced(l.f, ev)
}

func (l fencedLog) AppendSync(ctx context.Context, ev event.Event) (event.Event, error) {
	if l.gone() {
		return ev, errFenced
	}
	return l.j.AppendSyncFenced(ctx, l.f, ev)
}

// fencedStore is a runner's store in several-node mode: its session's
// updates and message deliveries are fenced with the runner's lease, and
// one refused stops the runner (lost). Once the lease is gone here (lost,
// or its deadline passed) they fail without reaching the store.
type fencedStore struct {
	store.Store
	f    store.Fence
	lost func(error)
	gone func() bool
}

func (s fencedStore) UpdateSession(ctx context.Context, id string, fn func(*store.Session) error) (*store.Session, error) {
	if id != s.f.Session {
		return s.Store.UpdateSession(ctx, id, fn)
	}
	if s.gone() {
		return nil, errFenced
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
	if s.gone() {
		return errFenced
	}
	err := s.Store.SetMessageStateFenced(ctx, s.f, id, state, turn)
	if errors.Is(err, store.ErrLeaseLost) {
		s.lost(err)
	}
	return err
}

// The boxes' fences: a runner arms its box's fence (sandbox.Fence) at
// its lease's deadline as soon as the box is started or reattached,
// before any command runs in it, and the renewer moves every armed box's
// fence on to the new deadline after each renewal. A box whose node can
// no longer renew (paused, killed, cut off) is thus ended by its own
// agent at the node's deadline.

// leaseDeadline is the deadline of this node's lease of session id at
// epoch; false when it holds none.
func (m *Manager) leaseDeadline(id string, epoch int64) (time.Time, bool) {
	if m.node == nil {
		return time.Time{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.node.held[id]
	if h == nil || h.lease.Epoch != epoch {
		return time.Time{}, false
	}
	return h.deadline, true
}

// armBox arms sb's fence at the runner's lease's deadline and has the
// renewer keep it moving (several nodes; nothing on one). A lease gone
// meanwhile is errFenced: the box is not used.
func (r *runner) armBox(ctx context.Context, sb *sandbox.Sandbox) error {
	if r.fence.Epoch == 0 {
		return nil
	}
	r.mu.Lock()
	r.armed = sb
	r.mu.Unlock()
	dl, ok := r.d.host.leaseDeadline(r.id, r.fence.Epoch)
	if !ok {
		return errFenced
	}
	if _, err := sb.Fence(ctx, dl); err != nil {
		return fmt.Errorf("arming the fence of box %s: %w", sb.ID(), err)
	}
	return nil
}

// disarmed forgets sb as the armed box (it is gone).
func (r *runner) disarmed(sb *sandbox.Sandbox) {
	r.mu.Lock()
	if r.armed == sb {
		r.armed = nil
	}
	r.mu.Unlock()
}

// disarm turns the box's fence off (a box left for the next owner after
// an orderly exit).
func (r *runner) disarm(ctx context.Context) {
	if r.fence.Epoch == 0 || r.box == nil {
		return
	}
	r.disarmed(r.box)
	if _, err := r.box.Fence(ctx, time.Time{}); err != nil {
		r.log.Warn("disarming the fence of the box left for the next owner (it ends at the last deadline)", "box", r.box.ID(), "err", err)
	}
}

// fenceBoxes moves the fences of the armed boxes of the sessions in
// renewed on to their new deadlines, all at once (a slow box delays no
// other), and returns when every call has returned or ctx ended.
func (m *Manager) fenceBoxes(ctx context.Context, renewed map[string]time.Time) {
	var wg sync.WaitGroup
	for id, dl := range renewed {
		m.mu.Lock()
		r := m.runners[id]
		m.mu.Unlock()
		if r == nil {
			continue
		}
		r.mu.Lock()
		sb := r.armed
		r.mu.Unlock()
		if sb == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := sb.Fence(ctx, dl); err != nil && sb.Alive() && ctx.Err() == nil {
				m.log.Warn("moving a box's fence on", "session", id, "box", sb.ID(), "err", err)
			}
		}()
	}
	wg.Wait()
}
