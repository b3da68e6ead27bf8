package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/harvest-dev/harvest/internal/testreq"
)

// A new box on a disk starts with an empty /tmp and the HOME the last one
// left, owned by the box user.
func TestPrepareDiskDir(t *testing.T) {
	testreq.NeedRoot(t, "chowns HOME to the box user")
	s := Spec{DiskDir: t.TempDir()}.WithDefaults()
	tmp, home, err := PrepareDiskDir(s)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(tmp, "stale.sock"), nil, 0o600)
	os.WriteFile(filepath.Join(home, "state"), []byte("kept"), 0o600)
	os.Symlink("/etc", filepath.Join(tmp, "link")) // removed, not followed
	if _, _, err := PrepareDiskDir(s); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("/tmp of a new box holds %v", ents)
	}
	if b, err := os.ReadFile(filepath.Join(home, "state")); err != nil || string(b) != "kept" {
		t.Fatalf("HOME of a new box: %q, %v", b, err)
	}
	fi, err := os.Stat(tmp)
	if err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Fatalf("/tmp mode %v, %v: want 1777", fi.Mode(), err)
	}
	uid, gid := ownerOf(mustStat(t, home))
	if uid != DefaultUID || gid != DefaultGID {
		t.Fatalf("HOME owned by %d:%d, want the box user", uid, gid)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatalf("RemoveAll followed the symlink: %v", err)
	}
}

func mustStat(t *testing.T, p string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}
