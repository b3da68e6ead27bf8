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
// with TTLs that are already over when given (a node that "stops beating"
// beats with a negative TTL), and unexpired with TTLs of an hour: no
// sleeps, no race with the clock.

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

func mustBeat(t *testing.T, st store.Store, n store.Node, ttl time.Duration) store.Node {
	t.Helper()
	got, err := st.HeartbeatNode(context.Background(), n, ttl)
	if err != nil {
		t.Fatalf("HeartbeatNode(%+v): %v", n, err)
	}
	return got
}

func mustLease(t *testing.T, st store.Store, session string) store.Lease {
	t.Helper()
	l, err := st.GetLease(context.Background(), session)
	if err != nil {
		t.Fatalf("GetLease(%s): %v", session, err)
	}
	return l
}

// expire makes l's TTL over, as if its node had stopped beating: its
// node's heartbeat, in l's generation, runs out. Every lease of that
// node's generation expires with it. It returns l as now stored.
func expire(t *testing.T, st store.Store, l store.Lease) store.Lease {
	t.Helper()
	if n := mustBeat(t, st, store.Node{ID: l.Node, Gen: l.Gen}, -time.Second); n.Gen != l.Gen {
		t.Fatalf("expiring %+v: its node's heartbeat went on in generation %d", l, n.Gen)
	}
	return mustLease(t, st, l.Session)
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
	for _, bad := range []store.Node{{Addr: "x:1"}, {ID: "node-x", Capacity: -2}, {ID: "node-x", Leases: -1}, {ID: "node-x", Gen: -1}} {
		if _, err := st.HeartbeatNode(ctx, bad, time.Hour); err == nil {
			t.Errorf("HeartbeatNode(%+v) succeeded", bad)
		}
	}
	for _, id := range []string{"s1", "s2", "s3"} {
		mustCreate(t, st, &store.Session{ID: id, Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})
	}
	s1 := mustAcquire(t, st, "s1", "node-a", time.Hour)
	mustAcquire(t, st, "s2", "node-a", time.Hour)
	before := time.Now()
	a, err := st.HeartbeatNode(ctx, store.Node{ID: "node-a", Addr: "10.0.0.1:8080", Capacity: 50, Leases: 2, Gen: s1.Gen}, time.Hour)
	if err != nil {
		t.Fatalf("HeartbeatNode: %v", err)
	}
	if a.ID != "node-a" || a.Addr != "10.0.0.1:8080" || a.Capacity != 50 || a.Leases != 2 || a.Gen != s1.Gen ||
		!near(a.Heartbeat, before) || !near(a.Expires, before.Add(time.Hour)) {
		t.Errorf("HeartbeatNode = %+v, want node-a at about now, live for an hour, holding 2, in generation %d", a, s1.Gen)
	}
	for _, n := range []store.Node{{ID: "node-c", Addr: "10.0.0.3:8080"}, {ID: "node-b", Addr: "10.0.0.2:8080", Capacity: 10}} {
		mustBeat(t, st, n, time.Hour)
	}
	// node-c's heartbeat runs out (a dead node); node-b moves.
	mustBeat(t, st, store.Node{ID: "node-c", Addr: "10.0.0.3:8080"}, -time.Second)
	mustBeat(t, st, store.Node{ID: "node-b", Addr: "10.0.0.9:9090", Capacity: 20}, time.Hour)

	ns, err := st.ListNodes(ctx)
	if err != nil {
		t.Fatalf("ListNodes: %v", err)
	}
	if len(ns) != 2 || ns[0].ID != "node-a" || ns[1].ID != "node-b" {
		t.Fatalf("ListNodes = %+v, want node-a and node-b (node-c's heartbeat ran out)", ns)
	}
	if ns[0] != a {
		t.Errorf("node-a listed as %+v, want %+v", ns[0], a)
	}
	if ns[1].Addr != "10.0.0.9:9090" || ns[1].Capacity != 20 || ns[1].Leases != 0 {
		t.Errorf("node-b listed as %+v, want its last heartbeat's address and capacity", ns[1])
	}
	// A node that takes nothing at the moment says so, and is listed so.
	mustBeat(t, st, store.Node{ID: "node-b", Addr: "10.0.0.9:9090", Capacity: store.NodeFull}, time.Hour)
	if ns, err := st.ListNodes(ctx); err != nil || len(ns) != 2 || ns[1].Capacity != store.NodeFull {
		t.Errorf("ListNodes after node-b's NodeFull heartbeat = %+v, %v", ns, err)
	}
	// A dead node that beats again is back.
	mustBeat(t, st, store.Node{ID: "node-c"}, time.Hour)
	// A node that leaves for good releases its leases: they are taken at
	// once, with the next epoch.
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
	if l := mustLease(t, st, "s1"); l.Node != "" || l.Epoch != 1 {
		t.Errorf("lease of s1 after its node was removed = %+v; want released at epoch 1", l)
	}
	if l := mustAcquire(t, st, "s2", "node-b", time.Hour); l.Epoch != 2 {
		t.Errorf("s2 taken after its node left: %+v, want epoch 2", l)
	}

	// Dead nodes leave the table once their heartbeat ran out long enough
	// ago, and their leases are released: node-d (holding s3) an hour
	// ago, node-e a second ago, node-b and node-c live.
	mustAcquire(t, st, "s3", "node-d", time.Hour)
	for _, n := range []struct {
		id  string
		ttl time.Duration
	}{{"node-d", -time.Hour}, {"node-e", -time.Second}} {
		mustBeat(t, st, store.Node{ID: n.id}, n.ttl)
	}
	if _, err := st.RemoveDeadNodes(ctx, -time.Second); err == nil {
		t.Error("RemoveDeadNodes with a negative time gone succeeded")
	}
	if ids, err := st.RemoveDeadNodes(ctx, time.Minute); err != nil || fmt.Sprint(ids) != "[node-d]" {
		t.Errorf("RemoveDeadNodes(a minute) = %v, %v; want [node-d]", ids, err)
	}
	if l := mustLease(t, st, "s3"); l.Node != "" || l.Epoch != 1 {
		t.Errorf("lease of s3 after its dead node left = %+v; want released at epoch 1", l)
	}
	if ids, err := st.RemoveDeadNodes(ctx, 0); err != nil || fmt.Sprint(ids) != "[node-e]" {
		t.Errorf("RemoveDeadNodes(0) = %v, %v; want [node-e]", ids, err)
	}
	if ns, err := st.ListNodes(ctx); err != nil || len(ns) != 2 {
		t.Errorf("ListNodes after removing the dead = %+v, %v; want node-b and node-c", ns, err)
	}
	// A removed node that beats again is back.
	mustBeat(t, st, store.Node{ID: "node-d"}, time.Hour)
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
	if a.Session != "s1" || a.Node != "node-a" || a.Epoch != 1 || a.Gen < 1 || !near(a.Expires, before.Add(time.Hour)) {
		t.Errorf("AcquireLease = %+v, want node-a, epoch 1, in a generation, for an hour", a)
	}
	if g := mustLease(t, st, "s1"); g != a {
		t.Errorf("GetLease = %+v; want %+v", g, a)
	}
	// The acquire was node-a's heartbeat too (with no address yet).
	if ns, err := st.ListNodes(ctx); err != nil || len(ns) != 1 || ns[0].ID != "node-a" || ns[0].Gen != a.Gen || !ns[0].Expires.Equal(a.Expires) {
		t.Errorf("ListNodes after node-a's first acquire = %+v, %v; want node-a in generation %d until %v", ns, err, a.Gen, a.Expires)
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

	// The holder keeps it by its heartbeats, or by AcquireLease: the
	// epoch stays, the expiry moves on with the heartbeat's.
	r := mustAcquire(t, st, "s1", "node-a", 2*time.Hour)
	if r.Epoch != 1 || r.Gen != a.Gen || !r.Expires.After(a.Expires) {
		t.Errorf("re-acquired by its holder: %+v, want epoch 1 and a later expiry than %+v", r, a)
	}
	n := mustBeat(t, st, store.Node{ID: "node-a", Addr: "a:1", Gen: r.Gen}, 3*time.Hour)
	if n.Gen != r.Gen {
		t.Errorf("node-a's heartbeat in its generation %d: %+v, want the same generation", r.Gen, n)
	}
	if g := mustLease(t, st, "s1"); g.Epoch != 1 || g.Node != "node-a" || !g.Expires.Equal(n.Expires) {
		t.Errorf("GetLease after node-a's heartbeat = %+v, want epoch 1 until the heartbeat's expiry %v", g, n.Expires)
	}

	// Release by a non-holder does nothing; by the holder, frees it and
	// keeps the epoch.
	if err := st.ReleaseLease(ctx, store.Lease{Session: "s1", Node: "node-b", Epoch: 1}); err != nil {
		t.Errorf("ReleaseLease by a non-holder: %v, want nil", err)
	}
	if g := mustLease(t, st, "s1"); g.Node != "node-a" {
		t.Errorf("after a non-holder's release: %+v; want still node-a's", g)
	}
	if err := st.ReleaseLease(ctx, r); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	if g := mustLease(t, st, "s1"); g.Node != "" || g.Epoch != 1 || !g.Expires.IsZero() {
		t.Errorf("GetLease after release = %+v; want no node, epoch 1, no expiry", g)
	}
	if err := st.ReleaseLease(ctx, r); err != nil {
		t.Errorf("ReleaseLease twice: %v, want nil", err)
	}
	if _, err := st.UpdateSessionFenced(ctx, r.Fence(), func(*store.Session) error { return nil }); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("a fenced write under a released lease: %v, want ErrLeaseLost", err)
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
	// node-a stops beating: its lease is over, but nobody took it, so its
	// fenced writes still go through (fencing is by epoch, not by time).
	a = expire(t, st, a)
	if err := st.AppendEventsFenced(ctx, []store.Fence{a.Fence()}, evs("s1", 1, 1), nil); err != nil {
		t.Fatalf("a fenced append under an expired lease nobody took: %v", err)
	}
	if os, total, err := st.Orphans(ctx, 0); err != nil || total != 2 || os[0].Lease != a || os[1].Lease.Session != "s2" {
		t.Errorf("Orphans = %+v (total %d), %v; want s1 (%+v) and s2", os, total, err, a)
	}

	// node-b takes over.
	b := mustAcquire(t, st, "s1", "node-b", time.Hour)
	if b.Epoch != 2 || b.Node != "node-b" {
		t.Fatalf("takeover = %+v, want node-b at epoch 2", b)
	}
	if _, err := st.AcquireLease(ctx, "s1", "node-a", time.Hour); !errors.Is(err, store.ErrLocked) {
		t.Errorf("the old owner re-acquiring: %v, want ErrLocked", err)
	}
	// Nor can its heartbeat bring its generation back: it is over.
	if n := mustBeat(t, st, store.Node{ID: "node-a", Gen: a.Gen}, time.Hour); n.Gen == a.Gen {
		t.Errorf("node-a's heartbeat in its generation %d after the takeover: %+v, want a new generation", a.Gen, n)
	}

	// Every fenced write of the old owner is refused and writes nothing.
	err := st.AppendEventsFenced(ctx, []store.Fence{a.Fence()}, evs("s1", 2, 3),
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

// testGenerations: a node's heartbeats keep every lease of its
// generation live at once (one row written, however many it holds); a
// heartbeat after the TTL, or one naming no generation, starts the next
// generation, which ends the leases of the earlier ones; a takeover of an
// expired node's session ends its generation, so that a heartbeat racing
// with the takeover cannot revive it. NodeLeases lists a node's leases;
// Moved counts the sessions deleted under it.
func testGenerations(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	for _, id := range []string{"s1", "s2", "s3", "s4", "s5"} {
		mustCreate(t, st, &store.Session{ID: id, Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})
	}
	n := mustBeat(t, st, store.Node{ID: "node-a", Addr: "a:1"}, time.Hour)
	if n.Gen < 1 || n.Moved != 0 || !n.Ended.IsZero() {
		t.Errorf("a node's first heartbeat: %+v, want a generation, nothing moved, none ended", n)
	}
	l1 := mustAcquire(t, st, "s1", "node-a", time.Hour)
	l2 := mustAcquire(t, st, "s2", "node-a", time.Hour)
	if l1.Gen != n.Gen || l2.Gen != n.Gen {
		t.Errorf("leases %+v and %+v taken in node-a's live generation %d: want that generation", l1, l2, n.Gen)
	}
	// A heartbeat in the generation keeps both live until its expiry.
	before := time.Now()
	n2 := mustBeat(t, st, store.Node{ID: "node-a", Addr: "a:1", Leases: 2, Gen: n.Gen}, 2*time.Hour)
	if n2.Gen != n.Gen || !near(n2.Expires, before.Add(2*time.Hour)) {
		t.Errorf("heartbeat in generation %d: %+v, want the same generation until 2 h from now", n.Gen, n2)
	}
	ls, err := st.NodeLeases(ctx, "node-a")
	if err != nil || len(ls) != 2 || ls[0].Session != "s1" || ls[1].Session != "s2" {
		t.Fatalf("NodeLeases(node-a) = %+v, %v; want s1 and s2", ls, err)
	}
	for i, want := range []store.Lease{l1, l2} {
		want.Expires = n2.Expires
		if ls[i] != want {
			t.Errorf("NodeLeases(node-a)[%d] = %+v, want %+v", i, ls[i], want)
		}
	}
	if _, err := st.AcquireLease(ctx, "s1", "node-b", time.Hour); !errors.Is(err, store.ErrLocked) {
		t.Errorf("node-b taking s1 from live node-a: %v, want ErrLocked", err)
	}

	// node-a stopped acting for its sessions (its deadline passed) and
	// starts afresh: a heartbeat naming no generation ends the one its
	// leases have, although its heartbeat had not run out.
	before = time.Now()
	n3 := mustBeat(t, st, store.Node{ID: "node-a", Addr: "a:1"}, time.Hour)
	if n3.Gen <= n.Gen || !near(n3.Ended, before) {
		t.Errorf("heartbeat with no generation: %+v, want a generation after %d, the previous one ended now", n3, n.Gen)
	}
	if g := mustLease(t, st, "s1"); g.Node != "node-a" || g.Epoch != 1 || !g.Expires.Equal(n3.Ended) {
		t.Errorf("s1 after node-a's new generation: %+v, want node-a's epoch 1, expired at %v", g, n3.Ended)
	}
	if os, total, err := st.Orphans(ctx, 0); err != nil || total != 5 {
		t.Errorf("Orphans after node-a's new generation = %+v (total %d), %v; want all five", os, total, err)
	}
	// Anyone may take them, node-a too, with the next epoch.
	b1 := mustAcquire(t, st, "s1", "node-b", time.Hour)
	a2 := mustAcquire(t, st, "s2", "node-a", time.Hour)
	if b1.Epoch != 2 || a2.Epoch != 2 || a2.Gen != n3.Gen {
		t.Errorf("s1 taken by node-b: %+v, s2 by node-a again: %+v; want epoch 2 each, node-a's in generation %d", b1, a2, n3.Gen)
	}
	_, err = st.UpdateSessionFenced(ctx, l2.Fence(), func(*store.Session) error { return nil })
	wantLost(t, "node-a's fenced write under its ended generation's epoch", err, "s2", 1, "node-a", 2)

	// A heartbeat after the TTL ran out starts the next generation too,
	// whatever generation it names.
	mustBeat(t, st, store.Node{ID: "node-a", Addr: "a:1", Gen: n3.Gen}, -time.Second)
	if n4 := mustBeat(t, st, store.Node{ID: "node-a", Addr: "a:1", Gen: n3.Gen}, time.Hour); n4.Gen == n3.Gen {
		t.Errorf("a heartbeat after the TTL: %+v, want a generation after %d", n4, n3.Gen)
	}
	if g := mustLease(t, st, "s2"); g.Epoch != 2 || g.Expires.After(time.Now()) {
		t.Errorf("s2 after node-a's heartbeat ran out: %+v, want expired", g)
	}

	// A takeover of an expired node's session ends its generation: its
	// heartbeat naming that generation, as one sent before the takeover
	// and arriving after, starts the next one instead of reviving it.
	c := mustAcquire(t, st, "s3", "node-c", time.Hour)
	mustAcquire(t, st, "s4", "node-c", time.Hour)
	expire(t, st, c)
	if d := mustAcquire(t, st, "s3", "node-d", time.Hour); d.Epoch != 2 {
		t.Errorf("node-d taking s3 from dead node-c: %+v, want epoch 2", d)
	}
	if nc := mustBeat(t, st, store.Node{ID: "node-c", Gen: c.Gen}, time.Hour); nc.Gen == c.Gen {
		t.Errorf("node-c's heartbeat after node-d took one of its sessions: %+v, want a generation after %d", nc, c.Gen)
	}
	if g := mustLease(t, st, "s4"); g.Node != "node-c" || g.Gen != c.Gen || g.Expires.After(time.Now()) {
		t.Errorf("node-c's other session s4: %+v, want expired with node-c's ended generation", g)
	}

	// A session deleted under its node moves the node's count; one that
	// no node holds moves none.
	e := mustBeat(t, st, store.Node{ID: "node-e"}, time.Hour)
	mustAcquire(t, st, "s5", "node-e", time.Hour)
	if err := st.DeleteSession(ctx, "s5"); err != nil {
		t.Fatal(err)
	}
	if err := st.ReleaseLease(ctx, b1); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if e2 := mustBeat(t, st, store.Node{ID: "node-e", Gen: e.Gen}, time.Hour); e2.Moved != e.Moved+1 || e2.Gen != e.Gen {
		t.Errorf("node-e after its session was deleted: %+v, want Moved %d, generation %d", e2, e.Moved+1, e.Gen)
	}
	if nb := mustBeat(t, st, store.Node{ID: "node-b"}, time.Hour); nb.Moved != 0 {
		t.Errorf("node-b after deleting a session it had released: %+v, want Moved 0", nb)
	}
	if ls, err := st.NodeLeases(ctx, "node-e"); err != nil || len(ls) != 0 {
		t.Errorf("NodeLeases(node-e) after its session was deleted = %+v, %v; want none", ls, err)
	}
	if _, err := st.NodeLeases(ctx, ""); err == nil {
		t.Error("NodeLeases without a node succeeded")
	}
}
