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

// Self-fencing: a node acts for its sessions only until its heartbeat's
// deadline on its own clock, and a new owner acts only once the old
// owner's deadline has surely passed. See "Self-fencing" in nodes.go.
//
// The node's heartbeat is the lease of every session it holds (store's
// leases.go), so the deadline is the node's, one for all its sessions:
//
//	deadline = sent + TTL − fenceMargin
//
// where sent is when the heartbeat or acquire that last succeeded in the
// node's generation was sent. One timer (fenceDue) fires at it: every
// lease is lost at once, the runners stop, and the node's generation is
// over here — the next heartbeat names none (Gen 0), which starts a new
// one in the store and so ends the leases of the old one there, whether
// or not its heartbeat had run out in the store (a node whose heartbeats
// came back late, with its leases still live, would otherwise revive
// sessions it no longer runs). A heartbeat's or acquire's answer counts
// only if the node is still in the generation it was sent in and its
// deadline has not passed; an answer in another generation says the
// store ended the node's (its heartbeat ran out there, or another node
// took one of its sessions once it had): its leases are lost.

// fenceMargin is how long before its leases may run out (sent+TTL, from
// when the heartbeat or acquire that succeeded was sent) a node stops
// acting for its sessions: TTL/6 (1.67 s at the default TTL of 10 s). The
// boxes' watchdogs kill their processes at the same deadline. It covers
// the node's own delay in stopping (its timer firing late on a loaded
// machine, the agent's kill) and leaves two heartbeats (every TTL/3) to
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

// errDeadline: the node's heartbeat deadline passed on its clock before
// a heartbeat succeeded. It unwraps to store.ErrLeaseLost.
var errDeadline = fmt.Errorf("%w: this node's heartbeat deadline passed on its clock before a heartbeat succeeded (the store is slow or out of reach, or this node was paused)", store.ErrLeaseLost)

// errGeneration: the store ended this node's generation (its heartbeat
// ran out there). It unwraps to store.ErrLeaseLost.
var errGeneration = fmt.Errorf("%w: the store ended this node's generation (its heartbeat ran out there)", store.ErrLeaseLost)

// errFenced is what a runner's fenced write fails with once its lease is
// gone on this node: written nowhere. It unwraps to store.ErrLeaseLost.
var errFenced = fmt.Errorf("%w: this node no longer holds the session's lease", store.ErrLeaseLost)

// adoptLocked records an answer of the store, to a heartbeat or acquire
// sent at sent while the node was in generation sentGen, saying the node
// is live in generation gen (under Manager.mu). false: the answer does not
// count — the node's generation changed meanwhile here, or its deadline
// passed (fenceDue stops everything, or did). A new generation ends the
// held leases: they are returned, out of held, for loseHeld.
func (m *Manager) adoptLocked(sentGen, gen int64, sent time.Time) (bool, []*held) {
	nd := m.node
	if nd.gen != sentGen {
		return false, nil
	}
	if gen == sentGen {
		if !time.Now().Before(nd.deadline) {
			return false, nil
		}
		if sent.After(nd.sent) {
			m.extendLocked(sent)
		}
		return true, nil
	}
	stale := make([]*held, 0, len(nd.held))
	for id, h := range nd.held {
		stale = append(stale, h)
		delete(nd.held, id)
	}
	nd.gen = gen
	m.extendLocked(sent)
	return true, stale
}

// extendLocked moves the node's deadline on to sent+TTL-fenceMargin.
func (m *Manager) extendLocked(sent time.Time) {
	nd := m.node
	nd.sent, nd.deadline = sent, sent.Add(m.leaseTTL()-fenceMargin(m.leaseTTL()))
	nd.due.Store(max(1, int64(nd.deadline.Sub(nd.base))))
	if nd.timer == nil {
		nd.timer = time.AfterFunc(time.Until(nd.deadline), m.fenceDue)
	} else {
		nd.timer.Reset(time.Until(nd.deadline))
	}
}

// pastDeadline reports whether the node's deadline has passed on its
// clock, whether or not its timer (fenceDue) has fired yet: on a loaded
// machine the timer may fire late, after the box's own watchdog killed
// what ran in it at the same deadline, and a runner seeing its box die
// must not then write what it makes of that (a session failed, say) in
// the store, where its lease may not have run out yet.
func (nd *nodeState) pastDeadline() bool {
	due := nd.due.Load()
	return due != 0 && time.Since(nd.base) >= time.Duration(due)
}

// fenceDue is the deadline's timer: once the deadline passed, whether a
// heartbeat is on its way or not, every lease is lost here and the
// generation is over; the runners stop at once.
func (m *Manager) fenceDue() {
	m.mu.Lock()
	nd := m.node
	if nd.gen == 0 || time.Now().Before(nd.deadline) {
		m.mu.Unlock()
		return // moved on meanwhile
	}
	nd.gen = 0
	hs := make([]*held, 0, len(nd.held))
	for id, h := range nd.held {
		hs = append(hs, h)
		delete(nd.held, id)
	}
	m.mu.Unlock()
	m.loseHeld(hs, errDeadline)
}

// liveGen is the node's generation, once a heartbeat made sure it has a
// live one: at the start, or after its deadline passed.
func (m *Manager) liveGen(ctx context.Context) (int64, error) {
	m.mu.Lock()
	gen, live := m.node.gen, time.Now().Before(m.node.deadline)
	m.mu.Unlock()
	if gen != 0 && live {
		return gen, nil
	}
	if err := m.beat(ctx); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.node.gen == 0 {
		return 0, errDeadline
	}
	return m.node.gen, nil
}

