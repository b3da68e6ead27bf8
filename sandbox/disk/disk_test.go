package disk_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox/disk"
)

func needDisks(t *testing.T) {
	t.Helper()
	testreq.Check(t, testreq.Disks, disk.Check(context.Background(), ""))
}

func newDisk(t *testing.T, size disk.Size) disk.Disk {
	t.Helper()
	return newDiskIn(t, t.TempDir(), size)
}

// newDiskOnOwnFS makes a disk whose image is on a tmpfs of its own, so the
// free space a test measures there moves with that disk's writes only
// (other tests write to the machine's disk at the same time).
func newDiskOnOwnFS(t *testing.T, size disk.Size) disk.Disk {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=256m,mode=0711"); err != nil {
		t.Fatalf("mounting a tmpfs for the image: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) }) // after the disk's removal
	return newDiskIn(t, dir, size)
}

func newDiskIn(t *testing.T, dir string, size disk.Size) disk.Disk {
	t.Helper()
	d := disk.Disk{Image: filepath.Join(dir, "disk.img"), Dir: filepath.Join(dir, "mnt")}
	if err := disk.Create(context.Background(), d, size); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Remove(); err != nil {
			t.Error(err)
		}
	})
	return d
}

func freeBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// Filling a disk as root (Harvest's own copy runs as root) stops at the
// limit with ENOSPC, and the host's filesystem loses no more than the limit.
func TestFillStopsAtLimit(t *testing.T) {
	needDisks(t)
	const limit = 64 << 20
	d := newDiskOnOwnFS(t, disk.Size{Bytes: limit})
	hostBefore := freeBytes(t, filepath.Dir(d.Image))

	f, err := os.Create(filepath.Join(d.Dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	var written int64
	for written < 2*limit {
		n, err := f.Write(buf)
		written += int64(n)
		if err != nil {
			if !disk.IsFull(err) {
				t.Fatalf("write after %d bytes: %v, want ENOSPC", written, err)
			}
			break
		}
	}
	if err := f.Sync(); err != nil && !disk.IsFull(err) {
		t.Fatal(err)
	}
	f.Close()
	if written >= 2*limit {
		t.Fatalf("wrote %d bytes into a %d-byte disk", written, limit)
	}
	if written < limit/2 {
		t.Fatalf("only %d bytes fit in a %d-byte disk", written, limit)
	}
	if drop := hostBefore - freeBytes(t, filepath.Dir(d.Image)); drop > limit {
		t.Fatalf("host free space dropped by %d bytes, more than the %d-byte limit", drop, limit)
	}
	u, err := d.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if u.Size.Bytes > limit {
		t.Fatalf("disk reports %d bytes, limit %d", u.Size.Bytes, limit)
	}

	// Deleting gives the space back, inside and on the host (discard).
	if err := os.Remove(filepath.Join(d.Dir, "fill")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Dir, "after"), []byte("ok"), 0o644); err != nil {
		t.Fatalf("writing after freeing space: %v", err)
	}
}

func TestInodeCap(t *testing.T) {
	needDisks(t)
	const inodes = 4096
	d := newDisk(t, disk.Size{Bytes: 64 << 20, Inodes: inodes})
	var made int
	for made = 0; made < 4*inodes; made++ {
		f, err := os.Create(filepath.Join(d.Dir, fmt.Sprint(made)))
		if err != nil {
			if !disk.IsFull(err) {
				t.Fatalf("file %d: %v, want ENOSPC", made, err)
			}
			break
		}
		f.Close()
	}
	if made >= 4*inodes || made < inodes/2 {
		t.Fatalf("made %d files on a disk with %d inodes", made, inodes)
	}
}

// A disk survives an unmount (a reboot, as far as the mount is concerned):
// Mount brings it back with its files, and mounting twice is a no-op.
func TestMountAgain(t *testing.T) {
	needDisks(t)
	d := newDisk(t, disk.Size{Bytes: 32 << 20})
	if err := os.WriteFile(filepath.Join(d.Dir, "kept"), []byte("yes"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Mount(context.Background()); err != nil {
		t.Fatalf("mounting a mounted disk: %v", err)
	}
	if err := unix.Unmount(d.Dir, 0); err != nil {
		t.Fatal(err)
	}
	if m, err := d.Mounted(); err != nil || m {
		t.Fatalf("Mounted after unmount = %v, %v", m, err)
	}
	if err := d.Mount(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(d.Dir, "kept")); err != nil || string(b) != "yes" {
		t.Fatalf("after mounting again: %q, %v", b, err)
	}
}

func TestBadSizes(t *testing.T) {
	for _, tc := range []struct {
		size disk.Size
		want string
	}{
		{disk.Size{Bytes: 1 << 20}, "at least 16MiB"},
		{disk.Size{Bytes: 64 << 20, Inodes: 1 << 20}, "holds at most 16384"},
		{disk.Size{Bytes: 64 << 20, Inodes: 10}, "at least 1024"},
	} {
		err := tc.size.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.size, err, tc.want)
		}
	}
	if err := (disk.Size{}).WithDefaults().Validate(); err != nil {
		t.Errorf("default size: %v", err)
	}
}

func TestMountPointNotEmpty(t *testing.T) {
	needDisks(t)
	dir := t.TempDir()
	d := disk.Disk{Image: filepath.Join(dir, "img"), Dir: filepath.Join(dir, "mnt")}
	os.MkdirAll(d.Dir, 0o755)
	os.WriteFile(filepath.Join(d.Dir, "x"), nil, 0o644)
	err := disk.Create(context.Background(), d, disk.Size{Bytes: 32 << 20})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		d.Remove()
		t.Fatalf("Create on a non-empty dir: %v", err)
	}
	if errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}
