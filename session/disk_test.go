package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/sim"
	"github.com/harvest-dev/harvest/store"
)

const diskScript = `
rules:
  - name: filled
    when: {tool_result: "disk-filled"}
    reply: {text: "full", usage: {input_tokens: 100, output_tokens: 10}}
  - name: fill
    when: {last_user: "fill the disk"}
    reply:
      tool_calls: [{name: bash, input: {command: "for f in big /tmp/big $HOME/big; do dd if=/dev/zero of=$f bs=1M count=128 2>&1 | grep -o 'No space left on device'; rm -f $f; done; echo kept > $HOME/kept; echo disk-filled"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: msg
    when: {last_user_regexp: "^msg"}
    reply: {text: "ok", usage: {input_tokens: 100, output_tokens: 10}}
`

func needDisks(t testing.TB) {
	t.Helper()
	if err := disk.Check(context.Background(), ""); err != nil {
		testreq.Unavailable(t, testreq.Disks, "disks unavailable here: %v", err)
	}
}

// A session's workspace, /tmp and HOME are on its disk: the agent filling
// them gets ENOSPC, the session goes on, the disk comes back after an
// unmount (a reboot) while the session is suspended, and Delete removes it.
func TestSessionDisk(t *testing.T) {
	needDisks(t)
	t.Run("local", func(t *testing.T) { testSessionDisk(t, "local") })
	t.Run("docker", func(t *testing.T) { testSessionDisk(t, "docker") })
}

func testSessionDisk(t *testing.T, backend string) {
	opts := []envOpt{withDisks}
	if backend == "docker" {
		opts = append(opts, withDocker)
	}
	e := newEnv(t, opts...)
	s, err := sim.ParseScript("disk.yaml", []byte(diskScript))
	if err != nil {
		t.Fatal(err)
	}
	e.Sim.Store(sim.New(s))
	const limit = 64 << 20
	v := e.create("fill the disk", func(r *CreateRequest) { r.Limits.DiskBytes, r.Backend = limit, backend })
	if v.Limits.DiskBytes != limit || v.Limits.DiskInodes != limit/disk.BytesPerInode {
		t.Fatalf("limits %+v: want %d bytes and %d inodes", v.Limits, limit, limit/disk.BytesPerInode)
	}
	w := e.watch(v.ID)
	out := stacktest.Typed[event.ToolFinished](w, "t1", nil).Output
	if n := strings.Count(out, "No space left on device"); n != 3 {
		t.Fatalf("filling the workspace, /tmp and HOME of a 64 MiB disk: %q, want ENOSPC three times", out)
	}
	w.IdleAfter("t1")

	d, _, ok := e.m.sessionDisk(v.Session)
	if !ok {
		t.Fatal("the session has no disk")
	}
	var st unix.Stat_t
	if err := unix.Stat(d.Image, &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > limit {
		t.Fatalf("the disk image takes %d bytes of the host, more than the limit %d", st.Blocks*512, limit)
	}
	h, err := decodeHandle(e.get(v.ID).Sandbox)
	if err != nil {
		t.Fatal(err)
	}
	if h.Spec.DiskDir != filepath.Join(d.Dir, diskBoxDir) {
		t.Fatalf("the box's DiskDir is %q, want the disk's %s", h.Spec.DiskDir, diskBoxDir)
	}

	// Suspend, then unmount the disk as a reboot would: the next message
	// mounts it again, with the workspace and HOME as they were.
	e.Clock.Advance(DefaultIdleTimeout)
	w.State(store.StateSuspended)
	if err := unix.Unmount(d.Dir, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	e.send(v.ID, "msg still there?", "")
	w.Finished("t2")
	if _, err := os.Stat(filepath.Join(v.Repos[0].Path, "README.md")); err != nil {
		t.Fatalf("the workspace after a remount: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(d.Dir, diskBoxDir, "home", "kept")); err != nil || string(b) != "kept\n" {
		t.Fatalf("HOME after a new box: %q, %v", b, err)
	}

	if err := e.m.Delete(testbin.Context(t), "owner-1", v.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.Image); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the disk image survived Delete: %v", err)
	}
	if m, err := d.Mounted(); err != nil || m {
		t.Fatalf("the disk is still mounted after Delete: %v %v", m, err)
	}
}

// A repository larger than the session's disk fails the session with an
// error naming the limit and how to raise it.
func TestSessionDiskTooSmall(t *testing.T) {
	needDisks(t)
	e := newEnv(t, withDisks)
	f, err := os.Create(filepath.Join(e.Repo, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 40<<20)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	v := e.create("msg hi", func(r *CreateRequest) { r.Limits.DiskBytes = 32 << 20 })
	w := e.watch(v.ID)
	w.State(store.StateFailed)
	got := e.get(v.ID).Error
	t.Logf("the error: %s", got)
	for _, want := range []string{"disk limit (32MiB", "--disk"} {
		if !strings.Contains(got, want) {
			t.Fatalf("the session failed with %q, want it to say %q", got, want)
		}
	}
}

func TestDiskLimitValidation(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		l    store.Limits
		want string
	}{
		{store.Limits{DiskBytes: 1 << 20}, "at least 16MiB"},
		{store.Limits{DiskBytes: 64 << 20, DiskInodes: 1 << 20}, "holds at most"},
		{store.Limits{DiskInodes: -1}, "must be positive"},
	} {
		_, err := e.m.Create(testbin.Context(t), "owner-1", CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Limits: tc.l})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("limits %+v: %v, want %q", tc.l, err, tc.want)
		}
	}
}

