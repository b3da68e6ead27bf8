package backends_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/backends"
)

// Benchmarks of the sandbox layer. scripts/bench-sandbox prints the same
// measurements side by side with the alternatives (docker run/exec, a fresh
// bwrap, fork+exec); results are in BENCHMARKS.md.
//
//	go test -run '^$' -bench . ./sandbox/backends/

func benchProvider(b *testing.B, name string) sandbox.Provider {
	b.Helper()
	o := options(b, testbin.TempDir(b))
	if name == "local+pool" {
		name, o.LocalPool = "local", 4
	}
	p, err := backends.Open(name, o)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Available(context.Background()); err != nil {
		b.Skipf("%s unavailable: %v", name, err)
	}
	if c, ok := p.(interface{ Close() error }); ok {
		b.Cleanup(func() { c.Close() })
	}
	return p
}

func benchSpec() sandbox.Spec {
	return sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 1 << 30, Pids: 256}}
}

// reportPercentiles adds p50 and p99 of the samples as metrics.
func reportPercentiles(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	b.ReportMetric(float64(samples[len(samples)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(samples[(len(samples)*99)/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkCreateToFirstExit: Start a box and run `true` in it (the box is
// destroyed outside the timed part). local+pool keeps 4 warm boxes, as a
// server does.
func BenchmarkCreateToFirstExit(b *testing.B) {
	for _, name := range []string{"local", "local+pool", "docker"} {
		b.Run(name, func(b *testing.B) {
			p := benchProvider(b, name)
			ctx := context.Background()
			var samples []time.Duration
			for b.Loop() {
				t0 := time.Now()
				sb, err := p.Start(ctx, benchSpec())
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}}); err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(t0))
				b.StopTimer()
				sb.Destroy(ctx)
				b.StartTimer()
			}
			reportPercentiles(b, samples)
		})
	}
}

// BenchmarkExecRoundTrip: run `true` in a live box through its agent.
func BenchmarkExecRoundTrip(b *testing.B) {
	for _, name := range []string{"local", "docker", "host"} {
		b.Run(name, func(b *testing.B) {
			p := benchProvider(b, name)
			ctx := context.Background()
			sb, err := p.Start(ctx, benchSpec())
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Destroy(ctx)
			var samples []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}}); err != nil || !st.Success() {
					b.Fatal(st, err)
				}
				samples = append(samples, time.Since(t0))
			}
			reportPercentiles(b, samples)
		})
	}
}

// BenchmarkDestroy: destroy a box with an idle background process in it.
func BenchmarkDestroy(b *testing.B) {
	for _, name := range []string{"local", "docker"} {
		b.Run(name, func(b *testing.B) {
			p := benchProvider(b, name)
			ctx := context.Background()
			for b.Loop() {
				b.StopTimer()
				sb, err := p.Start(ctx, benchSpec())
				if err != nil {
					b.Fatal(err)
				}
				sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "sleep 1000 >/dev/null 2>&1 &"}})
				b.StartTimer()
				if err := sb.Destroy(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadFile: read a 1 MiB file through the agent.
func BenchmarkReadFile(b *testing.B) {
	p := benchProvider(b, "local")
	ctx := context.Background()
	sb, err := p.Start(ctx, benchSpec())
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(ctx)
	data := make([]byte, 1<<20)
	if err := sb.WriteFile(ctx, "/tmp/f", data, 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := sb.ReadFile(ctx, "/tmp/f"); err != nil {
			b.Fatal(err)
		}
	}
}
