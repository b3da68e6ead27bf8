package session

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// Taking over the sessions nobody owns: the keeper's scan, and which of
// them this node takes. See "Takeover" in nodes.go for the algorithm and
// why.

// DefaultTakeoverRate is how many sessions a second a node takes over at
// most (NodeConfig.TakeoverRate). Each takeover of a busy session (a
// turn to recover, a queued message) from another machine restores its
// workspace and starts a box (about a second of work, and a disk image,
// per session; an idle one waits for its first message: nodes_dormant.go);
// 5 a second keeps a node
// that inherits hundreds from being buried at once, while a dead node's
// few dozen sessions are still taken in one scan (the burst is a scan's
// worth: TTL/3 × the rate, 16 at the default TTL) and three survivors
// re-home 600 in about 40 s, the urgent ones first.
const DefaultTakeoverRate = 5.0

// scanState is the takeover's own state (nodeState.scan).
type scanState struct {
	// mu: one scan at a time (the keeper's, or a test's).
	mu sync.Mutex
	// first is when this node's first scan ran: it takes nothing before a
	// heartbeat round (TTL/3) has passed since, so that it knows the other
	// nodes before it computes its share.
	first time.Time
	// tokens and last are the rate's bucket: tokens accrue at the rate
	// since last, up to a scan's worth; a takeover spends one.
	tokens float64
	last   time.Time
	// lost counts the sessions another node claimed between this node's
	// scan and its claim.
	lost atomic.Uint64
}

// takeoverRate is this node's rate (sessions a second) and burst (a
// scan's worth, at least one).
func (m *Manager) takeoverRate() (rate, burst float64) {
	rate = m.node.cfg.TakeoverRate
	if rate <= 0 {
		rate = DefaultTakeoverRate
	}
	return rate, max(1, rate*(m.leaseTTL()/3).Seconds())
}

// takeover claims some of the sessions that need a runner and that no
// node owns (never leased, released, or their owner's lease ran out: it
// died or paused) and starts them as Recover starts one: a live
// session's runner reattaches or replaces its box and marks a turn it
// finds interrupted; a suspended one with queued messages resumes. How
// many, and which: see "Takeover" in nodes.go.
func (m *Manager) takeover(ctx context.Context) error {
	sc := &m.node.scan
	sc.mu.Lock()
	defer sc.mu.Unlock()
	rate, burst := m.takeoverRate()
	now := time.Now()
	if sc.first.IsZero() {
		sc.first, sc.last, sc.tokens = now, now, burst
	}
	if m.full() || now.Sub(sc.first) < m.leaseTTL()/3 {
		return nil // below its floor of free space; or it does not know the other nodes yet
	}
	sc.tokens = min(burst, sc.tokens+rate*now.Sub(sc.last).Seconds())
	sc.last = now
	m.mu.Lock()
	held := len(m.node.held)
	m.mu.Unlock()
	room := int(sc.tokens)
	if c := m.capacity(); c > 0 {
		room = min(room, c-held)
	}
	if room <= 0 {
		return nil
	}
	nodes, err := m.st.ListNodes(ctx)
	if err != nil {
		return fmt.Errorf("listing the nodes: %w", err)
	}
	live := len(nodes)
	if !containsNode(nodes, m.node.cfg.ID) {
		live++ // its heartbeat failed: it counts itself all the same
	}
	orphans, total, err := m.st.Orphans(ctx, room*live+orphanSlack)
	if err != nil {
		return fmt.Errorf("listing the sessions nobody owns: %w", err)
	}
	if total == 0 {
		return nil
	}
	wants := shares(nodes, m.node.cfg.ID, held, m.capacity(), total)
	want := min(wants[m.node.cfg.ID], room)
	if want <= 0 {
		return nil
	}
	cands := make([]store.Orphan, 0, len(orphans))
	for _, o := range orphans {
		m.mu.Lock()
		_, mine := m.node.held[o.Lease.Session]
		m.mu.Unlock()
		if mine || m.isDeleting(o.Lease.Session) {
			continue
		}
		if o.Lease.Epoch == 0 && o.State == store.StatePending && m.clock.Now().Sub(o.CreatedAt) < m.leaseTTL() {
			continue // just created: its node takes the lease in a moment
		}
		cands = append(cands, o)
	}
	cands = pick(cands, wants, m.node.cfg.ID, room)
	m.log.Debug("takeover scan", "orphans", total, "nodes", live, "held", held, "taking", want)
	taken, start := 0, time.Now()
	for i, o := range cands {
		if taken == want {
			break
		}
		if ctx.Err() != nil || m.isClosed() || i > 0 && time.Since(start) > m.leaseTTL()/6 {
			return nil // the rest at the next scan: the keeper renews the leases between scans
		}
		if m.isDeleting(o.Lease.Session) {
			continue
		}
		unlock, full, err := m.claimIfRoom(ctx, o.Lease.Session)
		if full {
			return nil // the rest wait for a place here or on another node
		}
		switch {
		case errors.Is(err, ErrElsewhere):
			sc.lost.Add(1)
			continue // another node was quicker
		case errors.Is(err, ErrNotFound):
			continue // deleted meanwhile
		case err != nil:
			return err
		}
		taken++
		sc.tokens--
		m.counts.takenOver.Add(1)
		m.log.Info("taking over a session nobody owns", "session", o.Lease.Session, "state", o.State, "previous", o.Lease.Node, "epoch", o.Lease.Epoch)
		m.wake(o.Lease.Session, wakeOpts{start: true})
		unlock()
	}
	return nil
}

