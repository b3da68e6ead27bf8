package session

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/store"
)

// nodeTTL is the lease TTL of the several-node tests: short, because
// leases run on the store's clock, which the tests cannot move.
const nodeTTL = 900 * time.Millisecond

// TestNodesHandOver: two Managers as two nodes on one store, each with
// its own journal. The session A created runs on A only: B refuses a
// message for it (ErrElsewhere, for the caller to forward). A stops
// gracefully and gives its lease up; B takes the session over at once,
// reattaches its box, and runs the next message. The session's seqs
// have no gap, and each message is delivered once.
func TestNodesHandOver(t *testing.T) {
	e := newEnv(t, withNode("a", nodeTTL), withSharedData())
	ctx := testbin.Context(t)
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	b, _ := e.openNode("b", nodeTTL)
	if err := b.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	v := e.create("msg one")
	e.watch(v.ID).Until("turn t1 to end", stacktest.TurnEnded("t1"))
	if l, err := e.st.GetLease(ctx, v.ID); err != nil || l.Node != "a" {
		t.Fatalf("lease of the session A created: %+v %v", l, err)
	}
	if st := e.m.Stats(); st.LeasesHeld != 1 || st.LeasesTaken < 1 || st.Runners != 1 {
		t.Errorf("A's Stats with its session: %+v; want 1 lease held, taken, 1 runner", st)
	}
	if _, err := b.Send(ctx, "owner-1", v.ID, "msg refused", ""); !errors.Is(err, ErrElsewhere) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("B's send to A's session: %v, want ErrElsewhere", err)
	}
	if n, ok, err := b.Owner(ctx, v.ID); err != nil || !ok || n.ID != "a" {
		t.Fatalf("B: Owner %+v %v %v, want node a", n, ok, err)
	}

	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := e.m.Close(cctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B to take the session over", func() bool {
		l, err := e.st.GetLease(ctx, v.ID)
		return err == nil && l.Node == "b"
	})
	waitFor(t, "B to count the takeover", func() bool { return b.Stats().TakenOver == 1 })
	if st := b.Stats(); st.LeasesTaken < 1 || st.LeasesLost != 0 {
		t.Errorf("B's Stats after the takeover: %+v; want a lease taken, none lost", st)
	}
	m, err := b.Send(ctx, "owner-1", v.ID, "msg two", "")
	if err != nil {
		t.Fatal(err)
	}
	stacktest.Watch(t, v.ID, func(after int64) (*journal.Subscription, error) {
		return b.Subscribe(context.Background(), "", v.ID, after)
	}).Until("turn t2 to end", stacktest.TurnEnded("t2"))

	evs, err := e.st.Events(ctx, v.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var delivered []string
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i+1, ev.Seq)
		}
		if p, ok := ev.Data.(event.MessageDelivered); ok {
			delivered = append(delivered, p.MessageID)
		}
		if p, ok := ev.Data.(event.TurnFailed); ok {
			t.Errorf("turn %s failed: %+v", ev.Turn, p)
		}
	}
	if len(delivered) != 2 || delivered[1] != m.ID || slices.Contains(delivered[:1], m.ID) {
		t.Errorf("delivered %v, want the prompt then %s", delivered, m.ID)
	}
	waitFor(t, "the session to be idle after turn t2", func() bool {
		s, err := e.st.GetSession(ctx, v.ID)
		return err == nil && s.State == store.StateIdle && s.Turns == 2
	})
}

// openNode opens another node on e's store: a Manager with its own
// journal, closed when the test ends.
func (e *env) openNode(id string, ttl time.Duration) (*Manager, *journal.Journal) {
	e.T.Helper()
	return e.openNodeAt(id, ttl, e.DataDir)
}

// openNodeAt is openNode with a data directory of its own (another
// machine's disk).
func (e *env) openNodeAt(id string, ttl time.Duration, dataDir string) (*Manager, *journal.Journal) {
	e.T.Helper()
	return e.openNodeWith(NodeConfig{ID: id, Addr: "http://" + id + ".invalid", TTL: ttl}, dataDir)
}

// openNodeWith is openNodeAt with the whole of the node's configuration.
func (e *env) openNodeWith(n NodeConfig, dataDir string) (*Manager, *journal.Journal) {
	e.T.Helper()
	id := n.ID
	j := journal.New(e.st, journal.Options{Logger: e.Logger()})
	e.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := j.Close(ctx); err != nil {
			e.T.Errorf("closing node %s's journal: %v", id, err)
		}
	})
	m, err := NewManager(Config{
		Store: e.st, Journal: j, Backends: e.Backends, DataDir: dataDir, Sources: e.Sources,
		Models: e.Models(), DefaultModel: stacktest.Model, Disks: e.Disks, Clock: e.Clock,
		Logger: e.Logger().With("node", id), Node: &n,
		CarryMax: carryMax(dataDir == e.DataDir && e.shared), Checkpoints: e.checkpointStore(),
	})
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			e.T.Errorf("closing node %s: %v", id, err)
		}
	})
	return m, j
}

