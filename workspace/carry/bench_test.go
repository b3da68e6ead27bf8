package carry

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/internal/testreq"
)

// benchTree writes a tree like a small repository: 2000 files, about 50 MB,
// mostly small text-like files and a few large ones.
func benchTree(b *testing.B) (root string, bytes int64) {
	root = b.TempDir()
	r := rand.New(rand.NewPCG(7, 7))
	words := strings.Fields("func return if else for range package import type struct interface error nil err ctx string int64 byte map chan go defer select case default var const")
	text := func(n int) []byte {
		var sb strings.Builder
		for sb.Len() < n {
			sb.WriteString(words[r.IntN(len(words))])
			if r.IntN(8) == 0 {
				sb.WriteString("\n\t")
			} else {
				sb.WriteByte(' ')
			}
		}
		return []byte(sb.String()[:n])
	}
	for i := range 2000 {
		var data []byte
		if i%100 == 0 { // 20 large files, half random (binaries), half text
			if i%200 == 0 {
				data = randBytes(uint64(i), 1_500_000)
			} else {
				data = text(1_000_000)
			}
		} else {
			data = text(5_000 + r.IntN(20_000))
		}
		p := filepath.Join(root, fmt.Sprintf("pkg%02d/sub%d/file%04d.go", i%40, i%5, i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
		bytes += int64(len(data))
	}
	return root, bytes
}

func BenchmarkSnapshot(b *testing.B) {
	root, size := benchTree(b)
	ctx := context.Background()
	b.Run("full", func(b *testing.B) {
		packs := newMemPacks()
		b.SetBytes(size)
		var m *Manifest
		for b.Loop() {
			var err error
			if m, err = Snapshot(ctx, root, nil, packs, Options{}); err != nil {
				b.Fatal(err)
			}
		}
		stored := 0
		for _, h := range m.Packs() {
			stored += len(packs.m[h])
		}
		b.ReportMetric(float64(stored)/float64(size), "stored/raw")
	})
	b.Run("incremental", func(b *testing.B) {
		packs := newMemPacks()
		prev, err := Snapshot(ctx, root, nil, packs, Options{})
		if err != nil {
			b.Fatal(err)
		}
		changed := filepath.Join(root, "pkg01/sub1/file0001.go")
		b.SetBytes(size)
		i := 0
		for b.Loop() {
			i++
			if err := os.WriteFile(changed, fmt.Appendf(nil, "changed %d\n", i), 0o644); err != nil {
				b.Fatal(err)
			}
			m, err := Snapshot(ctx, root, prev, packs, Options{})
			if err != nil {
				b.Fatal(err)
			}
			prev = m
		}
	})
	b.Run("restore", func(b *testing.B) {
		testreq.NeedRoot(b, "restoring owners")
		packs := newMemPacks()
		m, err := Snapshot(ctx, root, nil, packs, Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(size)
		for b.Loop() {
			b.StopTimer()
			dst := filepath.Join(b.TempDir(), "dst")
			os.Mkdir(dst, 0o755)
			b.StartTimer()
			if _, err := Restore(ctx, dst, m, packs, Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
