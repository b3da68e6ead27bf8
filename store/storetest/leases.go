package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// Leases and nodes are timed by the store's clock (PostgreSQL's, for
// one), which a test cannot move. So, as for the locks, expiry is tested
// with TTLs that are already over when given (a holder that "stops
// renewing" renews with a negative TTL), and unexpired with TTLs of an
// hour: no sleeps, no race with the clock.

// near reports whether got is within a second of want.
func near(got, want time.Time) bool { return got.Sub(want).Abs() <= time.Second }

func mustAcquire(t *testing.T, st store.Store, session, node string, ttl time.Duration) store.Lease {
	t.Helper()
	l, err := st.AcquireLease(context.Background(), session, node, ttl)
	if err != nil {
		t.Fatalf("AcquireLease(%s, %s): %v", session, node, err)
	}
	return l
}

// expire makes l's TTL over, as if its holder had stopped renewing it.
func expire(t *testing.T, st store.Store, l store.Lease) store.Lease {
	t.Helper()
	l, err := st.RenewLease(context.Background(), l, -time.Second)
	if err != nil {
		t.Fatalf("expiring %+v: %v", l, err)
	}
	return l
}

// wantLost checks that err is a *LeaseLostError of session at epoch whose
// current holder is node at cur (node "" and cur 0: no lease).
func wantLost(t *testing.T, what string, err error, session string, epoch int64, node string, cur int64) {
	t.Helper()
	var le *store.LeaseLostError
	if !errors.As(err, &le) || !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("%s: %v, want a *LeaseLostError (ErrLeaseLost)", what, err)
		return
	}
	if le.Session != session || le.Epoch != epoch || le.Current.Node != node || le.Current.Epoch != cur {
		t.Errorf("%s: %+v, want session %s epoch %d lost to node %q at epoch %d", what, le, session, epoch, node, cur)
	}
}

