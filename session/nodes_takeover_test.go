package session

import (
	"testing"

	"github.com/harvest-dev/harvest/store"
)

// TestFairShare: the water-filling of orphans over live nodes, by their
// bounds and what they hold.
func TestFairShare(t *testing.T) {
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
		if got := fairShare(tt.nodes, "me", tt.held, tt.cap, tt.orphan); got != tt.want {
			t.Errorf("%s: fairShare = %d, want %d", tt.name, got, tt.want)
		}
	}
}
