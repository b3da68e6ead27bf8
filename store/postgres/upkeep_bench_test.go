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
// PostgreSQL: the store calls each node's keeper makes every TTL/3
// (session/nodes_lease.go's keep: a heartbeat, one RenewLeases of every
// lease it holds, the scan for sessions nobody owns), for 10 nodes
// sharing 1,000 or 10,000 live sessions, with as many ended sessions
// again in the table (the sessions table only grows).
//
// One iteration is one round: every node's three calls, the nodes at
// once. It reports per round the rows the round wrote (leases renewed
// plus heartbeats), the WAL it wrote (pg_current_wal_lsn before and
// after: exact, nothing else writes the database), and the slowest node's
// time; and, at the default TTL's rhythm (a round every
// session.DefaultLeaseTTL/3), the rows and WAL per second that rhythm
// costs. The calls are the store's own; the keeper's order and rhythm are
// copied from keep(), so a change to the keeper's calls must be made here
// too (the benchmark names what it copies).
//
//	go test -run '^$' -bench LeaseUpkeep -benchtime 20x ./store/postgres/
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

	// live sessions, each leased by node i%nodes; ended ones, unleased.
	held := make([][]store.Lease, nodes)
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
		held[i%nodes] = append(held[i%nodes], l)
		mu.Unlock()
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
				_, err := st.HeartbeatNode(ctx, store.Node{ID: id, Addr: "http://" + id, Capacity: 0}, ttl)
				var renewed []store.Lease
				if err == nil {
					renewed, err = st.RenewLeases(ctx, held[n], ttl)
				}
				if err == nil && len(renewed) != len(held[n]) {
					err = fmt.Errorf("%s renewed %d of its %d leases", id, len(renewed), len(held[n]))
				}
				if err == nil {
					_, err = st.ListNodes(ctx)
				}
				if err == nil {
					_, _, err = st.Orphans(ctx, scanLimit)
				}
				took := time.Since(start)
				roundMu.Lock()
				defer roundMu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				rows += int64(len(renewed)) + 1
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