func testNodes(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	if ns, err := st.ListNodes(ctx); err != nil || len(ns) != 0 {
		t.Fatalf("ListNodes of a new store = %v, %v; want none", ns, err)
	}
	if _, err := st.HeartbeatNode(ctx, store.Node{Addr: "x:1"}, time.Hour); err == nil {
		t.Error("HeartbeatNode without an id succeeded")
	}
	if _, err := st.HeartbeatNode(ctx, store.Node{ID: "node-x", Capacity: -2}, time.Hour); err == nil {
		t.Error("HeartbeatNode with a capacity of -2 succeeded")
	}
	before := time.Now()
	a, err := st.HeartbeatNode(ctx, store.Node{ID: "node-a", Addr: "10.0.0.1:8080", Capacity: 50}, time.Hour)
	if err != nil {
		t.Fatalf("HeartbeatNode: %v", err)
	}
	if a.ID != "node-a" || a.Addr != "10.0.0.1:8080" || a.Capacity != 50 ||
		!near(a.Heartbeat, before) || !near(a.Expires, before.Add(time.Hour)) {
		t.Errorf("HeartbeatNode = %+v, want node-a at about now, live for an hour", a)
	}
	for _, n := range []store.Node{{ID: "node-c", Addr: "10.0.0.3:8080"}, {ID: "node-b", Addr: "10.0.0.2:8080", Capacity: 10}} {
		if _, err := st.HeartbeatNode(ctx, n, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	// node-c's heartbeat runs out (a dead node); node-b moves.
	if _, err := st.HeartbeatNode(ctx, store.Node{ID: "node-c", Addr: "10.0.0.3:8080"}, -time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := st.HeartbeatNode(ctx, store.Node{ID: "node-b", Addr: "10.0.0.9:9090", Capacity: 20}, time.Hour); err != nil {
		t.Fatal(err)
	}
	// Leases count only while unexpired.
	for _, id := range []string{"s1", "s2", "s3"} {
		mustCreate(t, st, &store.Session{ID: id, Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})
	}
	mustAcquire(t, st, "s1", "node-a", time.Hour)
	mustAcquire(t, st, "s2", "node-a", time.Hour)
	expire(t, st, mustAcquire(t, st, "s3", "node-a", time.Hour))

	ns, err := st.ListNodes(ctx)
	if err != nil {
		t.Fatalf("ListNodes: %v", err)
	}
	if len(ns) != 2 || ns[0].ID != "node-a" || ns[1].ID != "node-b" {
		t.Fatalf("ListNodes = %+v, want node-a and node-b (node-c's heartbeat ran out)", ns)
	}
	if ns[0].Leases != 2 || ns[0].Capacity != 50 || !ns[0].Heartbeat.Equal(a.Heartbeat) || !ns[0].Expires.Equal(a.Expires) {
		t.Errorf("node-a listed as %+v, want %+v with 2 leases", ns[0], a)
	}
	if ns[1].Addr != "10.0.0.9:9090" || ns[1].Capacity != 20 || ns[1].Leases != 0 {
		t.Errorf("node-b listed as %+v, want its last heartbeat's address and capacity", ns[1])
	}
	// A node that takes nothing at the moment says so, and is listed so.
	if _, err := st.HeartbeatNode(ctx, store.Node{ID: "node-b", Addr: "10.0.0.9:9090", Capacity: store.NodeFull}, time.Hour); err != nil {
		t.Fatalf("HeartbeatNode with NodeFull: %v", err)
	}
	if ns, err := st.ListNodes(ctx); err != nil || len(ns) != 2 || ns[1].Capacity != store.NodeFull {
		t.Errorf("ListNodes after node-b's NodeFull heartbeat = %+v, %v", ns, err)
	}
	// A dead node that beats again is back.
	if _, err := st.HeartbeatNode(ctx, store.Node{ID: "node-c"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := st.RemoveNode(ctx, "node-a"); err != nil {
		t.Fatalf("RemoveNode: %v", err)
	}
	if err := st.RemoveNode(ctx, "node-x"); err != nil {
		t.Errorf("RemoveNode of an unknown node: %v, want nil", err)
	}
	ns, err = st.ListNodes(ctx)
	if err != nil || len(ns) != 2 || ns[0].ID != "node-b" || ns[1].ID != "node-c" {
		t.Errorf("ListNodes = %+v, %v; want node-b and node-c", ns, err)
	}
	// A removed node's leases stay until they expire or are released.
	if l, err := st.GetLease(ctx, "s1"); err != nil || l.Node != "node-a" {
		t.Errorf("lease of s1 after its node was removed = %+v, %v; want still node-a's", l, err)
	}

	// Dead nodes leave the table once their heartbeat ran out long enough
	// ago: node-d an hour ago, node-e a second ago, node-b and node-c live.
	for _, n := range []struct {
		id  string
		ttl time.Duration
	}{{"node-d", -time.Hour}, {"node-e", -time.Second}} {
		if _, err := st.HeartbeatNode(ctx, store.Node{ID: n.id}, n.ttl); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.RemoveDeadNodes(ctx, -time.Second); err == nil {
		t.Error("RemoveDeadNodes with a negative time gone succeeded")
	}
	if ids, err := st.RemoveDeadNodes(ctx, time.Minute); err != nil || fmt.Sprint(ids) != "[node-d]" {
		t.Errorf("RemoveDeadNodes(a minute) = %v, %v; want [node-d]", ids, err)
	}
	if ids, err := st.RemoveDeadNodes(ctx, 0); err != nil || fmt.Sprint(ids) != "[node-e]" {
		t.Errorf("RemoveDeadNodes(0) = %v, %v; want [node-e]", ids, err)
	}
	if ns, err := st.ListNodes(ctx); err != nil || len(ns) != 2 {
		t.Errorf("ListNodes after removing the dead = %+v, %v; want node-b and node-c", ns, err)
	}
	// A removed node that beats again is back.
	if _, err := st.HeartbeatNode(ctx, store.Node{ID: "node-d"}, time.Hour); err != nil {
		t.Fatal(err)
	}
}

func testLeases(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	mustCreate(t, st, &store.Session{ID: "s1", Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})

	if _, err := st.GetLease(ctx, "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetLease of a session never leased: %v, want ErrNotFound", err)
	}
	if _, err := st.AcquireLease(ctx, "nope", "node-a", time.Hour); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AcquireLease of a missing session: %v, want ErrNotFound", err)
	}
	if _, err := st.AcquireLease(ctx, "s1", "", time.Hour); err == nil {
		t.Error("AcquireLease without a node succeeded")
	}
	before := time.Now()
	a := mustAcquire(t, st, "s1", "node-a", time.Hour)
	if a.Session != "s1" || a.Node != "node-a" || a.Epoch != 1 || !near(a.Expires, before.Add(time.Hour)) {
		t.Errorf("AcquireLease = %+v, want node-a, epoch 1, for an hour", a)
	}
	if g, err := st.GetLease(ctx, "s1"); err != nil || g != a {
		t.Errorf("GetLease = %+v, %v; want %+v", g, err, a)
	}

	// Another node is refused and told who holds it.
	_, err := st.AcquireLease(ctx, "s1", "node-b", time.Hour)
	var he *store.LeaseHeldError
	if !errors.As(err, &he) || !errors.Is(err, store.ErrLocked) {
		t.Fatalf("AcquireLease of a held lease: %v, want a *LeaseHeldError (ErrLocked)", err)
	}
	if he.Lease != a {
		t.Errorf("LeaseHeldError.Lease = %+v, want %+v", he.Lease, a)
	}

	// The holder renews, by AcquireLease or RenewLease: the epoch stays.
	r := mustAcquire(t, st, "s1", "node-a", 2*time.Hour)
	if r.Epoch != 1 || !r.Expires.After(a.Expires) {
		t.Errorf("re-acquired by its holder: %+v, want epoch 1 and a later expiry than %+v", r, a)
	}
	r2, err := st.RenewLease(ctx, r, 3*time.Hour)
	if err != nil {
		t.Fatalf("RenewLease: %v", err)
	}
	if r2.Epoch != 1 || r2.Node != "node-a" || !r2.Expires.After(r.Expires) {
		t.Errorf("RenewLease = %+v, want epoch 1 and a later expiry than %+v", r2, r)
	}
	// A renewal naming another epoch or node is refused.
	_, err = st.RenewLease(ctx, store.Lease{Session: "s1", Node: "node-a", Epoch: 2}, time.Hour)
	wantLost(t, "RenewLease at another epoch", err, "s1", 2, "node-a", 1)
	_, err = st.RenewLease(ctx, store.Lease{Session: "s1", Node: "node-b", Epoch: 1}, time.Hour)
	if !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("RenewLease by another node: %v, want ErrLeaseLost", err)
	}
	if _, err := st.RenewLease(ctx, store.Lease{Session: "nope", Node: "node-a", Epoch: 1}, time.Hour); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RenewLease of a missing session: %v, want ErrNotFound", err)
	}

	// Release by a non-holder does nothing; by the holder, frees it and
	// keeps the epoch.
	if err := st.ReleaseLease(ctx, store.Lease{Session: "s1", Node: "node-b", Epoch: 1}); err != nil {
		t.Errorf("ReleaseLease by a non-holder: %v, want nil", err)
	}
	if g, err := st.GetLease(ctx, "s1"); err != nil || g.Node != "node-a" {
		t.Errorf("after a non-holder's release: %+v, %v; want still node-a's", g, err)
	}
	if err := st.ReleaseLease(ctx, r2); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	if g, err := st.GetLease(ctx, "s1"); err != nil || g.Node != "" || g.Epoch != 1 {
		t.Errorf("GetLease after release = %+v, %v; want no node, epoch 1", g, err)
	}
	if err := st.ReleaseLease(ctx, r2); err != nil {
		t.Errorf("ReleaseLease twice: %v, want nil", err)
	}
	_, err = st.RenewLease(ctx, r2, time.Hour)
	wantLost(t, "RenewLease of a released lease", err, "s1", 1, "", 1)
	if ex, err := st.ExpiredLeases(ctx, store.LeaseFilter{}); err != nil || len(ex) != 1 || ex[0].Session != "s1" || ex[0].Node != "" || ex[0].Epoch != 1 {
		t.Errorf("ExpiredLeases after release = %+v, %v; want s1 released at epoch 1", ex, err)
	}

	// The next owner, even the same node, gets the next epoch.
	b := mustAcquire(t, st, "s1", "node-b", time.Hour)
	if b.Epoch != 2 || b.Node != "node-b" {
		t.Errorf("AcquireLease after release = %+v, want node-b at epoch 2", b)
	}
	if err := st.ReleaseLease(ctx, b); err != nil {
		t.Fatal(err)
	}
	if b2 := mustAcquire(t, st, "s1", "node-b", time.Hour); b2.Epoch != 3 {
		t.Errorf("re-acquired after its own release: %+v, want epoch 3", b2)
	}

	// The lease goes with its session.
	if err := st.DeleteSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetLease(ctx, "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetLease of a deleted session: %v, want ErrNotFound", err)
	}
}

// testLeaseTakeover: a lease whose TTL ran out is taken over with the
// next epoch; from then on the old owner's fenced writes are refused and
// the new owner's go through.
func testLeaseTakeover(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	for _, s := range []*store.Session{
		{ID: "s1", Owner: "o", Title: "one", State: store.StateIdle, CreatedAt: base, UpdatedAt: base},
		{ID: "s2", Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base},
		{ID: "s3", Owner: "o", State: store.StateStopped, CreatedAt: base, UpdatedAt: base},
	} {
		mustCreate(t, st, s)
	}
	if err := st.AddMessage(ctx, &store.Message{ID: "m1", Session: "s1", Text: "hi", CreatedAt: base}); err != nil {
		t.Fatal(err)
	}

	a := mustAcquire(t, st, "s1", "node-a", time.Hour)
	if ex, err := st.ExpiredLeases(ctx, store.LeaseFilter{}); err != nil || len(ex) != 2 || ex[0].Session != "s2" || ex[0].Epoch != 0 || ex[1].Session != "s3" {
		t.Errorf("ExpiredLeases = %+v, %v; want s2 and s3, never leased", ex, err)
	}
	// node-a stops renewing: its lease is over, but nobody took it, so its
	// fenced writes still go through (fencing is by epoch, not by time).
	a = expire(t, st, a)
	if err := st.AppendEventsFenced(ctx, []store.Fence{a.Fence()}, evs("s1", 1, 1), nil); err != nil {
		t.Fatalf("a fenced append under an expired lease nobody took: %v", err)
	}
	live := []store.State{store.StateIdle, store.StateWorking}
	ex, err := st.ExpiredLeases(ctx, store.LeaseFilter{States: live})
	if err != nil || len(ex) != 2 || ex[0] != a || ex[1].Session != "s2" {
		t.Errorf("ExpiredLeases(live) = %+v, %v; want s1 (%+v) and s2", ex, err, a)
	}
	if ex, err := st.ExpiredLeases(ctx, store.LeaseFilter{States: live, Limit: 1}); err != nil || len(ex) != 1 || ex[0].Session != "s1" {
		t.Errorf("ExpiredLeases(live, limit 1) = %+v, %v; want s1", ex, err)
	}

	// node-b takes over.
	b := mustAcquire(t, st, "s1", "node-b", time.Hour)
	if b.Epoch != 2 || b.Node != "node-b" {
		t.Fatalf("takeover = %+v, want node-b at epoch 2", b)
	}
	if _, err := st.AcquireLease(ctx, "s1", "node-a", time.Hour); !errors.Is(err, store.ErrLocked) {
		t.Errorf("the old owner re-acquiring: %v, want ErrLocked", err)
	}
	_, err = st.RenewLease(ctx, a, time.Hour)
	wantLost(t, "the old owner's RenewLease", err, "s1", 1, "node-b", 2)

	// Every fenced write of the old owner is refused and writes nothing.
	err = st.AppendEventsFenced(ctx, []store.Fence{a.Fence()}, evs("s1", 2, 3),
		[]*store.Message{{ID: "m2", Session: "s1", Text: "stale", CreatedAt: base}})
	wantLost(t, "the old owner's AppendEventsFenced", err, "s1", 1, "node-b", 2)
	called := false
	_, err = st.UpdateSessionFenced(ctx, a.Fence(), func(s *store.Session) error { called = true; s.Title = "stale"; return nil })
	wantLost(t, "the old owner's UpdateSessionFenced", err, "s1", 1, "node-b", 2)
	if called {
		t.Error("UpdateSessionFenced called fn under a lost lease")
	}
	err = st.SetMessageStateFenced(ctx, a.Fence(), "m1", store.MessageDelivered, "t1")
	wantLost(t, "the old owner's SetMessageStateFenced", err, "s1", 1, "node-b", 2)
	if n, err := st.LastSeq(ctx, "s1"); err != nil || n != 1 {
		t.Errorf("LastSeq after refused appends = %d, %v; want 1", n, err)
	}
	if ms, err := st.Messages(ctx, "s1"); err != nil || len(ms) != 1 || ms[0].State != store.MessageQueued {
		t.Errorf("messages after refused writes = %+v, %v; want m1 alone, queued", ms, err)
	}
	if s, err := st.GetSession(ctx, "s1"); err != nil || s.Title != "one" {
		t.Errorf("session after a refused update = %+v, %v; want its title unchanged", s, err)
	}

	// The new owner's go through.
	if err := st.AppendEventsFenced(ctx, []store.Fence{b.Fence()}, evs("s1", 2, 3),
		[]*store.Message{{ID: "m2", Session: "s1", Text: "new", CreatedAt: base}}); err != nil {
		t.Fatalf("the new owner's AppendEventsFenced: %v", err)
	}
	s, err := st.UpdateSessionFenced(ctx, b.Fence(), func(s *store.Session) error { s.Title = "two"; return nil })
	if err != nil || s.Title != "two" {
		t.Fatalf("the new owner's UpdateSessionFenced = %+v, %v", s, err)
	}
	if err := st.SetMessageStateFenced(ctx, b.Fence(), "m1", store.MessageDelivered, "t1"); err != nil {
		t.Fatalf("the new owner's SetMessageStateFenced: %v", err)
	}
	if err := st.SetMessageStateFenced(ctx, b.Fence(), "nope", store.MessageDelivered, "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetMessageStateFenced of a missing message: %v, want ErrNotFound", err)
	}
	if n, err := st.LastSeq(ctx, "s1"); err != nil || n != 3 {
		t.Errorf("LastSeq = %d, %v; want 3", n, err)
	}
	if ms, err := st.Messages(ctx, "s1"); err != nil || len(ms) != 2 || ms[0].State != store.MessageDelivered || ms[1].Text != "new" {
		t.Errorf("messages = %+v, %v; want m1 delivered and m2", ms, err)
	}

	// A holder whose own lease ran out and who acquires it again starts a
	// new ownership: its old epoch is fenced out too.
	b2 := mustAcquire(t, st, "s1", "node-b", time.Hour)
	if b2.Epoch != 2 {
		t.Errorf("renewal by AcquireLease = %+v, want epoch 2", b2)
	}
	expire(t, st, b2)
	b3 := mustAcquire(t, st, "s1", "node-b", 0)
	if b3.Epoch != 3 {
		t.Errorf("re-acquired after it expired = %+v, want epoch 3", b3)
	}
	_, err = st.UpdateSessionFenced(ctx, b.Fence(), func(*store.Session) error { return nil })
	wantLost(t, "UpdateSessionFenced at the epoch before", err, "s1", 2, "node-b", 3)
	// A zero TTL is over at once, too.
	if c := mustAcquire(t, st, "s1", "node-c", time.Hour); c.Epoch != 4 {
		t.Errorf("taken after a zero-TTL lease: %+v, want epoch 4", c)
	}

	// A batch with one stale fence writes nothing, not even the sessions
	// whose fences are current.
	c2 := mustAcquire(t, st, "s2", "node-c", time.Hour)
	err = st.AppendEventsFenced(ctx, []store.Fence{c2.Fence(), b3.Fence()}, append(evs("s2", 1, 2), evs("s1", 4, 4)...), nil)
	wantLost(t, "a batch with a stale fence", err, "s1", 3, "node-c", 4)
	if n, err := st.LastSeq(ctx, "s2"); err != nil || n != 0 {
		t.Errorf("LastSeq(s2) after a refused batch = %d, %v; want 0", n, err)
	}

	// Fences the caller got wrong are errors, not a lost lease; a session
	// never leased has no owner to write for; a missing one is not found.
	for what, fences := range map[string][]store.Fence{
		"no fence":   nil,
		"epoch 0":    {{Session: "s2", Epoch: 0}},
		"two fences": {c2.Fence(), c2.Fence()},
	} {
		err := st.AppendEventsFenced(ctx, fences, evs("s2", 1, 1), nil)
		if err == nil || errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("AppendEventsFenced with %s: %v, want an error other than ErrLeaseLost", what, err)
		}
	}
	_, err = st.UpdateSessionFenced(ctx, store.Fence{Session: "s3", Epoch: 1}, func(*store.Session) error { return nil })
	wantLost(t, "UpdateSessionFenced of a session never leased", err, "s3", 1, "", 0)
	if _, err := st.UpdateSessionFenced(ctx, store.Fence{Session: "nope", Epoch: 1}, func(*store.Session) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateSessionFenced of a missing session: %v, want ErrNotFound", err)
	}
	if err := st.AppendEventsFenced(ctx, []store.Fence{{Session: "nope", Epoch: 1}}, evs("nope", 1, 1), nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AppendEventsFenced of a missing session: %v, want ErrNotFound", err)
	}
}

