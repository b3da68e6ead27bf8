package gitproxy

import (
	"crypto/rand"
	"net/http"
	"strings"
	"testing"
)

// TestCloneAndFetch: the box clones and fetches
// https://github.com/owner/name.git through the proxy with protocol v2, and
// its origin stays the GitHub URL.
func TestCloneAndFetch(t *testing.T) {
	h := newHarness(t)
	main := h.seed(testRepo)
	tok, _ := h.grant(h.repo(testRepo))

	dir := h.clone(tok, testRepo)
	if got := h.mustBox(tok, dir, "rev-parse", "HEAD"); got != main {
		t.Errorf("cloned HEAD %s, want %s", got, main)
	}
	if got := h.mustBox(tok, dir, "config", "remote.origin.url"); got != "https://github.com/owner/name.git" {
		t.Errorf("origin is %q in .git/config, want the GitHub URL", got)
	}

	// A new commit upstream, fetched.
	other := h.clone(tok, testRepo)
	next := h.commit(other, "more", []byte("more\n"))
	h.host(other, "push", "-q", h.up.bare(testRepo), "HEAD:main")
	h.mustBox(tok, dir, "fetch", "-q", "origin")
	if got := h.mustBox(tok, dir, "rev-parse", "origin/main"); got != next {
		t.Errorf("fetched origin/main %s, want %s", got, next)
	}

	v2 := 0
	for _, s := range h.up.seen() {
		if s.method == http.MethodPost && strings.HasSuffix(s.path, "/git-upload-pack") && s.protocol == "version=2" {
			v2++
		}
	}
	if v2 == 0 {
		t.Errorf("no upload-pack request reached the upstream with Git-Protocol: version=2: %+v", h.up.seen())
	}
}

// TestPushAllowed: a push to the session's branch lands upstream, and
// OnPush reports its shas; a second push reports the old sha.
func TestPushAllowed(t *testing.T) {
	h := newHarness(t)
	h.seed(testRepo)
	tok, _ := h.grant(h.repo(testRepo))
	dir := h.clone(tok, testRepo)

	first := h.commit(dir, "a", []byte("a\n"))
	h.mustBox(tok, dir, "push", "-q", "origin", "HEAD:"+testBranch)
	second := h.commit(dir, "b", []byte("b\n"))
	h.mustBox(tok, dir, "push", "-q", "origin", "HEAD:"+testBranch)

	if got := h.host(h.up.bare(testRepo), "rev-parse", testBranch); got != second {
		t.Errorf("upstream %s is %s, want %s", testBranch, got, second)
	}
	pushes := h.gotPushes()
	if len(pushes) != 2 {
		t.Fatalf("OnPush called %d times, want 2: %+v", len(pushes), pushes)
	}
	zero := strings.Repeat("0", 40)
	for i, want := range []RefUpdate{
		{Ref: "refs/heads/" + testBranch, Old: zero, New: first, OK: true},
		{Ref: "refs/heads/" + testBranch, Old: first, New: second, OK: true},
	} {
		p := pushes[i]
		if p.Session != "sess-abc" || p.Repo != testRepo || !p.Reported || p.Unpack != "ok" || len(p.Refs) != 1 || p.Refs[0] != want {
			t.Errorf("push %d: %+v, want one ref %+v", i, p, want)
		}
	}
}

// TestLargePushStreams: a push of a few MB (more than git's post buffer, so
// git probes the credentials and then sends the pack chunked) lands.
func TestLargePushStreams(t *testing.T) {
	h := newHarness(t)
	h.seed(testRepo)
	tok, _ := h.grant(h.repo(testRepo))
	dir := h.clone(tok, testRepo)
	big := make([]byte, 6<<20)
	rand.Read(big) // incompressible: the pack is as large
	sha := h.commit(dir, "big.bin", big)
	h.mustBox(tok, dir, "push", "-q", "origin", "HEAD:"+testBranch)
	if got := h.host(h.up.bare(testRepo), "rev-parse", testBranch); got != sha {
		t.Errorf("upstream %s is %s, want %s", testBranch, got, sha)
	}
	chunked := false
	for _, s := range h.up.seen() {
		if strings.HasSuffix(s.path, "/git-receive-pack") && s.method == http.MethodPost && s.length == -1 {
			chunked = true
		}
	}
	if !chunked {
		t.Errorf("the large push did not reach the upstream as a chunked body: %+v", h.up.seen())
	}
	if p := h.gotPushes(); len(p) != 1 || !p[0].Refs[0].OK {
		t.Errorf("OnPush: %+v, want one push that landed", p)
	}
}