// beat is one heartbeat: the lease of every session the node holds. It
// moves the node's deadline on, and the armed boxes' fences with it; a
// new generation in the answer loses the held leases; a change of
// Node.Moved has the node read its leases (checkHeld). One at a time.
func (m *Manager) beat(ctx context.Context) error {
	select {
	case m.node.beating <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	defer func() { <-m.node.beating }()
	m.mu.Lock()
	if m.node.gen != 0 && !time.Now().Before(m.node.deadline) {
		m.mu.Unlock()
		m.fenceDue() // its timer is late: the deadline passed
		m.mu.Lock()
	}
	gen, n := m.node.gen, len(m.node.held)
	m.mu.Unlock()
	me := store.Node{ID: m.node.cfg.ID, Addr: m.node.cfg.Addr, Capacity: m.advertised(), Leases: n, Gen: gen}
	if m.base.Err() != nil {
		me.Addr, me.Capacity = "", store.NodeFull // leaving: forward nothing here, place nothing
	}
	sent := time.Now()
	got, err := m.st.HeartbeatNode(ctx, me, m.leaseTTL())
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	m.mu.Lock()
	ok, stale := m.adoptLocked(gen, got.Gen, sent)
	deadline := m.node.deadline
	moved := got.Moved != m.node.moved
	m.node.moved = got.Moved
	held := len(m.node.held)
	m.mu.Unlock()
	m.loseHeld(stale, errGeneration)
	if !ok {
		return nil
	}
	m.counts.leasesRenewed.Add(uint64(held))
	m.fenceBoxes(ctx, deadline)
	if moved && held > 0 {
		return m.checkHeld(ctx)
	}
	return nil
}

// checkHeld reads the node's leases (a read, made only when its Moved
// changed) and loses those that left it: their sessions were deleted (or
// taken, which its generation's answer says too).
func (m *Manager) checkHeld(ctx context.Context) error {
	sent := time.Now()
	ls, err := m.st.NodeLeases(ctx, m.node.cfg.ID)
	if err != nil {
		return fmt.Errorf("reading this node's leases: %w", err)
	}
	in := make(map[string]store.Lease, len(ls))
	for _, l := range ls {
		in[l.Session] = l
	}
	m.mu.Lock()
	var gone []*held
	for id, h := range m.node.held {
		l, ok := in[id]
		if h.since.Before(sent) && (!ok || l.Epoch != h.lease.Epoch || l.Gen != h.lease.Gen) {
			gone = append(gone, h)
			delete(m.node.held, id)
		}
	}
	m.mu.Unlock()
	m.loseHeld(gone, fmt.Errorf("%w: the session left this node (deleted, or taken over)", store.ErrLeaseLost))
	return nil
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
		return time.Time{} // still ours: the same ownership
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

// renewer beats the node's heartbeat at once and then every TTL/3 until
// Close, and during Close until the keeper has returned and no runner
// holds a lease (the runners give theirs up as they stop; one that takes
// longer than a TTL to stop would otherwise lose its lease and with it
// the events that say how it stopped). Then it takes the node off the
// list (RemoveNode, which releases what the store still has of it).
func (m *Manager) renewer() {
	ttl := m.leaseTTL()
	// A ticker: the rhythm holds however long a beat takes (moving the
	// boxes' fences may take up to its TTL/3), a slow one delaying only
	// the next tick.
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			<-t.C
		}
		if m.base.Err() != nil && m.keeperDone() && !m.runnerHoldsLease() {
			break
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(m.base), ttl/3)
		if err := m.beat(ctx); err != nil {
			// The deadline's timer stops the node's sessions if no
			// heartbeat succeeds before it.
			m.log.Warn("heartbeat; retrying", "leases", m.Stats().LeasesHeld, "err", err)
		}
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.st.RemoveNode(ctx, m.node.cfg.ID); err != nil {
		m.log.Warn("leaving the nodes (its heartbeat runs out by itself)", "err", err)
	}
	m.mu.Lock()
	if m.node.timer != nil {
		m.node.timer.Stop()
	}
	m.mu.Unlock()
}

func (m *Manager) keeperDone() bool {
	select {
	case <-m.node.kept:
		return true
	default:
		return false
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
// epoch (the node's deadline); false when it holds none.
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
	return m.node.deadline, true
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

// fenceBoxes moves the fences of the armed boxes of the sessions this
// node holds on to deadline, all at once (a slow box delays no other),
// and returns when every call has returned or ctx ended. One heartbeat,
// one call to each box's agent: nothing per box in the store.
func (m *Manager) fenceBoxes(ctx context.Context, deadline time.Time) {
	var wg sync.WaitGroup
	m.mu.Lock()
	rs := make([]*runner, 0, len(m.node.held))
	for id, h := range m.node.held {
		if r := m.runners[id]; r != nil && r.fence.Epoch == h.lease.Epoch {
			rs = append(rs, r)
		}
	}
	m.mu.Unlock()
	for _, r := range rs {
		r.mu.Lock()
		sb := r.armed
		r.mu.Unlock()
		if sb == nil {
			continue
		}
		id := r.id
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := sb.Fence(ctx, deadline); err != nil && sb.Alive() && ctx.Err() == nil {
				m.log.Warn("moving a box's fence on", "session", id, "box", sb.ID(), "err", err)
			}
		}()
	}
	wg.Wait()
}