// waitFor waits until cond holds (it reads the store: leases run on the
// store's clock), for a minute at most.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("waiting for %s: a minute passed", what)
		}
	}
}

// TestNodesCapacity: a node with Capacity 1 runs one session; the next
// two it creates are queued (stored, their first events journaled, their
// leases given up, a state reason saying so), and when the first is
// deleted the older queued one starts here, the other still waiting.
func TestNodesCapacity(t *testing.T) {
	e := newEnv(t, func(c *envConfig) {
		c.node = &NodeConfig{ID: "a", Addr: "http://a.invalid", TTL: nodeTTL, Capacity: 1}
	})
	ctx := testbin.Context(t)
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	first := e.create("msg one")
	e.watch(first.ID).Until("turn t1 to end", stacktest.TurnEnded("t1"))
	var queued []*View
	for range 2 {
		e.Clock.Advance(time.Millisecond) // oldest first: distinct creation times
		v := e.create("msg queued")
		e.watch(v.ID).Until("the queued state and its prompt", func(ev event.Event) bool { return ev.Type() == event.TypeMessageQueued })
		evs, err := e.st.Events(ctx, v.ID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := evs[0].Data.(event.SessionState); !ok || p.State != string(store.StatePending) || !strings.Contains(p.Reason, "queued") {
			t.Errorf("session %s: first event %+v, want pending and queued", v.ID, evs[0].Data)
		}
		if l, err := e.st.GetLease(ctx, v.ID); err != nil || l.Node != "" || l.Epoch != 1 {
			t.Errorf("queued session %s: lease %+v %v, want it given up", v.ID, l, err)
		}
		queued = append(queued, v)
	}
	if err := e.m.Delete(ctx, "owner-1", first.ID); err != nil {
		t.Fatal(err)
	}
	e.watch(queued[0].ID).Until("the older queued session's turn t1 to end", stacktest.TurnEnded("t1"))
	if l, err := e.st.GetLease(ctx, queued[0].ID); err != nil || l.Node != "a" {
		t.Errorf("session %s: lease %+v %v, want a's", queued[0].ID, l, err)
	}
	if s, err := e.st.GetSession(ctx, queued[1].ID); err != nil || s.State != store.StatePending {
		t.Errorf("the younger queued session: %+v %v, want it still pending", s, err)
	}
}

// TestNodesBelowFloor: a node below its floor of free space (admission.go)
// advertises itself full (store.NodeFull): it refuses a create, sends new
// sessions to a node with room (PlaceNew), and takes over no session
// nobody owns; the other node, with room, places new sessions on itself.
func TestNodesBelowFloor(t *testing.T) {
	e := newEnv(t, withNode("a", nodeTTL), withSharedData(), withMinFree(MinFree{Bytes: 1 << 60})) // never that much free
	ctx := testbin.Context(t)
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	b, _ := e.openNode("b", nodeTTL)
	if err := b.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node a to advertise itself full", func() bool {
		ns, err := e.st.ListNodes(ctx)
		return err == nil && len(ns) == 2 && ns[0].ID == "a" && ns[0].Capacity == store.NodeFull && ns[1].Capacity == 0
	})
	if n, ok, err := e.m.PlaceNew(ctx); err != nil || !ok || n.ID != "b" {
		t.Fatalf("node a's PlaceNew: %+v %v %v, want node b", n, ok, err)
	}
	if n, ok, err := b.PlaceNew(ctx); err != nil || ok {
		t.Fatalf("node b's PlaceNew: %+v %v %v, want here", n, ok, err)
	}
	_, err := e.m.Create(ctx, "owner-1", CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Prompt: "msg hi"})
	if !errors.Is(err, ErrInsufficientStorage) {
		t.Fatalf("a create on node a: %v, want ErrInsufficientStorage", err)
	}

	// A session nobody owns (b stopped and gave its lease up): a takes
	// none over.
	v, err := b.Create(ctx, "owner-1", CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Prompt: "msg hi"})
	if err != nil {
		t.Fatal(err)
	}
	stacktest.Watch(t, v.ID, func(after int64) (*journal.Subscription, error) {
		return b.Subscribe(context.Background(), "", v.ID, after)
	}).Until("turn t1 to end", stacktest.TurnEnded("t1"))
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := b.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if l, err := e.st.GetLease(ctx, v.ID); err != nil || l.Node != "" {
		t.Fatalf("the lease after node b stopped: %+v %v, want released", l, err)
	}
	if err := e.m.takeover(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := e.st.GetLease(ctx, v.ID); err != nil || l.Node == "a" {
		t.Fatalf("node a, below its floor, took the session over: %+v %v", l, err)
	}
}
