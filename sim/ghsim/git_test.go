package ghsim_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sim/ghsim"
)

func cloneURL(w *world, password string) string {
	u := w.srv.URL() + "/acme/widget.git"
	if password == "" {
		return u
	}
	return strings.Replace(u, "http://", "http://x-access-token:"+password+"@", 1)
}

// TestGitCLI: the real git clones with a token, pushes a branch the REST
// API then reports, is refused without a token, without write access, and
// on a protected branch with GitHub's GH006.
func TestGitCLI(t *testing.T) {
	w := newWorld(t, ghsim.Options{})
	tok, err := w.srv.Token(w.instID)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mustGit(t, dir, "clone", "-q", cloneURL(w, tok), ".")
	if got := mustGit(t, dir, "log", "-1", "--format=%s"); got != "first" {
		t.Errorf("cloned HEAD %q", got)
	}
	mustGit(t, dir, "checkout", "-q", "-b", "harvest/fix-1")
	mustGit(t, dir, "commit", "-q", "--allow-empty", "-m", "fix")
	mustGit(t, dir, "push", "-q", "origin", "harvest/fix-1")
	sha := mustGit(t, dir, "rev-parse", "HEAD")
	br, err := w.srv.Branches("acme/widget")
	if err != nil || br["harvest/fix-1"] != sha {
		t.Errorf("branches after push: %v %v", br, err)
	}

	// No credentials: 401 with GitHub's realm; git says authentication failed.
	anon := t.TempDir()
	out, err := runGit(t, anon, "clone", "-q", cloneURL(w, ""), ".")
	if err == nil || !strings.Contains(out, "Authentication failed") && !strings.Contains(out, "could not read Username") {
		t.Errorf("anonymous clone of a private repo: %v\n%s", err, out)
	}
	resp, err := http.Get(w.srv.URL() + "/acme/widget.git/info/refs?service=git-upload-pack")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != `Basic realm="GitHub"` {
		t.Errorf("anonymous info/refs: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}

	// bob (read) fetches but cannot push.
	mustGit(t, dir, "remote", "add", "bob", cloneURL(w, w.bob.Token))
	mustGit(t, dir, "fetch", "-q", "bob")
	out, err = runGit(t, dir, "push", "bob", "HEAD:refs/heads/bob")
	if err == nil || !strings.Contains(out, "Permission to acme/widget.git denied to bob.") {
		t.Errorf("push with read access: %v\n%s", err, out)
	}
	// mallory (none) cannot even fetch.
	mustGit(t, dir, "remote", "add", "mallory", cloneURL(w, w.mallory.Token))
	if out, err = runGit(t, dir, "fetch", "mallory"); err == nil {
		t.Errorf("fetch without access: %s", out)
	}

	// A protected branch refuses the push as GitHub does.
	if err := w.srv.ProtectBranch(ghsim.ProtectionSpec{Repo: "acme/widget", Branch: "main", Protected: true}); err != nil {
		t.Fatal(err)
	}
	out, err = runGit(t, dir, "push", "origin", "HEAD:main")
	if err == nil || !strings.Contains(out, "remote: error: GH006: Protected branch update failed for refs/heads/main.") {
		t.Errorf("push to protected main: %v\n%s", err, out)
	}
	if br, _ := w.srv.Branches("acme/widget"); br["main"] == sha {
		t.Error("protected main moved")
	}

	// An expired token is refused; a fresh one works.
	w.clock.Advance(time.Hour + time.Second)
	if out, err = runGit(t, dir, "fetch", "origin"); err == nil {
		t.Errorf("fetch with an expired token: %s", out)
	}
	tok2, _ := w.srv.Token(w.instID)
	mustGit(t, dir, "fetch", "-q", cloneURL(w, tok2))
}

// TestGitPublicAnonymous: anyone may clone a public repository, no one
// anonymous may push.
func TestGitPublicAnonymous(t *testing.T) {
	w := newWorld(t, ghsim.Options{})
	if _, err := w.srv.CreateRepo(ctxT(t), ghsim.RepoSpec{Owner: "acme", Name: "open", Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mustGit(t, dir, "clone", "-q", w.srv.URL()+"/acme/open.git", ".")
	mustGit(t, dir, "commit", "-q", "--allow-empty", "-m", "x")
	if out, err := runGit(t, dir, "push", "origin", "HEAD:main"); err == nil {
		t.Errorf("anonymous push: %s", out)
	}
}
