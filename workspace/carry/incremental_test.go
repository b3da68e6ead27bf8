package carry

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// newPackBytes sums the uncompressed size of the packs m2 references and
// m1 does not: what the second snapshot read.
func newPackBytes(t *testing.T, packs *memPacks, m1, m2 *Manifest) int64 {
	old := m1.Packs()
	var n int64
	for _, h := range m2.Packs() {
		if _, found := slices.BinarySearch(old, h); !found {
			n += int64(len(packs.raw(t, h)))
		}
	}
	return n
}

func TestIncremental(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	src := freshDir(t, "src")
	j := func(p string) string { return filepath.Join(src, p) }
	for i := range 20 {
		writeFile(t, j(filepath.Join("d", string(rune('a'+i)))), randBytes(uint64(i), 100_000), 0o644)
	}
	writeFile(t, j("gone"), []byte("deleted next turn"), 0o644)
	writeFile(t, j("becomes-dir"), []byte("a file now"), 0o644)
	writeFile(t, j("becomes-file/inner"), []byte("a dir now"), 0o644)
	packs := newMemPacks()
	opt := Options{PackSize: 256 << 10}
	m1, err := Snapshot(ctx, src, nil, packs, opt)
	must(t, err)

	// Next turn: one file changed (same size), one deleted, two swapped kinds.
	changed := randBytes(99, 100_000)
	writeFile(t, j("d/c"), changed, 0o644)
	must(t, os.Remove(j("gone")))
	must(t, os.Remove(j("becomes-dir")))
	writeFile(t, j("becomes-dir/x"), []byte("xx"), 0o644)
	must(t, os.RemoveAll(j("becomes-file")))
	writeFile(t, j("becomes-file"), []byte("yyy"), 0o644)

	m2, err := Snapshot(ctx, src, m1, packs, opt)
	must(t, err)
	if got, want := newPackBytes(t, packs, m1, m2), int64(100_000+2+3); got != want {
		t.Errorf("second snapshot read %d bytes, want %d (the changed and new files only)", got, want)
	}
	for _, e := range m2.Entries {
		if e.Path == "gone" || e.Path == "becomes-file/inner" {
			t.Errorf("deleted %q is still in the manifest", e.Path)
		}
	}
	dst := freshDir(t, "dst")
	restored, err := Restore(ctx, dst, m2, packs, opt)
	must(t, err)
	compareTrees(t, describe(t, src, nil), describe(t, dst, nil))

	// The manifest Restore returns knows the restored files: the new
	// owner's first snapshot reads nothing.
	m3, err := Snapshot(ctx, dst, restored, packs, opt)
	must(t, err)
	if got := newPackBytes(t, packs, m2, m3); got != 0 {
		t.Errorf("snapshot right after restore read %d bytes, want 0", got)
	}
	// Without it, everything is read again.
	m4, err := Snapshot(ctx, dst, m2, packs, opt)
	must(t, err)
	if got := m4.Bytes(); got != m2.Bytes() {
		t.Errorf("Bytes() = %d, want %d", got, m2.Bytes())
	}
}

// A file changed within racyWindow of the snapshot may change again without
// its ctime moving; the next snapshot must read it even if stat agrees.
func TestIncrementalRacyFile(t *testing.T) {
	ctx := context.Background()
	old := racyWindow
	racyWindow = time.Hour
	t.Cleanup(func() { racyWindow = old })
	src := freshDir(t, "src")
	writeFile(t, filepath.Join(src, "f"), []byte("version 1"), 0o644)
	packs := newMemPacks()
	m1, err := Snapshot(ctx, src, nil, packs, Options{})
	must(t, err)
	if m1.Entries[0].Ino != 0 {
		t.Fatalf("a file changed just now was trusted: %+v", m1.Entries[0])
	}
	_, err = Snapshot(ctx, src, m1, packs, Options{})
	must(t, err)
	if packs.puts != 2 {
		t.Errorf("racy file was not read again: %d packs stored, want 2", packs.puts)
	}
}
