package session

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/environment"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/store"
)

func TestParseMinFree(t *testing.T) {
	for _, tc := range []struct {
		in    string
		want  MinFree
		floor int64 // on a 100 GiB filesystem
	}{
		{"", MinFree{}, 5 << 30},
		{"5g", MinFree{Bytes: 5 << 30}, 5 << 30},
		{"512m", MinFree{Bytes: 512 << 20}, 512 << 20},
		{"10%", MinFree{Percent: 10}, 10 << 30},
		{"2.5%", MinFree{Percent: 2.5}, 2560 << 20},
		{"0", MinFree{Off: true}, 0},
		{"0%", MinFree{Off: true}, 0},
	} {
		got, err := ParseMinFree(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseMinFree(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		if f := got.Floor(100 << 30); f != tc.floor {
			t.Errorf("floor of %q on 100 GiB: %d, want %d", tc.in, f, tc.floor)
		}
	}
	for _, bad := range []string{"lots", "-1g", "100%", "150%", "x%"} {
		if _, err := ParseMinFree(bad); err == nil || !strings.Contains(err.Error(), "--min-free") {
			t.Errorf("ParseMinFree(%q) = %v, want an error naming --min-free", bad, err)
		}
	}
	// The default: 10%, at least 1 GiB, at most 5 GiB.
	for size, want := range map[int64]int64{4 << 30: 1 << 30, 20 << 30: 2 << 30, 252 << 30: 5 << 30} {
		if got := (MinFree{}).Floor(size); got != want {
			t.Errorf("default floor on %s: %s, want %s", Approx(size), Approx(got), Approx(want))
		}
	}
	for n, want := range map[int64]string{0: "0B", 1023: "1023B", 1536: "1.5KiB", 5 << 30: "5GiB", 3370 << 20: "3.29GiB", 252 << 30: "252GiB"} {
		if got := Approx(n); got != want {
			t.Errorf("Approx(%d) = %q, want %q", n, got, want)
		}
	}
}

// smallDataDir puts the env's data directory on a filesystem of its own,
// of size bytes (a loop-mounted image, as a small disk would be): the
// free space a test measures there moves with its own writes only.
func smallDataDir(t *testing.T, e *env, size int64) {
	t.Helper()
	d := disk.Disk{Image: filepath.Join(testbin.TempDir(t), "data.img"), Dir: e.DataDir}
	if err := disk.Create(testbin.Context(t), d, disk.Size{Bytes: size}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the Manager's Close (registered later)
		if _, err := disk.UnmountUnder(e.DataDir); err != nil {
			t.Error(err)
		}
		os.Remove(d.Image)
	})
	if err := os.Chmod(e.DataDir, 0o711); err != nil { // the box user reaches the workspaces
		t.Fatal(err)
	}
}

// fillTo makes a file in dir that leaves free bytes free on its filesystem
// (allocated, not sparse), and returns its path.
func fillTo(t *testing.T, dir string, free int64) string {
	t.Helper()
	_, now, err := fsSpace(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, now-free); err != nil {
		t.Fatalf("filling the data directory's filesystem: %v", err)
	}
	if _, got, _ := fsSpace(dir); got > free {
		t.Fatalf("%d bytes free after filling, want at most %d", got, free)
	}
	return path
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// Below the floor of free space (the data directory on a small filesystem
// of its own, filled), a create, a message that would resume a suspended
// session and an environment's build are refused with a StorageError that
// names the data directory, what is free and the floor — and nothing of
// them is stored or made: no session row, no message, no directory, no
// disk image. Once space is freed, the same create succeeds and the
// suspended session resumes. DiskUsage says the same thing all along.
func TestAdmissionBelowFloor(t *testing.T) {
	needDisks(t)
	const floor = 128 << 20
	var b *environment.Builder
	e := newEnv(t, withDisks, withoutManager, withMinFree(MinFree{Bytes: floor}), withBuilder(&b, nil))
	smallDataDir(t, e, 512<<20)
	e.open()
	ctx := testbin.Context(t)

	// A session that works, then is suspended, while there is room.
	a := e.create("msg hi")
	wa := e.watch(a.ID)
	wa.IdleAfter("t1")
	e.Clock.Advance(DefaultIdleTimeout)
	wa.State(store.StateSuspended)
	u, err := e.m.DiskUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u.Below() || u.Floor != floor || u.Disks != 1 || u.Live != 1 || u.Promised != DefaultDiskBytes || u.Allocated <= 0 || u.Allocated > 8<<20 {
		t.Fatalf("DiskUsage with one suspended session: %+v", u)
	}

	filler := fillTo(t, e.DataDir, floor-16<<20)
	before := dirNames(t, e.DataDir)
	u, err = e.m.DiskUsage(ctx)
	if err != nil || !u.Below() {
		t.Fatalf("DiskUsage after filling: %+v, %v; want below the floor", u, err)
	}

	refused := func(what string, err error) {
		t.Helper()
		var se *StorageError
		if !errors.As(err, &se) || !errors.Is(err, ErrInsufficientStorage) {
			t.Fatalf("%s below the floor: %v, want a StorageError", what, err)
		}
		msg := err.Error()
		for _, want := range []string{e.DataDir, "free of", "below this server's floor of 128MiB", "--min-free", "harvest session cleanup"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: the refusal does not say %q: %s", what, want, msg)
			}
		}
		if hidden := se.Message(false); strings.Contains(hidden, e.DataDir) || !strings.Contains(hidden, "the server's data directory") {
			t.Errorf("%s: the refusal for a user names the data directory's path: %s", what, hidden)
		}
	}
	_, err = e.m.Create(ctx, "owner-1", CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Prompt: "msg refused"})
	refused("a create", err)
	if all, err := e.st.ListSessions(ctx, store.SessionFilter{}); err != nil || len(all) != 1 {
		t.Fatalf("sessions after a refused create: %d, %v; want only the first", len(all), err)
	}
	_, err = e.m.Send(ctx, "owner-1", a.ID, "msg resume", "")
	refused("a resume", err)
	if q, err := e.st.Messages(ctx, a.ID, store.MessageQueued); err != nil || len(q) != 0 {
		t.Fatalf("queued messages after a refused resume: %d, %v; want none", len(q), err)
	}
	_, err = e.m.Prepare(ctx, PrepareRequest{Repo: RepoSpec{Source: e.Repo}})
	refused("an environment's build", err)
	if envs, err := b.List(ctx, store.EnvironmentFilter{}); err != nil || len(envs) != 0 {
		t.Fatalf("environments after a refused build: %d, %v", len(envs), err)
	}
	if after := dirNames(t, e.DataDir); !slices.Equal(before, after) {
		t.Fatalf("the data directory changed with refused work: %v, then %v", before, after)
	}
	for _, sub := range []string{"workspaces/session", "disks/session"} {
		if names := dirNames(t, filepath.Join(e.DataDir, sub)); len(names) != 1 {
			t.Fatalf("%s after refused work: %v; want only the first session's", sub, names)
		}
	}

	// Space freed: the same work is taken.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	v := e.create("msg hi again")
	e.watch(v.ID).IdleAfter("t1")
	e.send(a.ID, "msg resume", "")
	wa.Finished("t2")
	u, err = e.m.DiskUsage(ctx)
	if err != nil || u.Below() || u.Disks != 2 || u.Live != 2 || u.Promised != 2*DefaultDiskBytes {
		t.Fatalf("DiskUsage after freeing space and a second session: %+v, %v", u, err)
	}
}

