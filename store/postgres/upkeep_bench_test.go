package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
)

// BenchmarkLeaseUpkeep measures what keeping several nodes' leases costs
// PostgreSQL: the store calls each node makes every TTL/3 (package
// session: the renewer's heartbeat, nodes_fence.go's beat, which is the
// lease of every session the node holds; the keeper's scan for sessions
// nobody owns, nodes_takeover.go's takeover: ListNodes and Orphans), for
// 10 nodes sharing 1,000 or 10,000 live sessions, with as many ended
// sessions again in the table (the sessions table only grows). The read
// of a node's own leases (NodeLeases) is made only when a session was
// deleted under it (Node.Moved changed): not in a round where none was.
//
// One iteration is one round: every node's calls, the nodes at once. It
// reports per round the rows the round wrote (heartbeats), the WAL it
// wrote (pg_current_wal_lsn before and after: exact, nothing else writes
// the database), and the slowest node's time; and, at the default TTL's
// rhythm (a round every session.DefaultLeaseTTL/3), the rows and WAL per
// second that rhythm costs. The calls are the store's own; the order and
// rhythm are copied from the renewer and the keeper, so a change to their
// calls must be made here too (the benchmark names what it copies).
//
//	go test -run '^$' -bench LeaseUpkeep -benchtime 10x ./store/postgres/
func BenchmarkLeaseUpkeep(b *testing.B) {
	for _, live := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("live=%d", live), func(b *testing.B) { benchUpkeep(b, 10, live, live) })
	}
}

// defaultRound is how often a keeper runs: session.DefaultLeaseTTL/3
// (10 s / 3; not imported: store/postgres sits below session).
const defaultRound = 10 * time.Second / 3

func benchUpkeep(b *testing.B, nodes, live, ended int) {
	ctx := context.Background()
	url := testbin.Postgres(b)
	st := open(b, url)
	p := pool(b, url)
	const ttl = time.Hour // leases must not run out while the benchmark sets up
	created := time.Now()

	// live sessions, each leased by node i%nodes (whose first acquire is
	// its first heartbeat: its generation, gens[n]); ended ones, unleased.
	held := make([]int, nodes)
	gens := make([]int64, nodes)
	var mu sync.Mutex
	err := parallel(8, live+ended, func(i int) error {
		id := fmt.Sprintf("s-upkeep%08d", i)
		state := store.StateIdle
		if i >= live {
			state = store.StateStopped
		}
		if err := st.CreateSession(ctx, &store.Session{ID: id, Owner: "o", State: state, CreatedAt: created, UpdatedAt: created}, nil); err != nil {
			return err
		}
		if i >= live {
			return nil
		}
		node := fmt.Sprintf("node-%02d", i%nodes)
		l, err := st.AcquireLease(ctx, id, node, ttl)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if g := gens[i%nodes]; g != 0 && g != l.Gen {
			return fmt.Errorf("%s took %s in generation %d, its others in %d", node, id, l.Gen, g)
		}
		held[i%nodes]++
		gens[i%nodes] = l.Gen
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		b.Fatal(err)
	}
	// takeover's scan: a round's worth of room on every live node (its
	// default rate's bucket, 16) and some slack.
	const scanLimit = 16*10 + 64
	lsn := func() int64 {
		var n int64
		if err := p.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}

	var rows, wal int64
	var slowest time.Duration
	b.ResetTimer()
	for range b.N {
		before := lsn()
		var (
			wg      sync.WaitGroup
			roundMu sync.Mutex
			errs    []error
		)
		for n := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				id := fmt.Sprintf("node-%02d", n)
				// The renewer's beat: the lease of all it holds.
				nd, err := st.HeartbeatNode(ctx, store.Node{ID: id, Addr: "http://" + id, Capacity: 0, Leases: held[n], Gen: gens[n]}, ttl)
				if err == nil && nd.Gen != gens[n] {
					err = fmt.Errorf("%s's heartbeat started generation %d: its leases of %d are over", id, nd.Gen, gens[n])
				}
				// The keeper's takeover scan.
				if err == nil {
					_, err = st.ListNodes(ctx)
				}
				var orphans int
				if err == nil {
					_, orphans, err = st.Orphans(ctx, scanLimit)
				}
				if err == nil && orphans != 0 {
					err = fmt.Errorf("%s found %d orphans, want none: every live session is held", id, orphans)
				}
				took := time.Since(start)
				roundMu.Lock()
				defer roundMu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				rows++ // the heartbeat
				slowest = max(slowest, took)
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			b.Fatal(errs[0])
		}
		wal += lsn() - before
	}
	b.StopTimer()
	perRound := float64(rows) / float64(b.N)
	walPerRound := float64(wal) / float64(b.N)
	b.ReportMetric(perRound, "rows/round")
	b.ReportMetric(walPerRound/1024, "WAL-KiB/round")
	b.ReportMetric(float64(slowest.Microseconds())/1000, "slowest-node-ms")
	b.ReportMetric(perRound/defaultRound.Seconds(), "rows/s@TTL10s")
	b.ReportMetric(walPerRound/1024/defaultRound.Seconds(), "WAL-KiB/s@TTL10s")
}

// parallel calls fn(0..n-1) on workers goroutines and returns the first
// error.
func parallel(workers, n int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		next  = make(chan int)
		errMu sync.Mutex
		first error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					errMu.Lock()
					if first == nil {
						first = err
					}
					errMu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}
