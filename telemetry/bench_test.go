package telemetry_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
	"github.com/harvest-dev/harvest/telemetry"
)

// What the instrumentation costs on the hot paths, bare against measured
// in one binary (BENCHMARKS.md: Metrics and traces):
//
//	go test -run '^$' -bench 'Instrumented|Observe' -benchtime 2000x ./telemetry/
//
// exec: a command run in a live local box (sandbox.Run of `true`: the
// exec round trip and the wait), through the provider as it is and
// through sandbox.Observe. append: an event appended to the journal and
// waited for (AppendSync: queued, committed to SQLite with its fsync,
// fanned out), on the store as it is and through store.Observe.

func BenchmarkInstrumentedExec(b *testing.B) {
	p := local.New(local.Config{RunDir: testbin.TempDir(b), AgentBinary: testbin.Agent(b)})
	defer p.Close()
	testreq.Check(b, testreq.Local, p.Available(context.Background()))
	m := telemetry.NewMetrics(telemetry.Config{Version: "bench"})
	for _, v := range []struct {
		name string
		p    sandbox.Provider
	}{{"bare", p}, {"observed", sandbox.Observe(p, m)}} {
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			sb, err := v.p.Start(ctx, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 1 << 30, Pids: 256}})
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Destroy(ctx)
			samples := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				if st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}}); err != nil || !st.Success() {
					b.Fatal(st, err)
				}
				samples = append(samples, time.Since(t0))
			}
			percentiles(b, samples)
		})
	}
}

func BenchmarkInstrumentedAppend(b *testing.B) {
	m := telemetry.NewMetrics(telemetry.Config{Version: "bench"})
	for _, observed := range []bool{false, true} {
		name := "bare"
		if observed {
			name = "observed"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			raw, err := sqlite.Open(filepath.Join(b.TempDir(), "h.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer raw.Close()
			var st store.Store = raw
			if observed {
				st = store.Observe(raw, m)
			}
			if err := st.CreateSession(ctx, &store.Session{ID: "s1", Owner: "o", State: store.StateWorking}, nil); err != nil {
				b.Fatal(err)
			}
			j := journal.New(st, journal.Options{})
			defer j.Close(ctx)
			samples := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				if _, err := j.AppendSync(ctx, event.Event{Session: "s1", Turn: "t1", Data: event.AssistantDelta{Text: "a few tokens of streamed text"}}); err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(t0))
			}
			percentiles(b, samples)
		})
	}
}

// BenchmarkObserve: one observation of each hook, alone: what a measured
// call adds to the call.
func BenchmarkObserve(b *testing.B) {
	m := telemetry.NewMetrics(telemetry.Config{Version: "bench"})
	err := errors.New("x")
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"StoreOp", func() { m.StoreOp("AppendEvents", time.Millisecond, nil) }},
		{"StoreOpError", func() { m.StoreOp("GetSession", time.Millisecond, store.ErrNotFound) }},
		{"BoxOp", func() { m.BoxOp("local", sandbox.OpExec, time.Millisecond, nil) }},
		{"BoxOpFailed", func() { m.BoxOp("local", sandbox.OpExec, time.Millisecond, err) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.f()
			}
		})
	}
}

func percentiles(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	b.ReportMetric(us(samples[len(samples)/2]), "p50-µs")
	b.ReportMetric(us(samples[len(samples)*99/100]), "p99-µs")
}
