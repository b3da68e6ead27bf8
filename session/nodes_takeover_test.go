package session

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/store"
)

// TestFairShare: the water-filling of orphans over live nodes, by their
// bounds and what they hold.
func TestShares(t *testing.T) {
	n := func(id string, leases, capacity int) store.Node {
		return store.Node{ID: id, Leases: leases, Capacity: capacity}
	}
	for _, tt := range []struct {
		name              string
		nodes             []store.Node
		held, cap, orphan int
		want              int
	}{
		{"alone, no bound: all", []store.Node{n("me", 0, 0)}, 0, 0, 600, 600},
		{"alone, not in the list yet", nil, 0, 0, 10, 10},
		{"three empty nodes: a third", []store.Node{n("a", 0, 0), n("me", 0, 0), n("b", 0, 0)}, 0, 0, 600, 200},
		{"a third, rounded up", []store.Node{n("a", 0, 0), n("me", 0, 0), n("b", 0, 0)}, 0, 0, 10, 4},
		{"the list's count of mine is stale: held wins", []store.Node{n("a", 0, 0), n("me", 50, 0)}, 0, 0, 10, 5},
		{"others already hold theirs", []store.Node{n("a", 100, 0), n("b", 100, 0)}, 0, 0, 100, 100},
		{"a node over the level keeps its own", []store.Node{n("a", 300, 0), n("b", 0, 0)}, 0, 0, 100, 50},
		{"me over the level: nothing more", []store.Node{n("a", 0, 0)}, 300, 0, 100, 300},
		{"a bounded node fills, the rest spreads", []store.Node{n("a", 0, 150), n("b", 0, 0)}, 0, 0, 600, 225},
		{"me bounded: my bound", []store.Node{n("a", 0, 0), n("b", 0, 0)}, 0, 100, 600, 100},
		{"a node below its floor takes none", []store.Node{n("a", 20, store.NodeFull), n("b", 0, 0)}, 0, 0, 100, 50},
		{"every node bounded, too few places: fill up", []store.Node{n("a", 0, 10)}, 0, 10, 100, 10},
		{"no orphans: what it holds", []store.Node{n("a", 7, 0)}, 3, 0, 0, 3},
	} {
		if got := tt.held + shares(tt.nodes, "me", tt.held, tt.cap, tt.orphan)["me"]; got != tt.want {
			t.Errorf("%s: share = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestPick: nodes that want orphans split the window of the oldest
// between them by rendezvous hashing — no session is in two nodes'
// window parts, none is left out — and each goes on past the window; a
// node that wants none gets no part.
func TestPick(t *testing.T) {
	var cands []store.Orphan
	for i := range 100 {
		cands = append(cands, store.Orphan{Lease: store.Lease{Session: fmt.Sprintf("s-%03d", i)}})
	}
	wants := map[string]int{"a": 30, "b": 30, "c": 0}
	const room = 20 // the window: min(30, 20) twice
	seen := map[string]string{}
	for _, me := range []string{"a", "b"} {
		got := pick(slices.Clone(cands), wants, me, room)
		part := len(got) - 60
		if part < 5 || part > 35 {
			t.Errorf("node %s: %d of the window of 40, want about half", me, part)
		}
		for i, o := range got {
			if i >= part {
				if want := cands[40+i-part].Lease.Session; o.Lease.Session != want {
					t.Fatalf("node %s: after its part of the window, %s at %d, want %s (in order)", me, o.Lease.Session, i, want)
				}
				continue
			}
			if o.Lease.Session >= "s-040" {
				t.Errorf("node %s: %s in its part of the window", me, o.Lease.Session)
			}
			if other, ok := seen[o.Lease.Session]; ok {
				t.Errorf("%s in the window parts of %s and %s", o.Lease.Session, other, me)
			}
			seen[o.Lease.Session] = me
		}
	}
	if len(seen) != 40 {
		t.Errorf("%d of the window of 40 in a part", len(seen))
	}
	if got := pick(slices.Clone(cands), wants, "c", room); len(got) != 60 || got[0].Lease.Session != "s-040" {
		t.Errorf("node c, wanting none: %d, from %s; want the 60 after the window", len(got), got[0].Lease.Session)
	}
}

// TestNodesTakeoverSuspended: a suspended session nobody owns is no
// orphan — no node takes it over, it gets no box — until a message waits
// for it. Node a (--max-sessions 1) suspends its session, then runs
// another and is full; node b scans and leaves the suspended one alone.
// A message sent to it through full node a is stored and queued; then b
// takes it over and runs the turn.
func TestNodesTakeoverSuspended(t *testing.T) {
	e := newEnv(t, withSharedData(), func(c *envConfig) {
		c.node = &NodeConfig{ID: "a", Addr: "http://a.invalid", TTL: nodeTTL, Capacity: 1}
	})
	ctx := testbin.Context(t)
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	b, _ := e.openNode("b", nodeTTL)
	if err := b.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	v := e.create("msg one")
	w := e.watch(v.ID)
	w.IdleAfter("t1")
	e.Clock.Advance(DefaultIdleTimeout)
	w.State(store.StateSuspended)
	waitFor(t, "the suspended session's lease to be given up", func() bool {
		l, err := e.st.GetLease(ctx, v.ID)
		return err == nil && l.Node == ""
	})

	// b, past its first round, scans: nothing to take.
	waitFor(t, "node b's first round", func() bool {
		b.node.scan.mu.Lock()
		defer b.node.scan.mu.Unlock()
		return !b.node.scan.first.IsZero() && time.Since(b.node.scan.first) > nodeTTL/3
	})
	if err := b.takeover(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := e.st.GetLease(ctx, v.ID); err != nil || l.Node != "" {
		t.Fatalf("the suspended session's lease after node b's scan: %+v %v, want nobody's", l, err)
	}
	if st := b.Stats(); st.TakenOver != 0 || st.Runners != 0 {
		t.Fatalf("node b after its scan: %+v, want nothing taken over, no runner", st)
	}

	// a runs another session: full. A message to the suspended one, sent
	// through a, waits for a node with room: b.
	full := e.create("msg full")
	e.watch(full.ID).IdleAfter("t1")
	m := e.send(v.ID, "msg two", "")
	if l, err := e.st.GetLease(ctx, v.ID); err != nil || l.Node == "a" {
		t.Fatalf("the lease after a message through full node a: %+v %v, want a's given up", l, err)
	}
	waitFor(t, "node b to take the session over", func() bool {
		l, err := e.st.GetLease(ctx, v.ID)
		return err == nil && l.Node == "b"
	})
	stacktest.Watch(t, v.ID, func(after int64) (*journal.Subscription, error) {
		return b.Subscribe(context.Background(), "", v.ID, after)
	}).Until("turn t2, on node b, to end", stacktest.TurnEnded("t2"))
	msgs, err := e.st.Messages(ctx, v.ID, store.MessageDelivered)
	if err != nil || len(msgs) != 2 || msgs[1].ID != m.ID {
		t.Errorf("delivered messages: %+v %v, want the prompt and %s", msgs, err, m.ID)
	}
}
