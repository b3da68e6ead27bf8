package carry

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/internal/testreq"
)

func mountOverlay(t *testing.T, lower, upper, work, merged string) {
	t.Helper()
	must(t, os.MkdirAll(merged, 0o755))
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		testreq.Unavailable(t, testreq.Mounts, "can not mount overlayfs here: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(merged, unix.MNT_DETACH) })
}

// The HOME of a box is an overlay whose upper directory is what carry
// moves: whiteouts (char 0:0) and opaque directories (trusted.overlay.opaque)
// must survive, so the merged view over the same lower is the same.
func TestOverlayUpper(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	base := t.TempDir()
	p := func(s string) string { return filepath.Join(base, s) }
	for _, d := range []string{"lower", "upper", "work", "upper2", "work2"} {
		must(t, os.Mkdir(p(d), 0o755))
	}
	writeFile(t, p("lower/deleted"), []byte("lower file, deleted in the box"), 0o644)
	writeFile(t, p("lower/kept"), []byte("lower file, kept"), 0o644)
	writeFile(t, p("lower/changed"), []byte("lower version"), 0o644)
	writeFile(t, p("lower/opaque/old1"), []byte("hidden by the opaque dir"), 0o644)
	writeFile(t, p("lower/opaque/old2"), []byte("hidden too"), 0o644)
	writeFile(t, p("lower/merged/l"), []byte("from lower"), 0o644)

	mountOverlay(t, p("lower"), p("upper"), p("work"), p("merged"))
	m := func(s string) string { return filepath.Join(base, "merged", s) }
	must(t, os.Remove(m("deleted")))
	must(t, os.WriteFile(m("changed"), []byte("upper version, longer"), 0o644))
	must(t, os.RemoveAll(m("opaque")))
	writeFile(t, m("opaque/new"), []byte("only this is visible"), 0o600)
	writeFile(t, m("merged/u"), []byte("from upper"), 0o644)
	writeFile(t, m("created"), []byte("new in the box"), 0o644)

	var st unix.Stat_t
	must(t, unix.Lstat(p("upper/deleted"), &st))
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Fatalf("expected a whiteout for the deleted file in the upper dir, got mode %o rdev %d", st.Mode, st.Rdev)
	}
	if v := listXattrs(t, p("upper/opaque")); v != "trusted.overlay.opaque=y" {
		t.Fatalf("expected an opaque upper dir, xattrs: %q", v)
	}
	want := describe(t, p("merged"), nil)
	must(t, unix.Unmount(p("merged"), 0))

	packs := newMemPacks()
	man, err := Snapshot(ctx, p("upper"), nil, packs, Options{})
	must(t, err)
	b, err := man.Marshal()
	must(t, err)
	man, err = UnmarshalManifest(b)
	must(t, err)
	_, err = Restore(ctx, p("upper2"), man, packs, Options{})
	must(t, err)

	mountOverlay(t, p("lower"), p("upper2"), p("work2"), p("merged2"))
	got := describe(t, p("merged2"), nil)
	compareTrees(t, want, got)
	if _, err := os.Lstat(filepath.Join(base, "merged2/deleted")); !os.IsNotExist(err) {
		t.Errorf("deleted file is visible again: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(base, "merged2/opaque/old1")); !os.IsNotExist(err) {
		t.Errorf("file under the opaque dir is visible again: %v", err)
	}
}