// After a reboot (the server stopped, its boxes and mounts gone), a
// recovered session mounts its disk again and goes on in a new box, with
// its workspace as it was.
func TestSessionDiskAfterReboot(t *testing.T) {
	needDisks(t)
	e := newEnv(t, withDisks)
	v := e.create("msg hi")
	w := e.watch(v.ID)
	w.IdleAfter("t1")
	d, _, _ := e.m.sessionDisk(v.Session)
	marker := filepath.Join(v.Repos[0].Path, "marker")
	if err := os.WriteFile(marker, []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.j.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Close(); err != nil {
		t.Fatal(err)
	}
	e.DestroyLocalBoxes() // the reboot
	if err := unix.Unmount(d.Dir, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the workspace is still visible with its disk unmounted: %v", err)
	}

	e.open()
	if err := e.m.Recover(testbin.Context(t)); err != nil {
		t.Fatal(err)
	}
	w = e.watch(v.ID)
	e.send(v.ID, "msg after the reboot", "")
	w.Finished("t2")
	if b, err := os.ReadFile(marker); err != nil || string(b) != "before" {
		t.Fatalf("the workspace after the reboot: %q, %v", b, err)
	}
	if m, err := d.Mounted(); err != nil || !m {
		t.Fatalf("the disk is not mounted again: %v %v", m, err)
	}
}

// The sessions of a workflow share its disk: one image, each box's /tmp
// and HOME in .box/{session}; the disk goes with the last session.
func TestWorkflowDisk(t *testing.T) {
	needDisks(t)
	e := newEnv(t, withDisks)
	ctx := testbin.Context(t)
	inWF := func(mode string) func(*CreateRequest) {
		return func(r *CreateRequest) { r.Workflow, r.Collaboration, r.Limits.DiskBytes = "wf", mode, 64<<20 }
	}
	s1 := e.create("msg one", inWF("sequential"))
	e.watch(s1.ID).IdleAfter("t1")
	p1 := e.create("msg two", inWF("parallel"))
	e.watch(p1.ID).IdleAfter("t1")

	d, _, _ := e.m.sessionDisk(s1.Session)
	if d2, _, _ := e.m.sessionDisk(p1.Session); d2 != d {
		t.Fatalf("the sessions of a workflow have disks %v and %v, want one", d, d2)
	}
	for _, v := range []*View{s1, p1} {
		h, err := decodeHandle(e.get(v.ID).Sandbox)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(d.Dir, diskBoxDir, v.ID); h.Spec.DiskDir != want {
			t.Fatalf("session %s's box has DiskDir %q, want %s", v.ID, h.Spec.DiskDir, want)
		}
		if !strings.HasPrefix(v.Repos[0].Path, d.Dir+"/") {
			t.Fatalf("session %s's workspace %s is not on the workflow's disk %s", v.ID, v.Repos[0].Path, d.Dir)
		}
	}

	if err := e.m.Delete(ctx, "owner-1", p1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.Dir, diskBoxDir, p1.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("p1's /tmp and HOME after its delete: %v", err)
	}
	if m, err := d.Mounted(); err != nil || !m {
		t.Fatalf("the workflow's disk went with one of its sessions: %v %v", m, err)
	}
	if err := e.m.Delete(ctx, "owner-1", s1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.Image); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the workflow's disk image after its last session: %v", err)
	}
	if m, err := d.Mounted(); err != nil || m {
		t.Fatalf("the workflow's disk is still mounted: %v %v", m, err)
	}
}

