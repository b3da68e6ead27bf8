package sandboxtest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
)

// testMounts: a read-only mount is readable (and runnable), not writable by
// any route (EROFS, although the box user owns the files), and symlinks in
// it cannot reach the host.
func (s *suite) testMounts(t *testing.T) {
	// Owned by the box user: only the read-only mount stands in the way.
	host := testbin.Workspace(t, sandbox.DefaultUID, sandbox.DefaultGID)
	files := map[string]string{"data.txt": "mounted data\n", "sub/deep.txt": "deep\n"}
	for name, content := range files {
		p := filepath.Join(host, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(host, "tool.sh"), []byte("#!/bin/sh\necho tool-ran\n"), 0o777); err != nil {
		t.Fatal(err)
	}
	// Symlinks resolve inside the box: one to the mount's own host path, one
	// climbing out of it.
	os.Symlink(host, filepath.Join(host, "hostself"))
	os.Symlink("../../../..", filepath.Join(host, "up"))
	single := filepath.Join(testbin.Workspace(t, sandbox.DefaultUID, sandbox.DefaultGID), "single.txt")
	if err := os.WriteFile(single, []byte("single file\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	for _, p := range append([]string{host, filepath.Dir(single)}, filepath.Join(host, "sub")) {
		os.Chown(p, sandbox.DefaultUID, sandbox.DefaultGID)
	}
	for name := range files {
		os.Chown(filepath.Join(host, name), sandbox.DefaultUID, sandbox.DefaultGID)
	}
	os.Chown(single, sandbox.DefaultUID, sandbox.DefaultGID)
	hostEntries := listDir(t, host)

	spec, ws := withWorkspace(t)
	dir, file, inHome := "/opt/harvest-ro-"+randHex(), "/opt/harvest-ro-file-"+randHex()+"/single.txt", "/home/user/.config/harvest-ro"
	if s.b.Isolated {
		spec.Mounts = []sandbox.Mount{{HostPath: host, BoxPath: dir}, {HostPath: single, BoxPath: file}, {HostPath: host, BoxPath: inHome}}
	} else {
		// The host backend mounts nothing: a mount is its host path.
		dir, file = host, single
		spec.Mounts = []sandbox.Mount{{HostPath: host, BoxPath: host}, {HostPath: single, BoxPath: single}}
		if _, err := s.p.Start(ctxFor(t), sandbox.Spec{Mounts: []sandbox.Mount{{HostPath: host, BoxPath: "/opt/elsewhere"}}}); err == nil || !strings.Contains(err.Error(), "no box filesystem") {
			t.Errorf("host backend, a mount that moves the path: %v", err)
		}
	}
	sb := s.start(t, spec)
	if got := mustOK(t, sb, "cat", dir+"/data.txt", dir+"/sub/deep.txt", file); got != "mounted data\ndeep\nsingle file" {
		t.Errorf("reading the mounts: %q", got)
	}
	if got := mustOK(t, sb, dir+"/tool.sh"); got != "tool-ran" {
		t.Errorf("running a tool from a mount: %q", got)
	}
	if b, err := sb.ReadFile(ctxFor(t), dir+"/sub/deep.txt"); err != nil || string(b) != "deep\n" {
		t.Errorf("ReadFile in a mount: %q %v", b, err)
	}
	if !s.b.Isolated {
		return // nothing is read-only on the host backend
	}
	if got := mustOK(t, sb, "cat", inHome+"/data.txt"); got != "mounted data" {
		t.Errorf("a mount in HOME: %q", got)
	}

	pr := installProbe(t, sb)
	for _, target := range []string{dir + "/data.txt", dir + "/new.txt", dir + "/sub/deep.txt", dir + "/sub/new", file, inHome + "/data.txt"} {
		if v := probe(t, sb, pr, "write", target); !strings.HasPrefix(v, "err EROFS") {
			t.Errorf("write %s: %q, want EROFS", target, v)
		}
	}
	for _, script := range []string{
		"mkdir " + dir + "/d", "rm " + dir + "/data.txt", "chmod 777 " + dir + "/data.txt", "touch " + dir + "/data.txt",
		"mv " + dir + "/data.txt " + dir + "/moved", "ln -s x " + dir + "/l", "truncate -s 0 " + file,
		// Reopening a read-only descriptor for writing through /proc.
		"exec 3<" + dir + "/data.txt; echo x >/proc/self/fd/3",
	} {
		r := sh(t, sb, script)
		if r.st.Success() || !strings.Contains(r.stderr, "Read-only file system") {
			t.Errorf("%s: %v %q, want a read-only file system error", script, r.st, r.stderr)
		}
	}
	if err := sb.WriteFile(ctxFor(t), dir+"/new.txt", []byte("x"), 0o644); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("WriteFile into a mount: %v", err)
	}
	if err := sb.RemoveAll(ctxFor(t), dir+"/sub"); err == nil {
		t.Error("RemoveAll in a mount succeeded")
	}

	// A hard link into the writable workspace would make the host file
	// writable from there: refused (the mounts differ).
	denied(t, "hard link from a mount into the workspace", probe(t, sb, pr, "link", dir+"/data.txt", sb.WorkspacePath("w")+"/hardlink"))
	// The symlink to the mount's host path means that path in the box: not
	// the host directory, even once the box creates it.
	mustOK(t, sb, "mkdir", "-p", host)
	probe(t, sb, pr, "write", dir+"/hostself/escape")
	if b, err := sb.ReadFile(ctxFor(t), dir+"/up/etc/hostname"); err == nil && strings.Contains(string(b), "harvest-ro") {
		t.Errorf("the climbing symlink reached something unexpected: %q", b)
	}
	denied(t, "write through a symlink climbing out of the mount", probe(t, sb, pr, "write", dir+"/up/etc/harvest-escape"))

	// The host directory is untouched.
	if got := listDir(t, host); !slices.Equal(got, hostEntries) {
		t.Errorf("the host directory changed: %v, was %v", got, hostEntries)
	}
	if b, _ := os.ReadFile(filepath.Join(host, "data.txt")); string(b) != "mounted data\n" {
		t.Errorf("host data.txt is now %q", b)
	}
	if _, err := os.Lstat(filepath.Join(ws, "hardlink")); err == nil {
		t.Error("a hard link to the mounted file appeared in the workspace")
	}
}

// listDir lists a host tree's paths, sorted.
func listDir(t testing.TB, root string) []string {
	var out []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			out = append(out, strings.TrimPrefix(p, root))
		}
		return nil
	})
	slices.Sort(out)
	return out
}

