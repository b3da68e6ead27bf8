package workspace

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
)

// waitGone waits (bounded) until no process mentions s.
func waitGone(t *testing.T, s string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for len(testbin.ProcsWith(s)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("processes of the clone survive it: %q", testbin.ProcsWith(s))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCloneCancel: a clone from a server that never answers ends as soon as
// its context does, with every process it started (git and its
// git-remote-http helper, which used to hold the output pipe open).
func TestCloneCancel(t *testing.T) {
	url, accepted := testbin.HangingGitServer(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	dst := filepath.Join(t.TempDir(), "app")
	go func() {
		_, err := Prepare(ctx, Source{URL: url}, dst, Owner{}, CloneOptions{})
		done <- err
	}()
	// Wait until git's helper waits for the server's answer, then cancel.
	select {
	case <-accepted:
	case err := <-done:
		t.Fatalf("the clone ended before connecting: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("no connection from the clone: %q", testbin.ProcsWith(url))
	}
	if !strings.Contains(strings.Join(testbin.ProcsWith(url), "\n"), "remote-http") {
		t.Fatalf("no git-remote-http for %s: %q", url, testbin.ProcsWith(url))
	}
	start := time.Now()
	errGone := errors.New("the session was deleted")
	cancel(errGone)
	select {
	case err := <-done:
		if !errors.Is(err, errGone) {
			t.Errorf("the clone ended with %v, want the cancel's cause", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the clone did not end 10 s after its context")
	}
	t.Logf("cancel to clone returned: %s", time.Since(start))
	waitGone(t, url, 2*time.Second)
	if _, err := os.Lstat(dst); err == nil {
		t.Error("a cancelled clone left its directory")
	}
}

// TestCloneStall: a server that never answers fails the clone after the
// stall timeout, saying so.
func TestCloneStall(t *testing.T) {
	url, _ := testbin.HangingGitServer(t)
	_, err := Prepare(context.Background(), Source{URL: url}, filepath.Join(t.TempDir(), "app"), Owner{}, CloneOptions{Stall: time.Second, Timeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "less than 1 KiB/s for 1s") {
		t.Fatalf("got %v, want the stall explained", err)
	}
	waitGone(t, url, 2*time.Second)
	_, err = Prepare(context.Background(), Source{URL: url}, filepath.Join(t.TempDir(), "app"), Owner{}, CloneOptions{Stall: time.Minute, Timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "took longer than 1s") {
		t.Fatalf("got %v, want the timeout explained", err)
	}
	waitGone(t, url, 2*time.Second)
}

// TestCloneIsolated: a clone sees none of the host's git configuration (a
// global config that would rewrite the URL) and only its URL's protocol.
func TestCloneIsolated(t *testing.T) {
	src := filepath.Join(t.TempDir(), "origin")
	git(t, "", "init", "-q", "-b", "main", src)
	os.WriteFile(filepath.Join(src, "a.txt"), []byte("a\n"), 0o644)
	git(t, src, "add", "a.txt")
	git(t, src, "-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-q", "-m", "first")

	home := t.TempDir()
	t.Setenv("HOME", home)
	// A host config that would send the clone elsewhere, and a credential
	// helper that would run: neither may apply.
	os.WriteFile(filepath.Join(home, ".gitconfig"), []byte("[url \"file:///nonexistent/\"]\n\tinsteadOf = file://"+src+"\n[credential]\n\thelper = !touch "+home+"/helper-ran\n"), 0o644)
	t.Setenv("GIT_CONFIG_GLOBAL", filepath.Join(home, ".gitconfig"))
	dst := filepath.Join(t.TempDir(), "app")
	if _, err := Prepare(context.Background(), Source{URL: "file://" + src}, dst, Owner{}, CloneOptions{}); err != nil {
		t.Fatalf("clone: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "a.txt")); err != nil || string(b) != "a\n" {
		t.Fatalf("the clone's a.txt: %q %v", b, err)
	}
	if out := git(t, dst, "remote"); out != "" {
		t.Errorf("the clone kept a remote: %q", out)
	}
	// ext:: runs a command: never allowed, whatever the URL says.
	_, err := Prepare(context.Background(), Source{URL: "ext::sh -c touch% " + home + "/pwned"}, filepath.Join(t.TempDir(), "x"), Owner{}, CloneOptions{})
	if err == nil {
		t.Fatal("an ext:: clone succeeded")
	}
	if _, err := os.Stat(filepath.Join(home, "pwned")); err == nil {
		t.Fatal("an ext:: URL ran its command")
	}
}

// TestCloneRefusesRedirect: a git server that redirects the clone
// elsewhere (where a metadata service or a private host would be) fails
// the clone with the reason, and the clone never reaches the target.
func TestCloneRefusesRedirect(t *testing.T) {
	var reached atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		http.Error(w, "not here", http.StatusNotFound)
	}))
	defer target.Close()
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL+r.URL.Path+"?"+r.URL.RawQuery, code)
		}))
		_, err := Prepare(context.Background(), Source{URL: redirector.URL + "/app.git"}, filepath.Join(t.TempDir(), "app"), Owner{}, CloneOptions{Timeout: time.Minute})
		redirector.Close()
		if err == nil || !strings.Contains(err.Error(), "redirect, which Harvest does not follow") {
			t.Errorf("%d: got %v, want the redirect refused and explained", code, err)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the redirect's target got %d requests, want 0", n)
	}
}
