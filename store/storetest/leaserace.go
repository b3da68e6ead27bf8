package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// testLeaseRace: nodes racing for a session's lease, over several
// rounds: in each, exactly one wins, with the next epoch, and the others
// are told that one holds it. Then the winner's lease runs out and they
// race again.
func testLeaseRace(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	mustCreate(t, st, &store.Session{ID: "s1", Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})
	const nodes, rounds = 8, 4
	for round := int64(1); round <= rounds; round++ {
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			won   = make(chan store.Lease, nodes)
			held  = make(chan *store.LeaseHeldError, nodes)
			errs  = make(chan error, nodes)
		)
		for i := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := st.AcquireLease(ctx, "s1", fmt.Sprintf("node-%d", i), time.Hour)
				var he *store.LeaseHeldError
				switch {
				case err == nil:
					won <- l
				case errors.As(err, &he):
					held <- he
				default:
					errs <- err
				}
			}()
		}
		close(start)
		wg.Wait()
		close(won)
		close(held)
		close(errs)
		for err := range errs {
			t.Errorf("round %d: AcquireLease: %v", round, err)
		}
		var winners []store.Lease
		for l := range won {
			winners = append(winners, l)
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: %d nodes won the lease (%+v), want exactly one", round, len(winners), winners)
		}
		w := winners[0]
		if w.Epoch != round {
			t.Errorf("round %d: the winner got epoch %d, want %d", round, w.Epoch, round)
		}
		for he := range held {
			if he.Lease.Node != w.Node || he.Lease.Epoch != w.Epoch {
				t.Errorf("round %d: a loser was told %+v holds it, but %+v won", round, he.Lease, w)
			}
		}
		expire(t, st, w)
	}
}

// testFenceRace: the old owner appends events, one after another, while
// a new owner takes the session over. Whatever the interleaving, once
// AcquireLease returned the new epoch no event of the old one commits:
// the session's last seq read right after the takeover is the last one
// the old owner stored, and the next append the old owner makes is
// refused.
func testFenceRace(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mustCreate(t, st, &store.Session{ID: "s1", Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})
	// node-a's lease is over but nobody took it yet: its writes go on.
	a := expire(t, st, mustAcquire(t, st, "s1", "node-a", time.Hour))

	const before = 3 // appends made before the takeover starts
	var (
		started = make(chan struct{})
		done    = make(chan struct{})
		last    int64 // the last seq node-a stored
		lastErr error // what ended node-a's appends
	)
	go func() {
		defer close(done)
		for seq := int64(1); ; seq++ {
			err := st.AppendEventsFenced(ctx, []store.Fence{a.Fence()}, evs("s1", seq, seq), nil)
			if err != nil {
				lastErr = err
				return
			}
			last = seq
			if seq == before {
				close(started)
			}
		}
	}()
	select {
	case <-started:
	case <-done:
		t.Fatalf("node-a's appends stopped before the takeover: %v", lastErr)
	}
	b := mustAcquire(t, st, "s1", "node-b", time.Hour)
	if b.Epoch != 2 {
		t.Fatalf("takeover = %+v, want epoch 2", b)
	}
	atTakeover, err := st.LastSeq(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	<-done
	wantLost(t, "node-a's append after the takeover", lastErr, "s1", 1, "node-b", 2)
	if last != atTakeover {
		t.Errorf("node-a stored up to seq %d, but the last seq right after the takeover was %d: an append of the old epoch committed after the new one began", last, atTakeover)
	}
	if n, err := st.LastSeq(ctx, "s1"); err != nil || n != atTakeover {
		t.Errorf("LastSeq = %d, %v; want %d", n, err, atTakeover)
	}
	if err := st.AppendEventsFenced(ctx, []store.Fence{b.Fence()}, evs("s1", atTakeover+1, atTakeover+1), nil); err != nil {
		t.Errorf("node-b appending after the takeover: %v", err)
	}
}