// The floor holds for the default data directory too: a Manager with the
// default MinFree on this machine's disk takes work while there is more
// than 5 GiB free (or 10%), and MinFree{Off} never refuses.
func TestAdmissionDefaultFloor(t *testing.T) {
	e := newEnv(t)
	size, free, err := fsSpace(e.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	low, _, err := e.m.belowFloor()
	if err != nil {
		t.Fatal(err)
	}
	if want := free < (MinFree{}).Floor(size); low != want {
		t.Fatalf("below the floor: %v with %s free of %s, want %v", low, Approx(free), Approx(size), want)
	}
	e.m.cfg.MinFree = MinFree{Bytes: free + 1<<40} // more than there is
	if err := e.m.admit("testing"); !errors.Is(err, ErrInsufficientStorage) {
		t.Fatalf("admit with a floor above the free space: %v", err)
	}
	e.m.cfg.MinFree = MinFree{Off: true}
	if err := e.m.admit("testing"); err != nil {
		t.Fatalf("admit with no floor: %v", err)
	}
	// ENOSPC from the host's disk is explained, never bare; other errors
	// pass unchanged.
	full := e.m.hostFull(&os.PathError{Op: "mkdir", Path: "/run/harvest/local/x", Err: unix.ENOSPC})
	if !errors.Is(full, unix.ENOSPC) || !strings.Contains(full.Error(), "the server's disk is full: its data directory has") {
		t.Errorf("hostFull(ENOSPC) = %v", full)
	}
	other := errors.New("something else")
	if got := e.m.hostFull(other); got != other {
		t.Errorf("hostFull(another error) = %v", got)
	}
}
