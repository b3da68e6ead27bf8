package session

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/store"
)

// stallingStore is the real store whose heartbeats (the renewal of every
// lease a node holds) hang while it is stalled: they return only once
// Unstall is called, whatever their context says (a database that
// stopped answering, and a driver that does not give up). Every other
// call goes through.
type stallingStore struct {
	store.Store
	// late: a stalled heartbeat is made in the store at once, and only
	// its answer is held back (a slow network on the way back).
	late    bool
	mu      sync.Mutex
	stall   chan struct{} // not nil: stalled until closed
	waiting atomic.Int32  // heartbeats held back now
}

func (s *stallingStore) Stall() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stall == nil {
		s.stall = make(chan struct{})
	}
}

func (s *stallingStore) Unstall() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stall != nil {
		close(s.stall)
		s.stall = nil
	}
}

func (s *stallingStore) HeartbeatNode(ctx context.Context, n store.Node, ttl time.Duration) (store.Node, error) {
	s.mu.Lock()
	c := s.stall
	s.mu.Unlock()
	if c == nil {
		return s.Store.HeartbeatNode(ctx, n, ttl)
	}
	var (
		got store.Node
		err error
	)
	if s.late {
		got, err = s.Store.HeartbeatNode(ctx, n, ttl)
	}
	s.waiting.Add(1)
	<-c
	s.waiting.Add(-1)
	if s.late {
		return got, err
	}
	return s.Store.HeartbeatNode(ctx, n, ttl)
}

// TestNodesStallFences: a node whose heartbeats hang (the store stalls
// past the TTL) stops its session's runner at its deadline on its own
// clock, while the heartbeat has not returned: the turn's tool
// is stopped and nothing more is written under the lease. Once the store
// answers again the node takes the session back under a new epoch, after
// the skew bound, and the interrupted turn is turn.failed "interrupted"
// (not turn.cancelled), exactly once; the next message runs.
func TestNodesStallFences(t *testing.T) {
	e := newEnv(t, withoutManager)
	ctx := testbin.Context(t)
	st, j := e.Open(journal.Options{})
	ss := &stallingStore{Store: st}
	t.Cleanup(ss.Unstall)
	m, err := NewManager(Config{
		Store: ss, Journal: j, Backends: e.Backends, DataDir: e.DataDir, Sources: e.Sources,
		Models: e.Models(), DefaultModel: stacktest.Model, Disks: e.Disks, Clock: e.Clock,
		Logger: e.Logger().With("node", "a"), Node: &NodeConfig{ID: "a", Addr: "http://a.invalid", TTL: nodeTTL},
		OwnersDir: filepath.Join(e.DataDir, "owners"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Errorf("closing the node: %v", err)
		}
	})
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	v, err := m.Create(ctx, "owner-1", CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Prompt: "long task"})
	if err != nil {
		t.Fatal(err)
	}
	watch := func() *stacktest.Watcher {
		return stacktest.Watch(t, v.ID, func(after int64) (*journal.Subscription, error) {
			return m.Subscribe(context.Background(), "", v.ID, after)
		})
	}
	watch().Until("the long task's tool to start", func(ev event.Event) bool { return ev.Type() == event.TypeToolStarted })
	l1, err := st.GetLease(ctx, v.ID)
	if err != nil || l1.Node != "a" {
		t.Fatalf("the lease: %+v %v", l1, err)
	}
	// The box is armed within the lease's deadline (an earlier deadline
	// than its own leaves the fence as it is and says how long it has).
	sb, _, err := m.Box(ctx, "", v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if left, err := sb.Fence(ctx, time.Now().Add(-time.Hour)); err != nil || left <= 0 || left > nodeTTL {
		t.Fatalf("the box's fence: %s left, %v; want armed within the TTL %s", left, err, nodeTTL)
	}

	ss.Stall()
	stalled := time.Now()
	waitFor(t, "the node to lose the lease at its deadline", func() bool { return m.Stats().LeasesLost >= 1 })
	lost := time.Since(stalled)
	if ss.waiting.Load() == 0 {
		t.Fatalf("the lease was lost %s after the stall, but no heartbeat was held back then", lost)
	}
	if lost > nodeTTL {
		t.Errorf("the lease was lost %s after the stall; its deadline is at most %s after it", lost, nodeTTL-fenceMargin(nodeTTL))
	}
	t.Logf("the heartbeats stalled: the runner stopped %s later (TTL %s, margin %s), a heartbeat still hanging", lost.Round(time.Millisecond), nodeTTL, fenceMargin(nodeTTL))
	waitFor(t, "the runner to stop", func() bool { return m.Stats().Runners == 0 })
	s, err := st.GetSession(ctx, v.ID)
	if err != nil || s.State != store.StateWorking {
		t.Fatalf("the session after its runner stopped: %+v %v; want it still working (nothing written under the lost lease)", s, err)
	}
	ss.Unstall()

	waitFor(t, "the node to take the session back under a new epoch", func() bool {
		l, err := st.GetLease(ctx, v.ID)
		return err == nil && l.Node == "a" && l.Epoch > l1.Epoch
	})
	if ev := watch().Until("turn t1 to end", stacktest.TurnEnded("t1")); ev.Type() != event.TypeTurnFailed || ev.Data.(event.TurnFailed).Kind != event.FailInterrupted {
		t.Fatalf("turn t1 ended with %s %+v, want turn.failed interrupted", ev.Type(), ev.Data)
	}
	if _, err := m.Send(ctx, "owner-1", v.ID, "msg after", ""); err != nil {
		t.Fatal(err)
	}
	if ev := watch().Until("turn t2 to end", stacktest.TurnEnded("t2")); ev.Type() != event.TypeTurnFinished {
		t.Fatalf("turn t2 ended with %s", ev.Type())
	}
	evs, err := st.Events(ctx, v.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	ends := 0
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i+1, ev.Seq)
		}
		if ev.Turn == "t1" && stacktest.TurnEnded("t1")(ev) {
			ends++
		}
	}
	if ends != 1 {
		t.Errorf("turn t1 ended %d times in the log", ends)
	}
}

