package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// TestLeaseExpiryOnClock: on SQLite the leases' time is the Store's clock,
// so a test can let a TTL run out by moving it (the conformance suite,
// which must also run on a database server's clock, uses TTLs already
// over instead).
func TestLeaseExpiryOnClock(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "harvest.db"))
	clk := &fakeClock{t: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
	s.now = clk.now
	ctx := context.Background()
	if err := s.CreateSession(ctx, &store.Session{ID: "s1", Owner: "o", State: store.StateIdle}, nil); err != nil {
		t.Fatal(err)
	}
	const ttl = 15 * time.Second
	a, err := s.AcquireLease(ctx, "s1", "node-a", ttl)
	if err != nil || !a.Expires.Equal(clk.now().Add(ttl)) {
		t.Fatalf("AcquireLease = %+v, %v; want until now+%s", a, err, ttl)
	}
	clk.add(ttl / 2)
	if _, err := s.HeartbeatNode(ctx, store.Node{ID: "node-a", Leases: 1, Gen: a.Gen}, ttl); err != nil {
		t.Fatal(err)
	}
	a.Expires = clk.now().Add(ttl) // the heartbeat is the lease's renewal
	clk.add(ttl - time.Second)
	if _, err := s.AcquireLease(ctx, "s1", "node-b", ttl); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("AcquireLease a second before the heartbeat's expiry: %v, want ErrLocked", err)
	}
	if ns, err := s.ListNodes(ctx); err != nil || len(ns) != 1 || ns[0].Leases != 1 {
		t.Errorf("ListNodes a second before expiry = %+v, %v; want node-a with its lease", ns, err)
	}
	clk.add(time.Second) // exactly at Expires: over
	if ns, err := s.ListNodes(ctx); err != nil || len(ns) != 0 {
		t.Errorf("ListNodes after the heartbeat's TTL = %+v, %v; want none", ns, err)
	}
	if os, _, err := s.Orphans(ctx, 0); err != nil || len(os) != 1 || os[0].Lease != a {
		t.Errorf("Orphans = %+v, %v; want s1 with %+v", os, err, a)
	}
	b, err := s.AcquireLease(ctx, "s1", "node-b", ttl)
	if err != nil || b.Epoch != 2 {
		t.Fatalf("takeover at expiry = %+v, %v; want epoch 2", b, err)
	}
	if n, err := s.HeartbeatNode(ctx, store.Node{ID: "node-a", Gen: a.Gen}, ttl); err != nil || n.Gen == a.Gen {
		t.Errorf("node-a's heartbeat after the takeover = %+v, %v; want a new generation", n, err)
	}
}
