package gitproxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
)

// The tests run the real thing on loopback: git http-backend (through
// net/http/cgi) on bare repositories in a temporary directory is the
// upstream, behind a check that every request carries exactly the
// upstream token as Basic x-access-token; the proxy is served by Serve on a
// port-0 listener that records every byte it sends to the box; and the
// box's git is the real git client, configured only by BoxEnv, with origin
// https://github.com/owner/name.git. Each harness checks at the end that
// the upstream token was never sent to the box or logged, and that no box
// token was logged.

const (
	testRepo   = "owner/name"
	testBranch = "harvest/sess-abc"
)

// upstream is git http-backend serving the bare repositories under root.
type upstream struct {
	t     testing.TB
	root  string
	token string
	srv   *httptest.Server
	cgi   http.Handler

	mu         sync.Mutex
	requests   []seen
	violations []string
	leak       bool // answer info/refs with a 403 that echoes the credential
}

// seen is a request as the upstream got it.
type seen struct {
	method, path, query, encoding, protocol string
	length                                  int64
}

func newUpstream(t testing.TB, home string) *upstream {
	t.Helper()
	gitExec, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	up := &upstream{t: t, root: t.TempDir(), token: canary()}
	up.cgi = &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(gitExec)), "git-http-backend"),
		Root: "/",
		Env: []string{"GIT_PROJECT_ROOT=" + up.root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1",
			"GIT_CONFIG_GLOBAL=/dev/null", "HOME=" + home},
	}
	up.srv = httptest.NewServer(http.HandlerFunc(up.serve))
	t.Cleanup(up.srv.Close)
	return up
}

// canary returns a token that looks like an installation token and is
// unique to the test: if it is ever found where the box can see it, it
// came from the proxy.
func canary() string {
	var b [20]byte
	rand.Read(b[:])
	return "ghs_CANARY" + hex.EncodeToString(b[:])
}

func (up *upstream) serve(w http.ResponseWriter, r *http.Request) {
	up.mu.Lock()
	up.requests = append(up.requests, seen{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery,
		encoding: r.Header.Get("Content-Encoding"), protocol: r.Header.Get("Git-Protocol"), length: r.ContentLength})
	leak := up.leak
	up.mu.Unlock()
	user, pass, ok := r.BasicAuth()
	if !ok || user != "x-access-token" || pass != up.token {
		up.mu.Lock()
		up.violations = append(up.violations, fmt.Sprintf("%s %s: credentials %q %q, want the upstream token", r.Method, r.URL.Path, user, pass))
		up.mu.Unlock()
		w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
		http.Error(w, "upstream: bad credentials", http.StatusUnauthorized)
		return
	}
	if leak {
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		http.Error(w, "upstream: you sent "+pass+" as "+r.Header.Get("Authorization"), http.StatusForbidden)
		return
	}
	if r.ContentLength < 0 && r.Body != nil {
		// Go's CGI handler refuses chunked bodies; git http-backend behind
		// a real web server takes them. Buffer here (the test's upstream
		// only): the proxy streamed it.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
	}
	up.cgi.ServeHTTP(w, r)
}

func (up *upstream) seen() []seen {
	up.mu.Lock()
	defer up.mu.Unlock()
	return append([]seen(nil), up.requests...)
}

// receivePacks counts the pushes that reached the upstream.
func (up *upstream) receivePacks() int {
	n := 0
	for _, s := range up.seen() {
		if s.method == http.MethodPost && strings.HasSuffix(s.path, "/git-receive-pack") {
			n++
		}
	}
	return n
}

// url is the upstream smart-HTTP URL of repo.
func (up *upstream) url(repo string) string { return up.srv.URL + "/" + repo + ".git" }

// bare is the directory of repo's bare repository.
func (up *upstream) bare(repo string) string { return filepath.Join(up.root, repo+".git") }

// harness is an upstream, a proxy in front of it, and a box-side git.
type harness struct {
	t       testing.TB
	home    string
	up      *upstream
	proxy   *Proxy
	ln      net.Listener
	addr    string
	sent    testbin.Buffer // every byte the proxy sent to the box
	logs    testbin.Buffer
	mu      sync.Mutex
	tokens  []string
	pushes  []Push
	refused []Refusal
	stderr  []string // every git command's stderr
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		testreq.Unavailable(t, testreq.Git, "git is not installed")
	}
	h := &harness{t: t, home: t.TempDir()}
	h.up = newUpstream(t, h.home)
	h.proxy = New(Config{Logger: slog.New(slog.NewTextHandler(&h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.ln = &tapListener{Listener: ln, buf: &h.sent}
	h.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- h.proxy.Serve(ctx, h.ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		h.checkLeaks()
	})
	return h
}

// checkLeaks: the upstream token (or its Basic form) in nothing sent to the
// box, in no log line and no git output; no box token in the log; every
// upstream request had the upstream token.
func (h *harness) checkLeaks() {
	t := h.t
	basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + h.up.token))
	_, core, _ := strings.Cut(h.up.token, "CANARY")
	sent, logs := h.sent.String(), h.logs.String()
	h.mu.Lock()
	stderr := strings.Join(h.stderr, "\n")
	tokens := append([]string(nil), h.tokens...)
	h.mu.Unlock()
	for _, secret := range []string{h.up.token, core, basic} {
		if strings.Contains(sent, secret) {
			t.Errorf("the upstream token was sent to the box")
		}
		if strings.Contains(logs, secret) {
			t.Errorf("the upstream token is in the proxy's log")
		}
		if strings.Contains(stderr, secret) {
			t.Errorf("the upstream token is in git's output")
		}
	}
	for _, tok := range tokens {
		if strings.Contains(logs, tok) {
			t.Errorf("a box token is in the proxy's log")
		}
	}
	h.up.mu.Lock()
	for _, v := range h.up.violations {
		t.Errorf("upstream: %s", v)
	}
	h.up.mu.Unlock()
	if t.Failed() {
		t.Logf("proxy log:\n%s", logs)
	}
}

