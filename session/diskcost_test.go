package session

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox/disk"
)

// idleDiskCost is what an idle session's disk may take of the host's disk
// at most (issue 23).
const idleDiskCost = 8 << 20

// TestIdleSessionsDiskCost: 50 sessions, each with the default 20 GiB
// disk, through the real Manager and local boxes, each idle after a first
// turn, allocate at most 50 × 8 MiB of the host's disk together, measured
// on the images' allocated blocks (what du counts), not their length; and
// DiskUsage counts them so.
func TestIdleSessionsDiskCost(t *testing.T) {
	needDisks(t)
	const n = 50
	e := newEnv(t, withDisks)
	vs := make([]*View, n)
	for i := range vs {
		vs[i] = e.create("msg hi")
	}
	for _, v := range vs {
		e.watch(v.ID).IdleAfter("t1")
	}
	var total, most int64
	for _, v := range vs {
		d, _, _ := e.m.sessionDisk(v.Session)
		if m, err := d.Mounted(); err != nil || !m {
			t.Fatalf("session %s's disk is not mounted: %v %v", v.ID, m, err)
		}
		syncfs(t, d.Dir)
		st, err := disk.StatImage(d.Image)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size != DefaultDiskBytes {
			t.Fatalf("session %s's disk is %d bytes, want the default %d", v.ID, st.Size, int64(DefaultDiskBytes))
		}
		total += st.Allocated
		most = max(most, st.Allocated)
	}
	t.Logf("%d idle sessions' disks allocate %s of the host (%s each on average, %s at most); promised %s",
		n, Approx(total), Approx(total/n), Approx(most), Approx(n*DefaultDiskBytes))
	if total > n*idleDiskCost {
		t.Fatalf("%d idle sessions' disks allocate %d bytes, over %d (8 MiB each)", n, total, n*idleDiskCost)
	}
	u, err := e.m.DiskUsage(testbin.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	// (What the disks hold moves a little: deletions inside give blocks back.)
	if u.Disks != n || u.Live != n || u.Promised != n*DefaultDiskBytes || u.Allocated <= 0 || u.Allocated > n*idleDiskCost {
		t.Fatalf("DiskUsage %+v: want %d live disks promised %d, holding what they were measured to (%d)", u, n, n*DefaultDiskBytes, total)
	}
}

// syncfs writes out what the filesystem holding dir has in memory, so its
// image's blocks are counted.
func syncfs(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
}
