package environment

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// deepDir makes under dir a chain of directories whose path (dir's
// included) is at least length bytes, with openat and mkdirat, one level
// at a time, as a process working inside it would (a setup that cds down
// level by level): its returned path is too long for the kernel to open
// whole (ENAMETOOLONG past PATH_MAX), whoever asks.
func deepDir(t *testing.T, dir string, length int) (path string, fd int) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("d", 200)
	path = dir
	for len(path) < length {
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, name, unix.O_DIRECTORY|unix.O_RDONLY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd, path = next, path+"/"+name
	}
	t.Cleanup(func() { unix.Close(fd) })
	return path, fd
}

// writeAt writes a file in the directory fd.
func writeAt(t *testing.T, fd int, name, content string) {
	t.Helper()
	f, err := unix.Openat(fd, name, unix.O_CREAT|unix.O_WRONLY|unix.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(f)
	if _, err := unix.Write(f, []byte(content)); err != nil {
		t.Fatal(err)
	}
}

// TestLeakedSecretsFindsThem: a value is found in a file, across the
// scan's chunks, and as a link's target; short values and the build's own
// log are not searched; nothing found is nil.
func TestLeakedSecretsFindsThem(t *testing.T) {
	dir := t.TempDir()
	env := []string{"TOKEN=s3cret-canary", "SHORT=abc", "OTHER=not-anywhere"}
	os.MkdirAll(filepath.Join(dir, "home", ".cache"), 0o755)
	// The value straddles the first chunk's end.
	big := strings.Repeat("x", scanChunk-5) + "s3cret-canary" + strings.Repeat("y", 1000)
	os.WriteFile(filepath.Join(dir, "home", ".cache", "big"), []byte(big), 0o644)
	os.WriteFile(filepath.Join(dir, "home", "abc.txt"), []byte("abc abc"), 0o644)
	os.WriteFile(filepath.Join(dir, "build.log"), []byte("s3cret-canary"), 0o600)
	os.Symlink("/tmp/s3cret-canary", filepath.Join(dir, "home", "link"))
	found, err := leakedSecrets(dir, env)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"TOKEN in home/.cache/big", "TOKEN in home/link (the link's target)"}
	if !slices.Equal(found, want) {
		t.Fatalf("found %q, want %q", found, want)
	}
	// A build.log below the top is the setup's, and searched.
	os.WriteFile(filepath.Join(dir, "home", "build.log"), []byte("s3cret-canary"), 0o644)
	if found, err := leakedSecrets(dir, env); err != nil || !slices.Contains(found, "TOKEN in home/build.log") {
		t.Fatalf("a build.log in HOME: %q, %v", found, err)
	}
	if found, err := leakedSecrets(dir, []string{"OTHER=not-anywhere"}); found != nil || err != nil {
		t.Fatalf("nothing to find: %q, %v", found, err)
	}
}

// TestLeakedSecretsFailsClosed: what the scan cannot read is an error
// naming it, never a clean result: a directory too deep to list, a file
// too deep to open (both past PATH_MAX, which stops root too: a setup
// could hide a secret from the scan so).
func TestLeakedSecretsFailsClosed(t *testing.T) {
	env := []string{"TOKEN=s3cret-canary"}

	t.Run("directory", func(t *testing.T) {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "home"), 0o755)
		_, fd := deepDir(t, filepath.Join(dir, "home"), 4200)
		writeAt(t, fd, "npmrc", "//registry/:_authToken=s3cret-canary\n")
		found, err := leakedSecrets(dir, env)
		if err == nil {
			t.Fatalf("a directory the scan cannot list: found %q and no error", found)
		}
		for _, w := range []string{"could not be searched for setup secrets", "cannot read home/dddd", "file name too long", "bytes)"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("the error %q does not say %q", err, w)
			}
		}
		if strings.Contains(err.Error(), "s3cret-canary") {
			t.Errorf("the error shows the secret: %v", err)
		}
	})

	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "home"), 0o755)
		// The directory opens (under PATH_MAX), its file's path does not.
		name := strings.Repeat("f", 250)
		path, fd := deepDir(t, filepath.Join(dir, "home"), 4096-len(name))
		if len(path) >= 4095 || len(path)+1+len(name) < 4096 {
			t.Fatalf("the directory's path is %d bytes: want it to open and its file's not", len(path))
		}
		writeAt(t, fd, name, "s3cret-canary")
		writeAt(t, fd, "ok", "nothing")
		found, err := leakedSecrets(dir, env)
		if err == nil {
			t.Fatalf("a file the scan cannot open: found %q and no error", found)
		}
		if !strings.Contains(err.Error(), "ffff") || !strings.Contains(err.Error(), "file name too long") {
			t.Errorf("the error %q does not name the file and why", err)
		}
	})

}