// repo is the usual grant of testRepo: push to testBranch, default main.
func (h *harness) repo(path string) Repo {
	return Repo{
		Path: path, URL: h.up.url(path), DefaultBranch: "main", Branches: []string{testBranch},
		Token: func(context.Context) (string, error) { return h.up.token, nil },
	}
}

// grant registers repos for session "sess-abc" and returns its token,
// revoked when the test ends.
func (h *harness) grant(repos ...Repo) (string, func()) {
	tok, revoke := h.proxy.Grant(Grant{
		Session: "sess-abc", Repos: repos,
		OnPush: func(p Push) {
			h.mu.Lock()
			h.pushes = append(h.pushes, p)
			h.mu.Unlock()
		},
		OnRefuse: func(r Refusal) {
			h.mu.Lock()
			h.refused = append(h.refused, r)
			h.mu.Unlock()
		},
	})
	h.t.Cleanup(revoke)
	h.mu.Lock()
	h.tokens = append(h.tokens, tok)
	h.mu.Unlock()
	return tok, revoke
}

func (h *harness) gotPushes() []Push {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Push(nil), h.pushes...)
}

func (h *harness) gotRefusals() []Refusal {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Refusal(nil), h.refused...)
}

// hostEnv is the environment of every git the tests run: no system or
// global configuration.
func (h *harness) hostEnv() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + h.home, "LANG=C", "LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=Agent", "GIT_AUTHOR_EMAIL=agent@example.com",
		"GIT_COMMITTER_NAME=Agent", "GIT_COMMITTER_EMAIL=agent@example.com"}
}

// run runs git in dir with env; it returns stdout and stderr.
func (h *harness) run(env []string, dir string, args ...string) (string, string, error) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	h.mu.Lock()
	h.stderr = append(h.stderr, stderr.String(), stdout.String())
	h.mu.Unlock()
	return stdout.String(), stderr.String(), err
}

// host runs git on the host (seeding and inspecting the upstream); it
// fails the test if git fails.
func (h *harness) host(dir string, args ...string) string {
	h.t.Helper()
	out, errOut, err := h.run(h.hostEnv(), dir, args...)
	if err != nil {
		h.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return strings.TrimSpace(out)
}

// box runs git as the box does: the host environment plus BoxEnv for
// token, and a proxy for HTTP that must not be used (the egress proxy of a
// real box).
func (h *harness) box(token, dir string, args ...string) (string, string, error) {
	h.t.Helper()
	env := append(h.hostEnv(), "http_proxy=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "https_proxy=http://127.0.0.1:9")
	env = append(env, BoxEnv(h.addr, token)...)
	return h.run(env, dir, args...)
}

// mustBox is box that fails the test when git does.
func (h *harness) mustBox(token, dir string, args ...string) string {
	h.t.Helper()
	out, errOut, err := h.box(token, dir, args...)
	if err != nil {
		h.t.Fatalf("box git %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return strings.TrimSpace(out)
}

// seed makes repo a bare repository upstream, accepting pushes, with a
// commit on main; it returns main's sha.
func (h *harness) seed(repo string, branches ...string) string {
	h.t.Helper()
	bare := h.up.bare(repo)
	os.MkdirAll(filepath.Dir(bare), 0o755)
	h.host("", "init", "-q", "--bare", "-b", "main", bare)
	h.host(bare, "config", "http.receivepack", "true")
	work := h.t.TempDir()
	h.host(work, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(work, "README"), []byte("hello\n"), 0o644)
	h.host(work, "add", ".")
	h.host(work, "commit", "-q", "-m", "initial")
	for _, b := range branches {
		h.host(work, "branch", b)
	}
	h.host(work, "push", "-q", bare, "--all")
	return h.host(work, "rev-parse", "HEAD")
}

// refs lists the upstream's refs of repo.
func (h *harness) refs(repo string) string {
	return h.host(h.up.bare(repo), "for-each-ref", "--format=%(refname) %(objectname)")
}

// clone clones https://github.com/<repo>.git in the box and returns the
// work tree.
func (h *harness) clone(token, repo string) string {
	h.t.Helper()
	dir := filepath.Join(h.t.TempDir(), "work")
	h.mustBox(token, "", "clone", "-q", "https://github.com/"+repo+".git", dir)
	return dir
}

// commit adds a commit to the work tree with a file of content.
func (h *harness) commit(dir, name string, content []byte) string {
	h.t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
		h.t.Fatal(err)
	}
	h.host(dir, "add", name)
	h.host(dir, "commit", "-q", "-m", "add "+name)
	return h.host(dir, "rev-parse", "HEAD")
}

// tapListener records every byte the server writes to its clients.
type tapListener struct {
	net.Listener
	buf *testbin.Buffer
}

func (l *tapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &tapConn{Conn: c, buf: l.buf}, nil
}

type tapConn struct {
	net.Conn
	buf *testbin.Buffer
}

func (c *tapConn) Write(b []byte) (int, error) {
	c.buf.Write(b)
	return c.Conn.Write(b)
}