func testRenewLeases(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	if got, err := st.RenewLeases(ctx, nil, time.Hour); err != nil || len(got) != 0 {
		t.Errorf("RenewLeases(none) = %v, %v; want none", got, err)
	}
	for _, id := range []string{"s1", "s2", "s3", "s4"} {
		mustCreate(t, st, &store.Session{ID: id, Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})
	}
	l1 := mustAcquire(t, st, "s1", "node-a", time.Hour)
	l2 := expire(t, st, mustAcquire(t, st, "s2", "node-a", time.Hour)) // expired, nobody took it: still renewable
	l3 := mustAcquire(t, st, "s3", "node-a", time.Hour)
	l4 := mustAcquire(t, st, "s4", "node-a", time.Hour)
	// s3 is taken over by node-b; s4 is released.
	expire(t, st, l3)
	mustAcquire(t, st, "s3", "node-b", time.Hour)
	if err := st.ReleaseLease(ctx, l4); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	got, err := st.RenewLeases(ctx, []store.Lease{l1, l2, l3, l4}, 2*time.Hour)
	if err != nil {
		t.Fatalf("RenewLeases: %v", err)
	}
	if len(got) != 2 || got[0].Session != "s1" || got[1].Session != "s2" {
		t.Fatalf("RenewLeases = %+v, want s1 and s2 renewed (s3 taken over, s4 released)", got)
	}
	for i, want := range []store.Lease{l1, l2} {
		if got[i].Node != "node-a" || got[i].Epoch != want.Epoch || !near(got[i].Expires, before.Add(2*time.Hour)) {
			t.Errorf("renewed %+v, want %s at epoch %d until about 2 h from now", got[i], want.Session, want.Epoch)
		}
		if cur, err := st.GetLease(ctx, want.Session); err != nil || !cur.Expires.Equal(got[i].Expires) {
			t.Errorf("GetLease(%s) after RenewLeases = %+v, %v; want it to expire at %v", want.Session, cur, err, got[i].Expires)
		}
	}
	// A renewed lease still fences the old owner's writes off nothing:
	// s2's holder writes under its epoch.
	if _, err := st.UpdateSessionFenced(ctx, l2.Fence(), func(*store.Session) error { return nil }); err != nil {
		t.Errorf("a fenced write under the renewed lease of s2: %v", err)
	}
	if cur, err := st.GetLease(ctx, "s3"); err != nil || cur.Node != "node-b" {
		t.Errorf("s3's lease after node-a's renewal: %+v, %v; want node-b's", cur, err)
	}
	if _, err := st.RenewLeases(ctx, []store.Lease{{Session: "s1", Node: "", Epoch: 1}}, time.Hour); err == nil {
		t.Error("RenewLeases of a lease without a node succeeded")
	}
}