// TestNodesLateHeartbeatNewGeneration: a node whose heartbeat's answer
// comes back after its deadline (the heartbeat itself reached the store
// in time, so the store still has the node live) stops its session's
// runner at the deadline all the same, and then starts a new generation:
// its next heartbeat names none, which ends the leases of the old one in
// the store, so that the session, whose lease the store still had as
// live, becomes an orphan and is taken back under a new epoch (here by
// the same node: the only one), its turn turn.failed "interrupted" once.
// Were the node to go on in its old generation, the session's lease would
// stay live in the store with no runner behind it, and nobody would ever
// take it.
func TestNodesLateHeartbeatNewGeneration(t *testing.T) {
	e := newEnv(t, withoutManager)
	ctx := testbin.Context(t)
	st, j := e.Open(journal.Options{})
	ss := &stallingStore{Store: st, late: true}
	t.Cleanup(ss.Unstall)
	m, err := NewManager(Config{
		Store: ss, Journal: j, Backends: e.Backends, DataDir: e.DataDir, Sources: e.Sources,
		Models: e.Models(), DefaultModel: stacktest.Model, Disks: e.Disks, Clock: e.Clock,
		Logger: e.Logger().With("node", "a"), Node: &NodeConfig{ID: "a", Addr: "http://a.invalid", TTL: nodeTTL},
		OwnersDir: filepath.Join(e.DataDir, "owners"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Errorf("closing the node: %v", err)
		}
	})
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	v, err := m.Create(ctx, "owner-1", CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Prompt: "long task"})
	if err != nil {
		t.Fatal(err)
	}
	watch := func() *stacktest.Watcher {
		return stacktest.Watch(t, v.ID, func(after int64) (*journal.Subscription, error) {
			return m.Subscribe(context.Background(), "", v.ID, after)
		})
	}
	watch().Until("the long task's tool to start", func(ev event.Event) bool { return ev.Type() == event.TypeToolStarted })
	l1, err := st.GetLease(ctx, v.ID)
	if err != nil || l1.Node != "a" {
		t.Fatalf("the lease: %+v %v", l1, err)
	}

	ss.Stall()
	waitFor(t, "the node to lose the lease at its deadline", func() bool { return m.Stats().LeasesLost >= 1 })
	// Answer at once: the store has the node live (its held-back heartbeat
	// was made), unless this machine is so slow that it ran out meanwhile.
	ss.Unstall()
	if ns, err := st.ListNodes(ctx); err == nil && len(ns) == 1 {
		t.Logf("the store still had node a live (until %s) when its deadline passed here", ns[0].Expires.Format(time.StampMilli))
	}
	waitFor(t, "the node to take the session back under a new epoch, in a new generation", func() bool {
		l, err := st.GetLease(ctx, v.ID)
		return err == nil && l.Node == "a" && l.Epoch > l1.Epoch && l.Gen > l1.Gen
	})
	if ev := watch().Until("turn t1 to end", stacktest.TurnEnded("t1")); ev.Type() != event.TypeTurnFailed || ev.Data.(event.TurnFailed).Kind != event.FailInterrupted {
		t.Fatalf("turn t1 ended with %s %+v, want turn.failed interrupted", ev.Type(), ev.Data)
	}
}
