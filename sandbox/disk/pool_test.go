package disk_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/sandbox/owner"
)

// mountOpts returns the per-mount options of the mount at dir ("" when
// nothing is mounted there).
func mountOpts(t *testing.T, dir string) string {
	t.Helper()
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return ""
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	opts := ""
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && f[4] == real {
			opts = f[5]
		}
	}
	return opts
}

func poolEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestPoolTake: a disk of the pool's size is taken ready (renamed and
// mounted where asked, nosuid and nodev, writable, its limit the pool's),
// the pool makes another, a disk of another size is not served, and
// Close leaves nothing. Under a private mount (the mount is moved) and
// under a shared one, as a systemd host's / is (the kernel refuses to
// move it: it is bound).
func TestPoolTake(t *testing.T) {
	needDisks(t)
	t.Run("private", func(t *testing.T) { testPoolTake(t, false) })
	t.Run("shared", func(t *testing.T) { testPoolTake(t, true) })
}

func testPoolTake(t *testing.T, shared bool) {
	base := testbin.TempDir(t)
	if shared {
		if err := unix.Mount(base, base, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(base, unix.MNT_DETACH) })
		if err := unix.Mount("", base, "", unix.MS_SHARED, ""); err != nil {
			t.Fatal(err)
		}
	}
	ownersDir := filepath.Join(base, "owners")
	inst, err := owner.NewInstance(ownersDir)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Release()
	size := disk.Size{Bytes: 64 << 20}
	poolDir := filepath.Join(base, "disks", "pool")
	p, err := disk.NewPool(disk.PoolConfig{Dir: poolDir, Size: size, Count: 2, Owner: inst.ID(), OwnersDir: ownersDir})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	testbin.WaitFor(t, time.Minute, "two pool disks ready", func() bool { return p.Stats().Ready == 2 })

	ctx := context.Background()
	d := disk.Disk{Image: filepath.Join(base, "disks", "session", "s1.img"), Dir: filepath.Join(base, "ws", "s1")}
	ok, err := p.Take(ctx, d, size)
	if err != nil || !ok {
		t.Fatalf("Take: %v %v", ok, err)
	}
	t.Cleanup(func() { d.Remove() })
	if m, err := d.Mounted(); err != nil || !m {
		t.Fatalf("the taken disk is not mounted at %s: %v %v", d.Dir, m, err)
	}
	opts := mountOpts(t, d.Dir)
	for _, o := range []string{"nosuid", "nodev", "rw"} {
		if !strings.Contains(","+opts+",", ","+o+",") {
			t.Errorf("mount options of the taken disk: %q, want %s", opts, o)
		}
	}
	if err := os.WriteFile(filepath.Join(d.Dir, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	u, err := d.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if u.Size.Inodes != size.WithDefaults().Inodes {
		t.Errorf("taken disk has %d inodes, want %d", u.Size.Inodes, size.WithDefaults().Inodes)
	}
	if st, err := disk.StatImage(d.Image); err != nil || st.Size != size.Bytes {
		t.Errorf("taken image: %+v %v, want %d bytes", st, err, size.Bytes)
	}
	// The image keeps nothing of the pool's name: what the pool held is
	// gone from its directory but for the disks it made since.
	testbin.WaitFor(t, time.Minute, "the pool refilled and let go of the taken disk's mount point", func() bool {
		return p.Stats().Ready == 2 && len(poolEntries(t, poolDir)) == 4 // 2 images, 2 mount points
	})
	// Taken again at the same path: refused, the first one untouched.
	if ok, err := p.Take(ctx, d, size); ok || err == nil {
		t.Errorf("Take onto an existing disk: %v %v, want an error", ok, err)
	}
	if b, err := os.ReadFile(filepath.Join(d.Dir, "f")); err != nil || string(b) != "x" {
		t.Errorf("the first taken disk was disturbed: %q %v", b, err)
	}
	// Another size: not the pool's.
	d2 := disk.Disk{Image: filepath.Join(base, "disks", "session", "s2.img"), Dir: filepath.Join(base, "ws", "s2")}
	if ok, err := p.Take(ctx, d2, disk.Size{Bytes: 128 << 20}); ok || err != nil {
		t.Errorf("Take of another size: %v %v, want false", ok, err)
	}
	if err := d.Remove(); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Hits != 1 {
		t.Errorf("stats %+v, want 1 hit", st)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if left := poolEntries(t, poolDir); len(left) != 0 {
		t.Errorf("Close left %v in the pool dir", left)
	}
	att, _ := disk.Attached()
	for img := range att {
		if strings.HasPrefix(img, base) {
			t.Errorf("%s still attached to a loop device", img)
		}
	}
}

// TestPoolReclaim: the disks a dead Harvest's pool left (its instance
// held by no one) are removed by the next pool on the directory, and by
// PrunePools; a live instance's are kept.
func TestPoolReclaim(t *testing.T) {
	needDisks(t)
	base := testbin.TempDir(t)
	ownersDir := filepath.Join(base, "owners")
	poolDir := filepath.Join(base, "pool")
	ctx := context.Background()
	leave := func(own string, n string) disk.Disk {
		d := disk.Disk{Image: filepath.Join(poolDir, disk.PoolPrefix+own+"-"+n+".img"), Dir: filepath.Join(poolDir, disk.PoolPrefix+own+"-"+n)}
		if err := disk.Create(ctx, d, disk.Size{Bytes: disk.MinBytes}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Remove() })
		return d
	}
	dead, err := owner.NewInstance(ownersDir)
	if err != nil {
		t.Fatal(err)
	}
	dead.Release() // as the kernel does when its process dies
	alive, err := owner.NewInstance(ownersDir)
	if err != nil {
		t.Fatal(err)
	}
	defer alive.Release()
	leave(dead.ID(), "1")
	leave(dead.ID(), "2")
	if err := os.WriteFile(filepath.Join(poolDir, disk.PoolPrefix+dead.ID()+"-3.img.new"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	kept := leave(alive.ID(), "1")

	// harvest sandbox prune finds them through the directory a pool
	// recorded: none recorded yet, so nothing.
	if rs, err := disk.PrunePools(ownersDir, false); err != nil || len(rs) != 0 {
		t.Fatalf("PrunePools with no pool recorded: %v %v", rs, err)
	}

	me, err := owner.NewInstance(ownersDir)
	if err != nil {
		t.Fatal(err)
	}
	defer me.Release()
	p, err := disk.NewPool(disk.PoolConfig{Dir: poolDir, Size: disk.Size{Bytes: disk.MinBytes}, Count: 1, Owner: me.ID(), OwnersDir: ownersDir})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range poolEntries(t, poolDir) {
		if strings.Contains(e, dead.ID()) {
			t.Errorf("the dead instance's %s is left", e)
		}
	}
	if m, err := kept.Mounted(); err != nil || !m {
		t.Errorf("a live instance's pool disk was removed: %v %v", m, err)
	}
	testbin.WaitFor(t, time.Minute, "the pool's disk", func() bool { return p.Stats().Ready == 1 })

	// Now alive dies too: prune removes its disk and leaves the running
	// pool's.
	alive.Release()
	rs, err := disk.PrunePools(ownersDir, true)
	if err != nil || len(rs) != 2 {
		t.Fatalf("PrunePools --dry-run: %+v %v, want the dead disk and the live pool's", rs, err)
	}
	if m, _ := kept.Mounted(); !m {
		t.Fatal("a dry run removed a disk")
	}
	rs, err = disk.PrunePools(ownersDir, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		want := owner.Owned
		if r.Box.Owner == alive.ID() {
			want = owner.Destroyed
		}
		if r.Action != want {
			t.Errorf("prune %s (%s): %s, want %s", r.Box.Handle.ID, r.Box.Owner, r.Action, want)
		}
	}
	if _, err := os.Stat(kept.Image); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("prune left the dead pool's image: %v", err)
	}
	if p.Stats().Ready != 1 {
		t.Error("prune took the running pool's disk")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if left := poolEntries(t, poolDir); len(left) != 0 {
		t.Errorf("left in the pool dir: %v", left)
	}
}

// TestPoolRoom: no disk is made while Room says there is no room, and
// they are once there is.
func TestPoolRoom(t *testing.T) {
	needDisks(t)
	base := testbin.TempDir(t)
	ownersDir := filepath.Join(base, "owners")
	me, err := owner.NewInstance(ownersDir)
	if err != nil {
		t.Fatal(err)
	}
	defer me.Release()
	room := make(chan error, 100)
	asked := make(chan struct{}, 100)
	full := errors.New("below the floor")
	p, err := disk.NewPool(disk.PoolConfig{Dir: filepath.Join(base, "pool"), Size: disk.Size{Bytes: disk.MinBytes}, Count: 1, Owner: me.ID(), OwnersDir: ownersDir,
		Room: func() error {
			asked <- struct{}{}
			select {
			case err := <-room:
				return err
			default:
				return full
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	<-asked
	if p.Stats().Ready != 0 || len(poolEntries(t, filepath.Join(base, "pool"))) != 0 {
		t.Fatal("a pool disk was made with no room")
	}
	room <- nil
	// A miss asks the pool to try again.
	if ok, _ := p.Take(context.Background(), disk.Disk{Image: filepath.Join(base, "x.img"), Dir: filepath.Join(base, "x")}, disk.Size{Bytes: disk.MinBytes}); ok {
		t.Fatal("took a disk that was never made")
	}
	testbin.WaitFor(t, time.Minute, "a pool disk once there is room", func() bool { return p.Stats().Ready == 1 })
}
