package session

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store/objstore"
	"github.com/harvest-dev/harvest/workspace/carry"
)

// BenchmarkCheckpoint1G: a 1 GiB workspace (512 files of 2 MiB, half
// random bytes, half text) carried whole to the checkpoint store and
// restored from it, as a node taking a session over does (the references
// in PostgreSQL, as with several nodes): to a directory,
// and to a real S3 server (versitygw on the same disk, over loopback);
// and, for comparison, into PostgreSQL as before the checkpoint store
// (postgres-inline: the packs as bytea rows).
// It needs about 5 GiB of free disk. Run it alone:
//
//	go test -run '^$' -bench Checkpoint1G -benchtime 1x -timeout 30m ./session/
//
// Metrics: snapshot-s and restore-s (seconds), stored-MiB (the packs'
// compressed size), peak-RSS-MiB (the test process's high-water mark: the
// data is streamed, never held whole).
func BenchmarkCheckpoint1G(b *testing.B) {
	src := filepath.Join(testbin.TempDir(b), "src")
	makeWorkspace(b, src, 512, 2<<20)
	for _, kind := range []string{"dir", "s3", "postgres-inline"} {
		b.Run(kind, func(b *testing.B) {
			var open func(testing.TB) objstore.Store
			if kind == "s3" {
				open = func(t testing.TB) objstore.Store { return s3Store(t, testbin.StartS3Server(t)) }
			}
			e := newEnv(b, withPostgres, withNode("a", nodeTTL), withCheckpoints(open))
			c := e.m.carry
			c.opt.MaxBytes = 2 << 30
			packs := carry.Packs(c.packs)
			if kind == "postgres-inline" {
				packs = inlinePacks{e.st} // as before the checkpoint store, for comparison
			}
			ctx := testbin.Context(b)
			b.SetBytes(1 << 30)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				m, err := carry.Snapshot(ctx, src, nil, packs, c.opt)
				if err != nil {
					b.Fatal(err)
				}
				snap := time.Since(start)
				var stored int64
				for _, h := range m.Packs() {
					p, err := e.st.GetPack(ctx, h)
					if err != nil {
						b.Fatal(err)
					}
					stored += p.Size
				}
				dst := filepath.Join(testbin.TempDir(b), "ws")
				os.Mkdir(dst, 0o755)
				start = time.Now()
				if _, err := carry.Restore(ctx, dst, m, packs, c.opt); err != nil {
					b.Fatal(err)
				}
				restore := time.Since(start)
				b.ReportMetric(snap.Seconds(), "snapshot-s")
				b.ReportMetric(restore.Seconds(), "restore-s")
				b.ReportMetric(float64(stored)/(1<<20), "stored-MiB")
				os.RemoveAll(dst)
			}
			b.ReportMetric(peakRSS(b), "peak-RSS-MiB")
		})
	}
}

// makeWorkspace writes n files of size bytes below dir: the even ones
// random (incompressible), the odd ones lines of text.
func makeWorkspace(b *testing.B, dir string, n, size int) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, size)
	for i := range n {
		if i%2 == 0 {
			for k := 0; k < size; k += 8 {
				v := r.Uint64()
				for j := 0; j < 8 && k+j < size; j++ {
					buf[k+j] = byte(v >> (8 * j))
				}
			}
		} else {
			var sb strings.Builder
			for sb.Len() < size {
				fmt.Fprintf(&sb, "line %d of file %d: value=%d %s\n", sb.Len(), i, r.IntN(1e9), strings.Repeat("x", r.IntN(40)))
			}
			copy(buf, sb.String())
		}
		p := filepath.Join(dir, fmt.Sprintf("d%02d", i%16), fmt.Sprintf("f%04d", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// peakRSS is the process's resident-set high-water mark in MiB
// (/proc/self/status VmHWM).
func peakRSS(b *testing.B) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