// badMountSpecs are mounts every backend refuses, with what the error says.
func badMountSpecs(t testing.TB) map[string]struct {
	spec sandbox.Spec
	want string
} {
	dir := testbin.TempDir(t)
	m := func(ms ...sandbox.Mount) sandbox.Spec { return sandbox.Spec{Mounts: ms} }
	return map[string]struct {
		spec sandbox.Spec
		want string
	}{
		"mount: relative box path":  {m(sandbox.Mount{HostPath: dir, BoxPath: "opt/x"}), "clean absolute path"},
		"mount: unclean box path":   {m(sandbox.Mount{HostPath: dir, BoxPath: "/opt/x/../y"}), "clean absolute path"},
		"mount: relative host path": {m(sandbox.Mount{HostPath: "tools", BoxPath: "/opt/x"}), "use an absolute path"},
		"mount: missing host path":  {m(sandbox.Mount{HostPath: "/no/such/dir/anywhere", BoxPath: "/opt/x"}), "does not exist"},
		"mount: at /":               {m(sandbox.Mount{HostPath: dir, BoxPath: "/"}), "the box needs /"},
		"mount: over /usr":          {m(sandbox.Mount{HostPath: dir, BoxPath: "/usr"}), "the box needs /usr"},
		"mount: in /workspace":      {m(sandbox.Mount{HostPath: dir, BoxPath: "/workspace/x"}), "where workspaces go"},
		"mount: in /proc":           {m(sandbox.Mount{HostPath: dir, BoxPath: "/proc/x"}), "/proc"},
		"mount: in /dev":            {m(sandbox.Mount{HostPath: dir, BoxPath: "/dev/x"}), "/dev"},
		"mount: in /sys":            {m(sandbox.Mount{HostPath: dir, BoxPath: "/sys/x"}), "/sys"},
		"mount: agent's directory":  {m(sandbox.Mount{HostPath: dir, BoxPath: "/.harvest/bin"}), "agent"},
		"mount: duplicate":          {m(sandbox.Mount{HostPath: dir, BoxPath: "/opt/x"}, sandbox.Mount{HostPath: dir, BoxPath: "/opt/x"}), "two mounts use"},
		"mount: nested":             {m(sandbox.Mount{HostPath: dir, BoxPath: "/opt/x"}, sandbox.Mount{HostPath: dir, BoxPath: "/opt/x/y"}), "nested mounts are not supported"},
	}
}
