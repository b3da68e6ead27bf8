package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
)

// TestHeartbeatRacingTakeover: a node's heartbeat sent before its
// heartbeat ran out, but held up (here by a row lock another transaction
// holds; in life a slow network or a busy server) until after it ran out,
// while another node takes one of its sessions over. The heartbeat judges
// expiry at its statement's time, before the expiry; the takeover at its
// own, after it. Whatever the order they end in, they must not both win:
// the takeover succeeding while the heartbeat goes on in the lease's
// generation would leave two nodes each sure it owns the session (the old
// one's fenced writes would be refused, but its box would run on). So
// either the takeover is refused (the heartbeat came first and the node
// is live), or the heartbeat answers a new generation (the takeover ended
// the one its leases are in). AcquireLease judges the holder under its
// node row's lock and ends an expired holder's generation there
// (store/sqlstore's leases.go); without both, the takeover reads the row
// the heartbeat has not written yet, and both win.
func TestHeartbeatRacingTakeover(t *testing.T) {
	ctx := testbin.Context(t)
	url := testbin.Postgres(t)
	st := open(t, url)
	p := pool(t, url)
	if err := st.CreateSession(ctx, &store.Session{ID: "s1", Owner: "o", State: store.StateIdle}, nil); err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	c, err := st.AcquireLease(ctx, "s1", "node-c", ttl)
	if err != nil {
		t.Fatal(err)
	}
	waiting := func() int {
		var n int
		if err := p.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Another transaction holds node-c's row: node-c's heartbeat, sent
	// now (before its expiry), waits for it.
	hold, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(context.Background())
	if _, err := hold.Exec(ctx, `SELECT 1 FROM nodes WHERE id = 'node-c' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	type beat struct {
		n   store.Node
		err error
	}
	beats := make(chan beat, 1)
	go func() {
		n, err := st.HeartbeatNode(ctx, store.Node{ID: "node-c", Leases: 1, Gen: c.Gen}, time.Hour)
		beats <- beat{n, err}
	}()
	testbin.WaitFor(t, 10*time.Second, "node-c's heartbeat to wait for its row", func() bool { return waiting() >= 1 })
	testbin.WaitFor(t, 10*time.Second, "node-c's heartbeat to run out on the server's clock", func() bool {
		var over bool
		if err := p.QueryRow(ctx, `SELECT statement_timestamp() > $1`, c.Expires).Scan(&over); err != nil {
			t.Fatal(err)
		}
		return over
	})

	// node-d takes s1 over: node-c's heartbeat ran out. It waits for the
	// row too, or gets through.
	type take struct {
		l   store.Lease
		err error
	}
	takes := make(chan take, 1)
	go func() {
		l, err := st.AcquireLease(ctx, "s1", "node-d", time.Hour)
		takes <- take{l, err}
	}()
	var tk take
	var took bool
	testbin.WaitFor(t, 10*time.Second, "node-d's takeover to wait for node-c's row, or to end", func() bool {
		select {
		case tk = <-takes:
			took = true
			return true
		default:
			return waiting() >= 2
		}
	})
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-beats
	if !took {
		tk = <-takes
	}
	if b.err != nil {
		t.Fatalf("node-c's heartbeat: %v", b.err)
	}
	switch {
	case tk.err == nil && b.n.Gen == c.Gen:
		t.Fatalf("node-d took s1 (%+v) and node-c's heartbeat went on in the lease's generation %d (%+v): two owners", tk.l, c.Gen, b.n)
	case tk.err == nil:
		t.Logf("node-d took s1 (epoch %d); node-c's heartbeat started generation %d: its leases of %d are over", tk.l.Epoch, b.n.Gen, c.Gen)
	case errors.Is(tk.err, store.ErrLocked):
		t.Logf("node-c's heartbeat went on in generation %d; node-d was refused: %v", b.n.Gen, tk.err)
	default:
		t.Fatalf("node-d's takeover: %v", tk.err)
	}
	if l, err := st.GetLease(ctx, "s1"); err != nil || (tk.err == nil) != (l.Node == "node-d") {
		t.Errorf("s1's lease after the race: %+v, %v", l, err)
	}
}