// After a reboot (the server stopped, every box gone, every disk unmounted
// and its loop device released), Recover mounts the disk of every session
// that may use it — an idle one whose box is gone and a suspended one that
// no runner touches — before it returns; an ended session's stays
// unmounted. At their ends, a session that never ran loses its disk and
// workspace at once, and a stopped one keeps its image, unmounted, until
// its delete.
func TestDisksRemountedAfterReboot(t *testing.T) {
	needDisks(t)
	e := newEnv(t, withDisks)
	ctx := testbin.Context(t)
	idle := e.create("msg hi", func(r *CreateRequest) { r.Limits.IdleTimeout = 48 * time.Hour })
	susp := e.create("msg hi")
	stopped := e.create("msg hi", func(r *CreateRequest) { r.Limits.IdleTimeout, r.Limits.MaxLifetime = 48*time.Hour, 10*time.Minute })
	for _, v := range []*View{idle, susp, stopped} {
		e.watch(v.ID).IdleAfter("t1")
	}
	for _, v := range []*View{idle, susp} {
		if err := os.WriteFile(filepath.Join(v.Repos[0].Path, "marker"), []byte(v.ID), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A session that fails while provisioning (its repository does not fit
	// its disk) never ran: its disk and workspace go at once.
	big := testbin.TempDir(t)
	if err := os.WriteFile(filepath.Join(big, "big.bin"), make([]byte, 40<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	failed := e.create("msg hi", func(r *CreateRequest) { r.Repos[0].Source, r.Limits.DiskBytes = big, 32<<20 })
	e.watch(failed.ID).State(store.StateFailed)
	fd, _, _ := e.m.sessionDisk(e.get(failed.ID).Session)
	if _, err := os.Stat(fd.Image); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the disk image of a session that failed before it ran: %v, want it removed", err)
	}
	if _, err := os.Stat(fd.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the workspace of a session that failed before it ran: %v, want it removed", err)
	}

	e.Clock.Advance(10 * time.Minute) // susp: idle timeout; stopped: max lifetime
	e.watch(susp.ID).State(store.StateSuspended)
	e.watch(stopped.ID).State(store.StateStopped)
	sd, _, _ := e.m.sessionDisk(e.get(stopped.ID).Session)
	if m, err := sd.Mounted(); err != nil || m {
		t.Errorf("a stopped session's disk is mounted: %v %v", m, err)
	}
	if _, err := os.Stat(sd.Image); err != nil {
		t.Errorf("a stopped session's disk image: %v, want it kept until the session is deleted", err)
	}

	// The reboot: the server stops, its boxes and mounts go.
	if err := e.m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.j.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Close(); err != nil {
		t.Fatal(err)
	}
	e.DestroyLocalBoxes()
	if _, err := disk.UnmountUnder(e.DataDir); err != nil {
		t.Fatal(err)
	}
	var ds []disk.Disk
	for _, v := range []*View{idle, susp, stopped} {
		d, _, _ := e.m.sessionDisk(v.Session)
		ds = append(ds, d)
	}
	testbin.WaitFor(t, time.Minute, "the loop devices to be released", func() bool {
		att, err := disk.Attached()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if _, ok := att[d.Image]; ok {
				return false
			}
		}
		return true
	})

	e.open()
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for i, v := range []*View{idle, susp} {
		if m, err := ds[i].Mounted(); err != nil || !m {
			t.Fatalf("session %s (%s) has no disk mounted when Recover returns: %v %v", v.ID, e.get(v.ID).State, m, err)
		}
		if b, err := os.ReadFile(filepath.Join(v.Repos[0].Path, "marker")); err != nil || string(b) != v.ID {
			t.Fatalf("session %s's workspace after the reboot: %q, %v", v.ID, b, err)
		}
	}
	if m, err := ds[2].Mounted(); err != nil || m {
		t.Errorf("the stopped session's disk was mounted again: %v %v", m, err)
	}
	for _, v := range []*View{idle, susp} {
		w := e.watch(v.ID)
		e.send(v.ID, "msg after the reboot", "")
		w.Finished("t2")
	}
	if err := e.m.Delete(ctx, "owner-1", stopped.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sd.Image); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stopped session's image after its delete: %v", err)
	}
}

// With Config.DiskPool, a session of the default disk size takes a disk
// made ahead of demand (counted in DiskUsage, as any disk of the data
// directory), the pool makes another, a session of another size makes its
// own, and Close removes the ready disks.
func TestSessionDiskPool(t *testing.T) {
	needDisks(t)
	e := newEnv(t, withDisks, withDiskPool(1))
	s, err := sim.ParseScript("disk.yaml", []byte(diskScript))
	if err != nil {
		t.Fatal(err)
	}
	e.Sim.Store(sim.New(s))
	if err := e.m.Recover(testbin.Context(t)); err != nil {
		t.Fatal(err)
	}
	pool := e.m.diskPool()
	if pool == nil {
		t.Fatal("no disk pool with Config.DiskPool 1")
	}
	testbin.WaitFor(t, time.Minute, "a disk ready", func() bool { return pool.Stats().Ready == 1 })
	u, err := e.m.DiskUsage(testbin.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if u.Disks != 1 || u.Live != 1 || u.Promised != disk.DefaultBytes {
		t.Fatalf("DiskUsage with one pool disk ready: %+v, want it counted (1 disk, promised %d)", u, int64(disk.DefaultBytes))
	}
	if u.Allocated > 8<<20 {
		t.Fatalf("a ready 20 GiB pool disk takes %d bytes of the host, more than an idle session's 8 MiB", u.Allocated)
	}
	t.Logf("a ready pool disk takes %d bytes of the host", u.Allocated)

	v := e.create("msg one")
	w := e.watch(v.ID)
	w.Finished("t1")
	if st := pool.Stats(); st.Hits != 1 {
		t.Fatalf("pool %+v: the session did not take the ready disk", st)
	}
	d, _, _ := e.m.sessionDisk(v.Session)
	if m, err := d.Mounted(); err != nil || !m {
		t.Fatalf("the session's disk (from the pool) is not mounted at %s: %v %v", d.Dir, m, err)
	}
	if _, err := os.Stat(filepath.Join(v.Repos[0].Path, "README.md")); err != nil {
		t.Fatalf("the workspace on the pool's disk: %v", err)
	}
	testbin.WaitFor(t, time.Minute, "the pool refilled", func() bool { return pool.Stats().Ready == 1 })

	v2 := e.create("msg two", func(r *CreateRequest) { r.Limits.DiskBytes = 64 << 20 })
	e.watch(v2.ID).Finished("t1")
	if st := pool.Stats(); st.Hits != 1 {
		t.Fatalf("pool %+v: a 64 MiB session took a default-sized disk", st)
	}
	d2, _, _ := e.m.sessionDisk(v2.Session)
	if u, err := d2.Usage(); err != nil || u.Size.Bytes > 64<<20 {
		t.Fatalf("the 64 MiB session's disk: %+v %v", u, err)
	}

	poolDir := filepath.Join(e.DataDir, "disks", "pool")
	if err := e.m.Close(testbin.Context(t)); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(poolDir); len(ents) != 0 {
		t.Fatalf("Close left %d entries in %s", len(ents), poolDir)
	}
	if m, err := d.Mounted(); err != nil || !m {
		t.Fatalf("Close took the session's disk with the pool's: %v %v", m, err)
	}
}
