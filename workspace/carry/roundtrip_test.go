package carry

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for k := 0; k < 8 && i+k < n; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	return b
}

// buildTree makes a tree with every kind of entry carry handles.
func buildTree(t *testing.T, root string) {
	t.Helper()
	j := func(p string) string { return filepath.Join(root, p) }
	writeFile(t, j("a/b/c/deep.txt"), []byte("deep\n"), 0o644)
	writeFile(t, j("big.bin"), randBytes(1, 5<<20+12345), 0o644)
	writeFile(t, j("empty"), nil, 0o600)
	// Sparse: data, a hole of 10 MiB, data, a trailing hole.
	f, err := os.Create(j("sparse"))
	must(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte("s"), 4096), 0)
	must(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte("t"), 5000), 10<<20)
	must(t, err)
	must(t, f.Truncate(12<<20))
	must(t, f.Close())
	must(t, os.Symlink("/etc/passwd", j("abs-link")))
	must(t, os.Symlink("no/such/target", j("a/dangling")))
	must(t, unix.Mkfifo(j("fifo"), 0o640))
	must(t, unix.Mknod(j("a/whiteout"), unix.S_IFCHR|0o000, 0))
	writeFile(t, j("suid"), []byte("#!/bin/true\n"), 0o755)
	must(t, os.Chmod(j("suid"), 0o4755|os.ModeSetuid))
	must(t, unix.Chmod(j("suid"), 0o4755))
	must(t, os.Mkdir(j("tmp"), 0o755))
	must(t, unix.Chmod(j("tmp"), 0o1777))
	must(t, os.Mkdir(j("sgid"), 0o755))
	must(t, unix.Chmod(j("sgid"), 0o2775))
	writeFile(t, j("home/user/.bashrc"), []byte("export X=1\n"), 0o644)
	must(t, os.Lchown(j("home/user"), 1000, 1000))
	must(t, os.Lchown(j("home/user/.bashrc"), 1000, 1000))
	must(t, os.Lchown(j("a/dangling"), 1000, 1000))
	must(t, unix.Lsetxattr(j("a/b"), "trusted.overlay.opaque", []byte("y"), 0))
	must(t, unix.Lsetxattr(j("home/user/.bashrc"), "user.x", []byte("value"), 0))
	must(t, unix.Lsetxattr(j("abs-link"), "trusted.overlay.origin", []byte("o"), 0))
	must(t, os.Link(j("big.bin"), j("a/hardlink")))
	// mtimes: files first, then directories deepest first.
	when := time.Date(2021, 3, 4, 5, 6, 7, 891011121, time.UTC)
	for i, p := range []string{"a/b/c/deep.txt", "big.bin", "empty", "sparse", "fifo", "a/whiteout", "suid", "home/user/.bashrc"} {
		must(t, os.Chtimes(j(p), when, when.Add(time.Duration(i)*time.Hour)))
	}
	ts := unix.NsecToTimespec(when.Add(-time.Hour).UnixNano())
	must(t, unix.UtimesNanoAt(unix.AT_FDCWD, j("abs-link"), []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW))
	for i, p := range []string{"a/b/c", "a/b", "home/user", "home", "tmp", "sgid", "a", ""} {
		must(t, os.Chtimes(j(p), when, when.Add(-time.Duration(i+2)*time.Hour)))
	}
}

func TestRoundTrip(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	src := freshDir(t, "src")
	buildTree(t, src)
	packs := newMemPacks()
	opt := Options{PackSize: 1 << 20}
	m, err := Snapshot(ctx, src, nil, packs, opt)
	must(t, err)
	b, err := m.Marshal()
	must(t, err)
	t.Logf("%d entries, %d files, %d bytes of data in %d packs; manifest %d bytes",
		len(m.Entries), m.Files(), m.Bytes(), len(m.Packs()), len(b))
	m2, err := UnmarshalManifest(b)
	must(t, err)

	var big *Entry
	for i := range m2.Entries {
		if m2.Entries[i].Path == "big.bin" {
			big = &m2.Entries[i]
		}
	}
	if big == nil || len(big.Extents) < 2 || big.Extents[0].Pack == big.Extents[len(big.Extents)-1].Pack {
		t.Fatalf("big.bin should span several packs: %+v", big)
	}
	if want := int64(5<<20+12345)*2 + 4096 + 8192 + 5 + 11 + 12; m2.Bytes() != want {
		t.Errorf("Bytes() = %d, want %d (the hard link counted twice, holes not at all: SEEK_DATA works in 4 KiB blocks)", m2.Bytes(), want)
	}

	dst := freshDir(t, "dst")
	_, err = Restore(ctx, dst, m2, packs, opt)
	must(t, err)
	compareTrees(t, describe(t, src, nil), describe(t, dst, nil))

	// Holes stay holes.
	var st unix.Stat_t
	must(t, unix.Stat(filepath.Join(dst, "sparse"), &st))
	if st.Blocks*512 > 1<<20 {
		t.Errorf("restored sparse file uses %d bytes on disk; its holes were filled", st.Blocks*512)
	}
}

func TestRestoreSkip(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	src := freshDir(t, "src")
	writeFile(t, filepath.Join(src, "keep/file"), []byte("k"), 0o644)
	writeFile(t, filepath.Join(src, "lost+found/x"), []byte("lost"), 0o644)
	writeFile(t, filepath.Join(src, ".box/.home-work/w"), []byte("w"), 0o644)
	skip := func(rel string, isDir bool) bool { return rel == "lost+found" || rel == ".box/.home-work" }
	packs := newMemPacks()
	m, err := Snapshot(ctx, src, nil, packs, Options{Skip: skip})
	must(t, err)
	for _, e := range m.Entries {
		if e.Path == "lost+found" || e.Path == ".box/.home-work" || filepath.Dir(e.Path) == "lost+found" {
			t.Errorf("skipped entry %q was recorded", e.Path)
		}
	}
	// The target may hold skipped entries (a fresh ext4 image has lost+found).
	dst := freshDir(t, "dst")
	must(t, os.Mkdir(filepath.Join(dst, "lost+found"), 0o700))
	_, err = Restore(ctx, dst, m, packs, Options{Skip: skip})
	must(t, err)
	if b, err := os.ReadFile(filepath.Join(dst, "keep/file")); err != nil || string(b) != "k" {
		t.Errorf("keep/file = %q, %v", b, err)
	}
	// Without Skip, the same target is not empty.
	dst2 := freshDir(t, "dst2")
	must(t, os.Mkdir(filepath.Join(dst2, "lost+found"), 0o700))
	if _, err := Restore(ctx, dst2, m, packs, Options{}); err == nil {
		t.Error("Restore into a non-empty root succeeded")
	} else {
		t.Logf("non-empty root: %v", err)
	}
}
