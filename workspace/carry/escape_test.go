package carry

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/internal/testreq"
)

// canaryDir makes a directory outside the snapshot root holding a file
// whose content must never appear in a pack.
func canaryDir(t *testing.T) (dir string, canary []byte) {
	dir = freshDir(t, "outside")
	canary = bytes.Repeat([]byte("CANARY-"+filepath.Base(t.TempDir())+"-"), 1000)
	writeFile(t, filepath.Join(dir, "canary-secret"), canary, 0o600)
	writeFile(t, filepath.Join(dir, "sub/canary-deeper"), canary, 0o600)
	return dir, canary
}

// checkNoCanary fails if any stored pack holds the canary or any entry is
// named after a file outside the root.
func checkNoCanary(t *testing.T, packs *memPacks, ms []*Manifest, canary []byte) {
	t.Helper()
	probe := canary[:40]
	for _, h := range packs.hashes() {
		if bytes.Contains(packs.raw(t, h), probe) {
			t.Fatalf("pack %s holds the canary: the snapshot read a file outside the root", h)
		}
	}
	for _, m := range ms {
		for _, e := range m.Entries {
			if strings.Contains(e.Path, "canary") {
				t.Fatalf("entry %q is a file outside the root", e.Path)
			}
		}
	}
}

// An agent swaps directories and files for symlinks out of the root (and
// a file for a fifo) as fast as it can while snapshots run. No snapshot
// may read the canary or hang.
func TestEscapeSwapRace(t *testing.T) {
	for _, mode := range []string{"openat2", "openat"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "openat" {
				noOpenat2.Store(true)
				t.Cleanup(func() { noOpenat2.Store(false) })
			}
			testEscapeSwapRace(t)
		})
	}
}

func testEscapeSwapRace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	outside, canary := canaryDir(t)
	root := freshDir(t, "root")
	j := func(p string) string { return filepath.Join(root, p) }
	writeFile(t, j("d/inside"), []byte("harmless"), 0o644)
	writeFile(t, j("d/sub/inside-deeper"), []byte("harmless"), 0o644)
	must(t, os.Symlink(outside, j("swapdir")))
	writeFile(t, j("file"), []byte("harmless file"), 0o644)
	must(t, os.Symlink(filepath.Join(outside, "canary-secret"), j("swapfile")))
	writeFile(t, j("plain"), []byte("plain"), 0o644)
	must(t, unix.Mkfifo(j("pipe"), 0o644))

	var swaps atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	swap := func(a, b string) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, j(a), unix.AT_FDCWD, j(b), unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("swap %s %s: %v", a, b, err)
				return
			}
			swaps.Add(1)
			runtime.Gosched()
		}
	}
	wg.Add(3)
	go swap("d", "swapdir")
	go swap("file", "swapfile")
	go swap("plain", "pipe")

	packs := newMemPacks()
	var ms []*Manifest
	sawLink := 0
	// 300 snapshots, or as many as fit in 5 s: three goroutines spinning
	// on renames can starve the walk on a small machine.
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; i < 300 && (i < 20 || time.Now().Before(deadline)); i++ {
		m, err := Snapshot(ctx, root, nil, packs, Options{})
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("snapshot under a swap race: %v", err)
		}
		for _, e := range m.Entries {
			if e.Path == "d" && e.Type == TypeSymlink {
				sawLink++
			}
		}
		ms = append(ms, m)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d swaps during %d snapshots; %d snapshots saw d as a symlink", swaps.Load(), len(ms), sawLink)
	checkNoCanary(t, packs, ms, canary)
}

func TestEscapeSymlinkToSecret(t *testing.T) {
	ctx := context.Background()
	outside, canary := canaryDir(t)
	root := freshDir(t, "root")
	target := filepath.Join(outside, "canary-secret")
	must(t, os.Symlink(target, filepath.Join(root, "shadow")))
	must(t, os.Symlink(outside, filepath.Join(root, "dirlink")))
	packs := newMemPacks()
	m, err := Snapshot(ctx, root, nil, packs, Options{})
	must(t, err)
	if len(m.Entries) != 2 || m.Entries[1].Type != TypeSymlink || m.Entries[1].Target != target {
		t.Fatalf("want two symlink entries, shadow -> %s; got %+v", target, m.Entries)
	}
	checkNoCanary(t, packs, []*Manifest{m}, canary)
}

func TestFifoDoesNotHang(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	root := freshDir(t, "root")
	must(t, unix.Mkfifo(filepath.Join(root, "fifo"), 0o666))
	m, err := Snapshot(ctx, root, nil, newMemPacks(), Options{})
	must(t, err)
	if len(m.Entries) != 1 || m.Entries[0].Type != TypeFifo {
		t.Fatalf("want one fifo entry, got %+v", m.Entries)
	}
}

func TestSocketSkipped(t *testing.T) {
	root := freshDir(t, "root")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	must(t, err)
	defer unix.Close(fd)
	must(t, unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(root, "sock")}))
	m, err := Snapshot(context.Background(), root, nil, newMemPacks(), Options{})
	must(t, err)
	if len(m.Entries) != 0 {
		t.Fatalf("a socket was recorded: %+v", m.Entries)
	}
}

// Mounts inside the root are not entered: a tmpfs (another device) and a
// bind mount of a directory on the same filesystem (same device, another
// mount; only openat2's RESOLVE_NO_XDEV sees it).
func TestMountsNotEntered(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	outside, canary := canaryDir(t)
	root := freshDir(t, "root")
	writeFile(t, filepath.Join(root, "ours"), []byte("ours"), 0o644)
	tmp := filepath.Join(root, "tmpfs")
	bind := filepath.Join(root, "bind")
	must(t, os.Mkdir(tmp, 0o755))
	must(t, os.Mkdir(bind, 0o755))
	if err := unix.Mount("tmpfs", tmp, "tmpfs", 0, "size=1m"); err != nil {
		testreq.Unavailable(t, testreq.Mounts, "can not mount tmpfs here: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(tmp, unix.MNT_DETACH) })
	writeFile(t, filepath.Join(tmp, "canary-in-tmpfs"), canary, 0o644)
	must(t, unix.Mount(outside, bind, "", unix.MS_BIND, ""))
	t.Cleanup(func() { unix.Unmount(bind, unix.MNT_DETACH) })

	packs := newMemPacks()
	m, err := Snapshot(ctx, root, nil, packs, Options{})
	must(t, err)
	if len(m.Entries) != 1 || m.Entries[0].Path != "ours" {
		t.Fatalf("want only \"ours\", got %+v", m.Entries)
	}
	checkNoCanary(t, packs, []*Manifest{m}, canary)
}