// pick orders the candidates (urgent first, then oldest) for node me:
// the nodes that want some (wants, by node: its share less what it
// holds) take about the first Σ min(want, room) of them this round — room
// being a scan's worth at this node's rate, taken as everyone's. Of that
// window, me goes for the ones it ranks highest of those nodes
// (rendezvous, or highest-random-weight, hashing: a hash of node and
// session, which every node computes alike from the same list), so that
// nodes scanning at once go for different sessions without talking to
// each other; then for the ones after the window, which nobody's window
// holds this round. The window's others are left to the nodes that rank
// them highest: taken this round, or the next if that node is not
// scanning yet (it waits a round after it starts) or stopped (its
// heartbeat runs out within a TTL, and the list with it).
func pick(cands []store.Orphan, wants map[string]int, me string, room int) []store.Orphan {
	var ids []string
	w := 0
	for id, n := range wants {
		if n > 0 {
			ids = append(ids, id)
			w += min(n, room)
		}
	}
	window := cands[:min(len(cands), w)]
	out := make([]store.Orphan, 0, len(cands))
	for _, o := range window {
		if preferred(ids, o.Lease.Session) == me {
			out = append(out, o)
		}
	}
	return append(out, cands[len(window):]...)
}

// preferred is the node of ids that ranks session highest.
func preferred(ids []string, session string) string {
	var best string
	var top uint64
	for _, id := range ids {
		sum := sha256.Sum256([]byte(id + "\x00" + session))
		if v := binary.BigEndian.Uint64(sum[:8]); best == "" || v > top || v == top && id < best {
			best, top = id, v
		}
	}
	return best
}

// orphanSlack is how many more orphans than it may take a scan reads:
// some are skipped (just created, being deleted).
const orphanSlack = 32

func containsNode(nodes []store.Node, id string) bool {
	for _, n := range nodes {
		if n.ID == id {
			return true
		}
	}
	return false
}

// shares says how many of the orphans (sessions nobody owns) each live
// node should take, by node id: its share less what it holds (0 when it
// holds that much already). The share is water-filling: each live node
// holds its leases; the orphans raise the level L of the nodes below it
// until they are all placed, a node holding min(capacity, L), or what it
// holds already if that is more (a node over the level gives nothing
// up). So nodes end with the same number of sessions, except that one
// with a lower bound (--max-sessions) fills up and the rest is spread
// over the others, and a node below its floor of free space
// (store.NodeFull) takes none. me's own count and bound are held and
// capacity (0: no bound), which it knows better than the list (and it
// counts even when its heartbeat failed and the list lacks it).
func shares(nodes []store.Node, me string, held, capacity, orphans int) map[string]int {
	type load struct {
		id        string
		held, cap int // cap < 0: no bound
	}
	self := load{me, held, capacity}
	if capacity <= 0 {
		self.cap = -1
	}
	ls := []load{self}
	total := held + orphans
	for _, n := range nodes {
		if n.ID == me {
			continue
		}
		l := load{n.ID, n.Leases, n.Capacity}
		switch {
		case n.Capacity == store.NodeFull:
			l.cap = n.Leases
		case n.Capacity <= 0:
			l.cap = -1
		}
		ls = append(ls, l)
		total += n.Leases
	}
	at := func(l load, level int) int {
		v := level
		if l.cap >= 0 {
			v = min(v, l.cap)
		}
		return max(l.held, v)
	}
	placed := func(level int) int {
		sum := 0
		for _, l := range ls {
			sum += at(l, level)
		}
		return sum
	}
	// The lowest level that places them all (total when even that does
	// not: every node fills up to its bound).
	lo, hi := 0, total
	for lo < hi {
		mid := (lo + hi) / 2
		if placed(mid) >= total {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	out := make(map[string]int, len(ls))
	for _, l := range ls {
		out[l.id] = at(l, lo) - l.held
	}
	return out
}
