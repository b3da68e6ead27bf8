package disk_test

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox/disk"
)

// What a disk adds to creating a session's box (BENCHMARKS.md):
//
//	go test -run '^$' -bench . -benchtime 50x ./sandbox/disk/
//
// Create is a sparse file, mkfs.ext4 (a process) and a loop mount, for the
// default size (20 GiB, 1.3M inodes) and a small one; Remove is the lazy
// unmount and the image's deletion. What a disk costs the host's disk is
// TestNewDiskCost's (go test -run TestNewDiskCost -v ./sandbox/disk/).
func BenchmarkCreate(b *testing.B) {
	testreq.Check(b, testreq.Disks, disk.Check(context.Background(), ""))
	for _, size := range []disk.Size{{}, {Bytes: 64 << 20}} {
		name := "20GiB"
		if size.Bytes != 0 {
			name = "64MiB"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			var ds []disk.Disk
			i := 0
			for b.Loop() {
				i++
				d := disk.Disk{Image: filepath.Join(dir, strconv.Itoa(i)+".img"), Dir: filepath.Join(dir, strconv.Itoa(i))}
				if err := disk.Create(context.Background(), d, size); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, d)
			}
			b.StopTimer()
			for _, d := range ds {
				if err := d.Remove(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkRemove(b *testing.B) {
	testreq.Check(b, testreq.Disks, disk.Check(context.Background(), ""))
	dir := b.TempDir()
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		d := disk.Disk{Image: filepath.Join(dir, strconv.Itoa(i)+".img"), Dir: filepath.Join(dir, strconv.Itoa(i))}
		if err := disk.Create(context.Background(), d, disk.Size{}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := d.Remove(); err != nil {
			b.Fatal(err)
		}
	}
}
