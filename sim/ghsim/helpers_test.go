package ghsim_test

import (
	"context"
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sim/ghsim"
)

// clock is a settable clock for token expiry and JWT checks.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// received is one webhook the test receiver got.
type received struct {
	Header http.Header
	Body   []byte
	SigOK  bool
}

// receiver is a webhook endpoint that checks signatures and keeps what it got.
type receiver struct {
	srv    *httptest.Server
	secret string
	mu     sync.Mutex
	got    []received
	status int
}

func newReceiver(t *testing.T, secret string) *receiver {
	rc := &receiver{secret: secret, status: http.StatusAccepted}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		m := hmac.New(sha256.New, []byte(rc.secret))
		m.Write(b)
		want := "sha256=" + hex.EncodeToString(m.Sum(nil))
		rc.mu.Lock()
		rc.got = append(rc.got, received{Header: r.Header.Clone(), Body: b, SigOK: hmac.Equal([]byte(want), []byte(r.Header.Get("X-Hub-Signature-256")))})
		status := rc.status
		rc.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) all() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// world is a stand-in with an App installed on acme, a repository
// acme/widget (main and a feature branch), and people.
type world struct {
	srv     *ghsim.Server
	clock   *clock
	hooks   *receiver
	app     ghsim.App
	key     *rsa.PrivateKey
	instID  int64
	repo    ghsim.Repo
	alice   ghsim.User // admin of acme/widget
	bob     ghsim.User // read
	mallory ghsim.User // none (the repo is private)
	srcDir  string
}

const hookSecret = "s3cret"

func newWorld(t *testing.T, opts ghsim.Options) *world {
	t.Helper()
	w := &world{clock: &clock{t: time.Now().Truncate(time.Second)}}
	w.hooks = newReceiver(t, hookSecret)
	if opts.Now == nil {
		opts.Now = w.clock.Now
	}
	srv, err := ghsim.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	w.srv = srv
	w.app, err = srv.CreateApp(ghsim.AppSpec{Slug: "harvest-test", WebhookURL: w.hooks.srv.URL, WebhookSecret: hookSecret})
	if err != nil {
		t.Fatal(err)
	}
	if w.key, err = ghsim.ParsePrivateKey([]byte(w.app.PrivateKeyPEM)); err != nil {
		t.Fatal(err)
	}
	if w.instID, err = srv.CreateInstallation(ghsim.InstallationSpec{AppID: w.app.ID, Account: "acme"}); err != nil {
		t.Fatal(err)
	}
	w.srcDir = makeSource(t)
	if w.repo, err = srv.CreateRepo(context.Background(), ghsim.RepoSpec{Owner: "acme", Name: "widget", Dir: w.srcDir, Private: true}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []struct {
		dst  *ghsim.User
		name string
		perm ghsim.Permission
	}{{&w.alice, "alice", ghsim.PermAdmin}, {&w.bob, "bob", ghsim.PermRead}, {&w.mallory, "mallory", ghsim.PermNone}} {
		if *u.dst, err = srv.AddUser(ghsim.UserSpec{Login: u.name}); err != nil {
			t.Fatal(err)
		}
		if err := srv.SetPermission(ghsim.PermissionSpec{Repo: "acme/widget", Login: u.name, Permission: u.perm}); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// runGit runs the git CLI with no system or global configuration.
func runGit(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.com", "GIT_COMMITTER_NAME=Test",
		"GIT_COMMITTER_EMAIL=test@example.com", "GIT_ASKPASS=", "SSH_ASKPASS=", "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := runGit(t, dir, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(out)
}

// makeSource makes a work tree: main with app.go, and branch feature
// changing lines 3 and 4 and adding line 11.
func makeSource(t *testing.T) string {
	dir := t.TempDir()
	mustGit(t, dir, "init", "-q", "-b", "main")
	var b strings.Builder
	for i := 1; i <= 10; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	os.WriteFile(filepath.Join(dir, "app.go"), []byte(b.String()), 0o644)
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("# widget\n"), 0o644)
	mustGit(t, dir, "add", ".")
	mustGit(t, dir, "commit", "-q", "-m", "first")
	mustGit(t, dir, "checkout", "-q", "-b", "feature")
	s := strings.Replace(b.String(), "line 3\nline 4\n", "line three\nline four\n", 1) + "line 11\n"
	os.WriteFile(filepath.Join(dir, "app.go"), []byte(s), 0o644)
	mustGit(t, dir, "commit", "-q", "-am", "feature work")
	mustGit(t, dir, "checkout", "-q", "main")
	return dir
}

// jwt signs an App JWT as GitHub's docs describe.
func jwt(t *testing.T, key *rsa.PrivateKey, appID int64, iat, exp time.Time) string {
	t.Helper()
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	head := enc(map[string]string{"alg": "RS256", "typ": "JWT"})
	claims := enc(map[string]any{"iat": iat.Unix(), "exp": exp.Unix(), "iss": fmt.Sprint(appID)})
	sum := sha256.Sum256([]byte(head + "." + claims))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return head + "." + claims + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func (w *world) jwt(t *testing.T) string {
	now := w.clock.Now()
	return jwt(t, w.key, w.app.ID, now.Add(-60*time.Second), now.Add(9*time.Minute))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// doJSON sends a REST request with an Authorization header and decodes.
func doJSON(t *testing.T, method, url, auth string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req, _ := http.NewRequest(method, url, rd)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	json.Unmarshal(raw, &out)
	if op, ok := matchOperation(method, req.URL.EscapedPath()); ok {
		var rb []byte
		if body != nil {
			rb, _ = json.Marshal(body)
		}
		if err := validateREST(t, op, resp.StatusCode, rb, raw); err != nil {
			t.Errorf("%s %s: %v", method, url, err)
		}
	}
	return resp.StatusCode, out
}
