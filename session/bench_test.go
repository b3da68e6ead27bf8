package session

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
)

// BenchmarkCreateToFirstRequest measures the time from Create (with a
// prompt, on a one-file repository) to the model's first request arriving
// at harvest sim: the workspace copy, a local box from a warm pool, the
// agent and the store writes in between. Reported as p50/p99 ms.
func BenchmarkCreateToFirstRequest(b *testing.B) {
	e := newEnv(b, withPool(4))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var lat []time.Duration
	one := func() {
		n := len(e.Sim.Load().Requests())
		start := time.Now()
		v, err := e.m.Create(ctx, "owner-1", CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Prompt: "msg hi"})
		if err != nil {
			b.Fatal(err)
		}
		testbin.WaitFor(b, stacktest.WaitTimeout, "the first model request", func() bool { return len(e.Sim.Load().Requests()) > n })
		lat = append(lat, e.Sim.Load().Requests()[n].Time.Sub(start))
		b.StopTimer()
		w := e.watch(v.ID)
		w.IdleAfter("t1")
		w.Sub.Close()
		if err := e.m.Delete(ctx, "owner-1", v.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	// The first box of a provider also builds its root and fills the pool.
	one()
	lat = lat[:0]
	for b.Loop() {
		one()
	}
	slices.Sort(lat)
	b.Logf("slowest: %v", lat[max(0, len(lat)-5):])
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
