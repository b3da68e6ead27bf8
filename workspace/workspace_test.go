package workspace

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestCopyKeepsTheTreeAsItIs(t *testing.T) {
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, ".git/objects"), 0o755))
	must(os.WriteFile(filepath.Join(src, ".git/HEAD"), []byte("ref: refs/heads/main\n"), 0o644))
	must(os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(os.WriteFile(filepath.Join(src, "untracked.txt"), []byte("uncommitted work"), 0o600))
	must(os.Symlink("/etc/passwd", filepath.Join(src, "escape")))
	must(syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644))

	dst := filepath.Join(t.TempDir(), "copy")
	owner := Owner{}
	if os.Geteuid() == 0 {
		owner = Owner{UID: 1000, GID: 1000}
	}
	st, err := Copy(context.Background(), src, dst, owner)
	must(err)
	if st.Files != 3 || st.Symlinks != 1 || st.Skipped != 1 {
		t.Errorf("stats %+v", st)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "untracked.txt")); string(b) != "uncommitted work" {
		t.Errorf("untracked.txt = %q", b)
	}
	if fi, err := os.Stat(filepath.Join(dst, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("run.sh mode: %v %v", fi.Mode(), err)
	}
	// The link is copied as a link, never followed on the host.
	if l, err := os.Readlink(filepath.Join(dst, "escape")); err != nil || l != "/etc/passwd" {
		t.Errorf("escape: %q %v", l, err)
	}
	if owner != (Owner{}) {
		fi, _ := os.Lstat(filepath.Join(dst, ".git/HEAD"))
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 {
			t.Errorf("owner %d:%d", st.Uid, st.Gid)
		}
	}
	// The source is untouched by changes to the copy.
	must(os.WriteFile(filepath.Join(dst, "run.sh"), []byte("changed"), 0o755))
	if b, _ := os.ReadFile(filepath.Join(src, "run.sh")); string(b) != "#!/bin/sh\n" {
		t.Error("writing the copy changed the source")
	}
}

func TestCopyRefusesBadTargets(t *testing.T) {
	src := t.TempDir()
	if _, err := Copy(context.Background(), src, filepath.Join(src, "inside"), Owner{}); err == nil || !strings.Contains(err.Error(), "into itself") {
		t.Errorf("copy into itself: %v", err)
	}
	if _, err := Copy(context.Background(), src, t.TempDir(), Owner{}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("existing target: %v", err)
	}
}

func TestParse(t *testing.T) {
	for arg, want := range map[string]string{
		"https://github.com/acme/widgets.git": "widgets",
		"git@github.com:acme/gadgets.git":     "gadgets",
		"ssh://git@host/x/y":                  "y",
	} {
		s, err := Parse(arg)
		if err != nil || s.URL != arg || s.Name() != want {
			t.Errorf("Parse(%q) = %+v %v, name %q", arg, s, err, s.Name())
		}
	}
	dir := filepath.Join(t.TempDir(), "my repo!")
	os.Mkdir(dir, 0o755)
	s, err := Parse(dir)
	if err != nil || s.Path != dir || s.Name() != "my-repo" {
		t.Errorf("Parse(%q) = %+v %v, name %q", dir, s, err, s.Name())
	}
	if _, err := Parse("/no/such/repo"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing: %v", err)
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o644)
	if _, err := Parse(f); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("file: %v", err)
	}
}
