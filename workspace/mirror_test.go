package workspace

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
)

const mirrorToken = "ghs_mirrorCanary0123456789"

func mirrorAuth(context.Context) (string, string, error) { return "x-access-token", mirrorToken, nil }

// TestMirrorSyncAndClone: a mirror fetches branches with a token given in
// git's environment only; a session's clone of it starts on its own
// branch, points origin at the public URL, shares no inode with the mirror
// and keeps no trace of the token or the mirror's path.
func TestMirrorSyncAndClone(t *testing.T) {
	root := t.TempDir()
	first := testbin.BareRepo(t, root, "acme/app", map[string]string{"README.md": "hello\n", "go.mod": "module app\n"})
	base := testbin.GitServer(t, root, mirrorToken)
	m := &Mirrors{Dir: filepath.Join(t.TempDir(), "mirrors")}
	ctx := context.Background()
	r := Remote{Key: "github.com/acme/app", URL: base + "/acme/app.git", Auth: mirrorAuth, DefaultBranch: "main"}

	// Without the token the server refuses: the credential is what works.
	if _, err := m.Sync(ctx, Remote{Key: r.Key, URL: r.URL}); err == nil {
		t.Fatal("a fetch without the token succeeded")
	}
	path, err := m.Sync(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if got := testbin.Git(t, path, "rev-parse", "refs/heads/main"); got != first {
		t.Fatalf("mirror main = %s, want %s", got, first)
	}
	for _, f := range []string{"config", "packed-refs", "FETCH_HEAD"} {
		if b, _ := os.ReadFile(filepath.Join(path, f)); strings.Contains(string(b), mirrorToken) {
			t.Fatalf("the token is in the mirror's %s", f)
		}
	}

	// A new commit upstream arrives with the next Sync; a deleted branch goes.
	upstream := filepath.Join(root, "acme/app.git")
	work := t.TempDir()
	testbin.Git(t, work, "clone", "-q", upstream, "w")
	w := filepath.Join(work, "w")
	os.WriteFile(filepath.Join(w, "a.txt"), []byte("a\n"), 0o644)
	testbin.Git(t, w, "add", "a.txt")
	testbin.Git(t, w, "commit", "-q", "-m", "second")
	testbin.Git(t, w, "push", "-q", "origin", "main", "main:refs/heads/topic")
	second := testbin.Git(t, w, "rev-parse", "HEAD")
	if _, err := m.Sync(ctx, r); err != nil {
		t.Fatal(err)
	}
	if got := testbin.Git(t, path, "rev-parse", "refs/heads/topic"); got != second {
		t.Fatalf("mirror topic = %s, want %s", got, second)
	}
	testbin.Git(t, w, "push", "-q", "origin", ":topic")
	if _, err := m.Sync(ctx, r); err != nil {
		t.Fatal(err)
	}
	if out, _ := m.Git(ctx, path, "branch", "--list"); strings.Contains(out, "topic") {
		t.Fatalf("a branch deleted upstream is still mirrored: %s", out)
	}

	dst := filepath.Join(t.TempDir(), "app")
	head, err := m.Clone(ctx, path, dst, Checkout{Ref: "main", Branch: "harvest/s-1", OriginURL: "https://github.com/acme/app.git",
		Name: "Ada (Harvest)", Email: "1+ada@users.noreply.github.com"})
	if err != nil {
		t.Fatal(err)
	}
	if head != second {
		t.Fatalf("clone at %s, want %s", head, second)
	}
	if b := testbin.Git(t, dst, "symbolic-ref", "--short", "HEAD"); b != "harvest/s-1" {
		t.Fatalf("clone on %s, want harvest/s-1", b)
	}
	if u := testbin.Git(t, dst, "config", "remote.origin.url"); u != "https://github.com/acme/app.git" {
		t.Fatalf("origin = %s", u)
	}
	if n := testbin.Git(t, dst, "config", "user.name"); n != "Ada (Harvest)" {
		t.Fatalf("user.name = %s", n)
	}
	if testbin.Git(t, dst, "rev-parse", "origin/main") != second {
		t.Fatal("origin/main is not the mirror's main")
	}
	cfg, _ := os.ReadFile(filepath.Join(dst, ".git", "config"))
	if strings.Contains(string(cfg), m.Dir) || strings.Contains(string(cfg), mirrorToken) {
		t.Fatalf("the clone's config names the mirror or the token:\n%s", cfg)
	}
	if _, err := os.Stat(filepath.Join(dst, ".git", "logs")); err == nil {
		t.Fatal("the clone kept reflogs naming the mirror's path")
	}
	// No object file is shared with the mirror: a box writing its clone
	// cannot touch the mirror.
	mirrorInodes := map[uint64]bool{}
	filepath.Walk(path, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			mirrorInodes[fi.Sys().(*syscall.Stat_t).Ino] = true
		}
		return nil
	})
	filepath.Walk(dst, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && mirrorInodes[fi.Sys().(*syscall.Stat_t).Ino] {
			t.Errorf("%s shares its inode with the mirror", p)
		}
		return nil
	})

	// A commit as ref gives a detached start on the session's branch.
	dst2 := filepath.Join(t.TempDir(), "app")
	if head, err := m.Clone(ctx, path, dst2, Checkout{Ref: first, Branch: "harvest/s-2"}); err != nil || head != first {
		t.Fatalf("clone at %s: %s, %v", first, head, err)
	}
	// A ref that is no branch, tag or commit, and one that is an option.
	for _, ref := range []string{"nope", "--upload-pack=touch /tmp/x"} {
		if _, err := m.Clone(ctx, path, filepath.Join(t.TempDir(), "x"), Checkout{Ref: ref}); err == nil {
			t.Fatalf("ref %q accepted", ref)
		}
	}
}

// TestMirrorBadKeys: a key that could leave the mirrors' directory.
func TestMirrorBadKeys(t *testing.T) {
	m := &Mirrors{Dir: t.TempDir()}
	for _, k := range []string{"../x", "a/../../b", "/abs", "a b", ""} {
		if _, err := m.Sync(context.Background(), Remote{Key: k, URL: "https://example.com/x.git"}); err == nil {
			t.Errorf("key %q accepted", k)
		}
	}
	if _, err := m.Sync(context.Background(), Remote{Key: "h/o/n", URL: "file:///etc"}); err == nil {
		t.Error("a file:// URL accepted")
	}
}

// TestMirrorStalledServer: a fetch from a server that never answers ends
// within the stall bound.
func TestMirrorStalledServer(t *testing.T) {
	url, _ := testbin.HangingGitServer(t)
	m := &Mirrors{Dir: t.TempDir(), Opts: CloneOptions{Stall: time.Second, Timeout: 20 * time.Second}}
	start := time.Now()
	_, err := m.Sync(context.Background(), Remote{Key: "h/o/n", URL: url})
	if err == nil {
		t.Fatal("a fetch from a hanging server succeeded")
	}
	if time.Since(start) > 15*time.Second {
		t.Fatalf("the fetch took %s", time.Since(start))
	}
}
