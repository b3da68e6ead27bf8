package session

import (
	"fmt"
	"slices"
	"testing"

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
