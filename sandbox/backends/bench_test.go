package backends_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/backends"
	"github.com/harvest-dev/harvest/sandbox/disk"
)

// Benchmarks of the sandbox layer. scripts/bench-sandbox prints the same
// measurements side by side with the alternatives (docker run/exec, a fresh
// bwrap, fork+exec); results are in BENCHMARKS.md.
//
//	go test -run '^$' -bench . ./sandbox/backends/

func benchProvider(b *testing.B, name string) sandbox.Provider {
	b.Helper()
	o := options(b, testbin.TempDir(b))
	variant := name
	switch name {
	case "local+pool":
		name, o.LocalPool = "local", 4
	case "docker+runsc":
		name, o.DockerRuntime = "docker", "runsc"
	}
	p, err := backends.Open(name, o)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Available(context.Background()); err != nil {
		req, ok := backendReqs[variant]
		if !ok {
			b.Fatalf("%s unavailable: %v", variant, err)
		}
		testreq.Unavailable(b, req, "%s unavailable: %v", variant, err)
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
	for _, name := range []string{"local", "local+pool", "docker", "docker+runsc"} {
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

// BenchmarkRoundTrip: the whole life of a one-command box, timed: Start,
// run `true`, Destroy. docker (runc) and docker+runsc (gVisor) side by
// side: what gVisor costs a session's box.
func BenchmarkRoundTrip(b *testing.B) {
	for _, name := range []string{"docker", "docker+runsc"} {
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
				if st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}}); err != nil || !st.Success() {
					b.Fatal(st, err)
				}
				if err := sb.Destroy(ctx); err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(t0))
			}
			reportPercentiles(b, samples)
		})
	}
}

// BenchmarkCreateWithDisk measures what disk limits add to a create. Each
// iteration starts two boxes with one workspace each, as a session's, and
// runs `true` in them, back to back so that both see the same load (this
// machine is shared and noisy): one plain (the workspace in a plain
// directory) and one on a disk (a 20 GiB sparse ext4 image made and
// loop-mounted first, the workspace on it, the box's /tmp and HOME bound
// from it: Spec.DiskDir). Metrics: p50 of the plain create, of the create
// with its disk, and of making the disk alone. Destroying the boxes and
// removing the disk are not timed.
func BenchmarkCreateWithDisk(b *testing.B) {
	testreq.Check(b, testreq.Disks, disk.Check(context.Background(), ""))
	for _, name := range []string{"local", "local+pool", "docker"} {
		b.Run(name, func(b *testing.B) {
			p := benchProvider(b, name)
			ctx := context.Background()
			dir := testbin.TempDir(b)
			var plain, withDisk, mkdisk []time.Duration
			startTrue := func(spec sandbox.Spec) *sandbox.Sandbox {
				sb, err := p.Start(ctx, spec)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}}); err != nil {
					b.Fatal(err)
				}
				return sb
			}
			workspace := func(parent string) []sandbox.Workspace {
				ws := filepath.Join(parent, "w")
				if err := os.MkdirAll(ws, 0o755); err != nil {
					b.Fatal(err)
				}
				os.Chown(ws, sandbox.DefaultUID, sandbox.DefaultGID)
				return []sandbox.Workspace{{Name: "w", HostPath: ws}}
			}
			i := 0
			for b.Loop() {
				i++
				spec := benchSpec()
				spec.Workspaces = workspace(filepath.Join(dir, "plain"+strconv.Itoa(i)))
				t0 := time.Now()
				sb := startTrue(spec)
				plain = append(plain, time.Since(t0))
				b.StopTimer()
				sb.Destroy(ctx)
				b.StartTimer()

				t0 = time.Now()
				d := disk.Disk{Image: filepath.Join(dir, strconv.Itoa(i)+".img"), Dir: filepath.Join(dir, strconv.Itoa(i))}
				if err := disk.Create(ctx, d, disk.Size{}); err != nil {
					b.Fatal(err)
				}
				mkdisk = append(mkdisk, time.Since(t0))
				spec = benchSpec()
				spec.DiskDir = filepath.Join(d.Dir, ".box")
				if err := os.Mkdir(spec.DiskDir, 0o700); err != nil {
					b.Fatal(err)
				}
				spec.Workspaces = workspace(d.Dir)
				sb = startTrue(spec)
				withDisk = append(withDisk, time.Since(t0))
				b.StopTimer()
				sb.Destroy(ctx)
				if err := d.Remove(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(p50(plain), "plain-p50-ms")
			b.ReportMetric(p50(withDisk), "disk-p50-ms")
			b.ReportMetric(p50(mkdisk), "mkdisk-p50-ms")
		})
	}
}

func p50(samples []time.Duration) float64 {
	if len(samples) == 0 {
		return 0
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	return float64(samples[len(samples)/2].Microseconds()) / 1000
}

// BenchmarkExecRoundTrip: run `true` in a live box through its agent.
func BenchmarkExecRoundTrip(b *testing.B) {
	for _, name := range []string{"local", "docker", "docker+runsc", "host"} {
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
	for _, name := range []string{"local", "docker", "docker+runsc"} {
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

// BenchmarkListenRoundTrip: one small HTTP request from a client in the box
// to a server on the host, through a box listener (keep-alive, so this is
// the forwarding cost, not the connection setup). Compare with
// BenchmarkLoopbackRoundTrip, the same request over host loopback.
func BenchmarkListenRoundTrip(b *testing.B) {
	// local only: docker boxes use the same agent code over the same kind
	// of socket.
	p := benchProvider(b, "local")
	ctx := context.Background()
	sb, err := p.Start(ctx, benchSpec())
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(ctx)
	l, err := sb.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	benchHTTP(b, sb, l)
}

// BenchmarkLoopbackRoundTrip: the baseline for BenchmarkListenRoundTrip, a
// client on the host side of a host backend box over plain loopback TCP.
func BenchmarkLoopbackRoundTrip(b *testing.B) {
	p := benchProvider(b, "host")
	ctx := context.Background()
	sb, err := p.Start(ctx, benchSpec())
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(ctx)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	benchHTTP(b, sb, l)
}

// benchHTTP serves a 1 KiB reply on l, and runs a client in sb that makes
// b.N requests over one keep-alive connection.
func benchHTTP(b *testing.B, sb *sandbox.Sandbox, l net.Listener) {
	ctx := context.Background()
	reply := strings.Repeat("x", 1024)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, reply) })}
	go srv.Serve(l)
	defer srv.Close()
	// curl with N URLs reuses its connection (its start is amortised over
	// b.N); the box has the host's /usr, and curl in it.
	n := b.N
	args := []string{"curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}\n"}
	url := "http://" + l.Addr().String() + "/"
	for range n {
		args = append(args, url)
	}
	var out, errb strings.Builder
	b.ResetTimer()
	st, err := sb.Run(ctx, &sandbox.Cmd{Args: args, Stdout: &out, Stderr: &errb})
	b.StopTimer()
	if err != nil || !st.Success() {
		b.Fatalf("curl in the box: %v %v %s", st, err, errb.String())
	}
	if got := strings.Count(out.String(), "200\n"); got != n {
		b.Fatalf("%d of %d requests succeeded: %s", got, n, out.String())
	}
}
