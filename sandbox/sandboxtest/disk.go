package sandboxtest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/disk"
)

// Disk limits, checked on every isolating backend: a box whose workspace,
// /tmp and HOME live on a small disk (package disk, Spec.DiskDir) gets
// ENOSPC when it fills it, in each of them, and lives on; the host's
// filesystem loses no more than the limit; and 200,000 empty files hit the
// inode cap.
const (
	testDiskBytes  = 64 << 20
	testDiskInodes = 10000
)

func (s *suite) testDiskFull(t *testing.T) {
	if err := disk.Check(context.Background(), ""); err != nil {
		testreq.Unavailable(t, testreq.Disks, "disk limits unavailable here: %v", err)
	}
	base := testbin.TempDir(t)
	// The image goes on a filesystem of its own, so the free space this
	// test measures moves with this box's writes only: other tests write to
	// the machine's disk at the same time (a shared filesystem made this
	// check flaky under a full run).
	if err := unix.Mount("tmpfs", base, "tmpfs", 0, "size=192m,mode=0711"); err != nil {
		t.Fatalf("mounting a tmpfs for the disk image: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(base, unix.MNT_DETACH) }) // runs after d.Remove
	d := disk.Disk{Image: filepath.Join(base, "disk.img"), Dir: filepath.Join(base, "disk")}
	if err := disk.Create(ctxFor(t), d, disk.Size{Bytes: testDiskBytes, Inodes: testDiskInodes}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the box is destroyed (cleanups run last-first)
		if err := d.Remove(); err != nil {
			t.Error(err)
		}
	})
	ws, boxDir := filepath.Join(d.Dir, "w"), filepath.Join(d.Dir, ".box")
	for _, dir := range []string{ws, boxDir} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(ws, sandbox.DefaultUID, sandbox.DefaultGID); err != nil {
		t.Fatal(err)
	}
	hostBefore := statfsFree(t, base)
	sb := s.start(t, sandbox.Spec{Workspaces: []sandbox.Workspace{{Name: "w", HostPath: ws}}, DiskDir: boxDir})

	fill := func(path string) {
		t.Helper()
		r := sh(t, sb, "dd if=/dev/zero of="+path+" bs=1M count=128 conv=fsync 2>&1; echo rc=$?")
		if !strings.Contains(r.out(), "No space left on device") && !strings.Contains(r.out(), "Disk quota exceeded") {
			t.Fatalf("filling %s past a %s disk: %s, want ENOSPC", path, sandbox.FormatSize(testDiskBytes), r.out())
		}
		if strings.HasSuffix(r.out(), "rc=0") {
			t.Fatalf("dd into %s succeeded on a full disk: %s", path, r.out())
		}
		u, err := d.Usage()
		if err != nil {
			t.Fatal(err)
		}
		if u.UsedBytes < testDiskBytes/2 {
			t.Fatalf("after filling %s the disk holds %d bytes: the file is not on the disk", path, u.UsedBytes)
		}
		if out := mustOK(t, sb, "sh", "-c", "echo alive"); out != "alive" { // the box lives on
			t.Fatalf("after a full disk: %q", out)
		}
		// What the disk takes from the host, exactly: the image's blocks.
		var st unix.Stat_t
		if err := unix.Stat(d.Image, &st); err != nil {
			t.Fatal(err)
		}
		if used := st.Blocks * 512; used > testDiskBytes {
			t.Fatalf("the disk image takes %d bytes of the host's disk, more than the %d-byte limit", used, testDiskBytes)
		}
		// And the free space of the filesystem the image is on: dd wrote
		// twice the limit, and at most the limit may be gone.
		if drop := hostBefore - statfsFree(t, base); drop > testDiskBytes {
			t.Fatalf("the host's filesystem lost %d bytes, more than the %d-byte limit", drop, testDiskBytes)
		}
		mustOK(t, sb, "sh", "-c", "rm "+path)
	}
	fill("/workspace/w/fill")
	fill("/tmp/fill")
	fill("$HOME/fill")

	// The inode cap: 200,000 empty files do not fit.
	r := sh(t, sb, "mkdir /workspace/w/many && cd /workspace/w/many && seq 200000 | xargs touch 2>&1 | head -n 1; ls -f | wc -l")
	lines := strings.Split(r.out(), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "No space left on device") {
		t.Fatalf("200,000 files on a disk with %d inodes: %q, want ENOSPC", testDiskInodes, r.out())
	}
	if n, err := strconv.Atoi(strings.TrimSpace(lines[1])); err != nil || n > testDiskInodes+2 {
		t.Fatalf("%s files made on a disk with %d inodes", lines[1], testDiskInodes)
	}
	mustOK(t, sb, "rm", "-rf", "/workspace/w/many")
	mustOK(t, sb, "touch", "/workspace/w/after")
}

func statfsFree(t testing.TB, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}
