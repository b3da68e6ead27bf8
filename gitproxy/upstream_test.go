package gitproxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUpstreamDeclines: a push the policy allows but the upstream's own
// hook declines fails in the box with the upstream's message, and OnPush
// reports it as not landed.
func TestUpstreamDeclines(t *testing.T) {
	h := newHarness(t)
	h.seed(testRepo)
	hook := filepath.Join(h.up.bare(testRepo), "hooks", "pre-receive")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho 'upstream says: branch rules forbid this' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tok, _ := h.grant(h.repo(testRepo))
	dir := h.clone(tok, testRepo)
	sha := h.commit(dir, "a", []byte("a\n"))
	before := h.refs(testRepo)
	_, stderr, err := h.box(tok, dir, "push", "origin", "HEAD:"+testBranch)
	if err == nil {
		t.Fatalf("the push succeeded:\n%s", stderr)
	}
	for _, w := range []string{"remote: upstream says: branch rules forbid this", "[remote rejected] HEAD -> harvest/sess-abc (pre-receive hook declined)"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("git's stderr lacks %q:\n%s", w, stderr)
		}
	}
	if got := h.refs(testRepo); got != before {
		t.Errorf("upstream refs changed: %s", got)
	}
	pushes := h.gotPushes()
	if len(pushes) != 1 {
		t.Fatalf("OnPush: %+v, want one push", pushes)
	}
	want := RefUpdate{Ref: "refs/heads/" + testBranch, Old: strings.Repeat("0", 40), New: sha, Reason: "pre-receive hook declined"}
	if p := pushes[0]; !p.Reported || p.Unpack != "ok" || len(p.Refs) != 1 || p.Refs[0] != want {
		t.Errorf("OnPush: %+v, want %+v not landed", p, want)
	}
	if r := h.gotRefusals(); len(r) != 0 {
		t.Errorf("OnRefuse called for the upstream's refusal: %+v", r)
	}
}

// TestGzipFetch: git gzips a large upload-pack request (many wants); it
// goes through as sent and the clone works.
func TestGzipFetch(t *testing.T) {
	h := newHarness(t)
	var branches []string
	for i := range 40 {
		branches = append(branches, fmt.Sprintf("topic/branch-with-a-long-name-%02d", i))
	}
	h.seed(testRepo, branches...)
	work := h.clone(mustGrant(h), testRepo)
	// Give each branch its own commit, so the fetch wants 40 objects.
	for _, b := range branches {
		h.host(work, "checkout", "-q", "-B", b, "origin/main")
		h.commit(work, b[len(b)-2:], []byte(b))
	}
	h.host(work, "push", "-q", h.up.bare(testRepo), "--all")

	tok, _ := h.grant(h.repo(testRepo))
	dir := h.clone(tok, testRepo)
	if got := h.mustBox(tok, dir, "branch", "-r"); strings.Count(got, "topic/") != 40 {
		t.Errorf("the clone has remote branches\n%s\nwant 40 topics", got)
	}
	gz := false
	for _, s := range h.up.seen() {
		gz = gz || (strings.HasSuffix(s.path, "/git-upload-pack") && s.encoding == "gzip")
	}
	if !gz {
		t.Errorf("no gzip'd upload-pack request reached the upstream: %+v", h.up.seen())
	}
}

func mustGrant(h *harness) string {
	tok, _ := h.grant(h.repo(testRepo))
	return tok
}

// TestGzipPushRefused: a gzip'd receive-pack request (git does not gzip
// pushes, other clients may) is decoded for the policy, and refused in
// git's shape, with side-band.
func TestGzipPushRefused(t *testing.T) {
	h := newHarness(t)
	h.seed(testRepo)
	tok, _ := h.grant(h.repo(testRepo))
	var cmds []byte
	zero, one := strings.Repeat("0", 40), strings.Repeat("1", 40)
	cmds = appendPkt(cmds, []byte(zero+" "+one+" refs/heads/main\x00report-status side-band-64k agent=test\n"))
	cmds = appendFlush(cmds)
	cmds = append(cmds, "PACK-not-really"...)
	var body bytes.Buffer
	zw := gzip.NewWriter(&body)
	zw.Write(cmds)
	zw.Close()

	req, _ := http.NewRequest(http.MethodPost, "http://"+h.addr+"/owner/name.git/git-receive-pack", &body)
	req.SetBasicAuth(TokenUser, tok)
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	got, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/x-git-receive-pack-result" {
		t.Errorf("status %d, type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	reason := "harvest: pushing to the default branch main is not allowed; push to harvest/sess-abc"
	var want []byte
	want = appendBand(want, 2, []byte(reason+"\n"))
	var report []byte
	report = appendPkt(report, []byte("unpack ok\n"))
	report = appendPkt(report, []byte("ng refs/heads/main "+reason+"\n"))
	report = appendFlush(report)
	want = appendBand(want, 1, report)
	want = appendFlush(want)
	if !bytes.Equal(got, want) {
		t.Errorf("answer\n%q\nwant\n%q", got, want)
	}
	if n := h.up.receivePacks(); n != 0 {
		t.Errorf("%d pushes reached the upstream", n)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestTokenScrubbed: an upstream answer that echoes the credential reaches
// the box masked (the harness checks that the token is nowhere the box
// can see, nor in the log).
func TestTokenScrubbed(t *testing.T) {
	h := newHarness(t)
	h.seed(testRepo)
	tok, _ := h.grant(h.repo(testRepo))
	h.up.mu.Lock()
	h.up.leak = true
	h.up.mu.Unlock()
	_, stderr, err := h.box(tok, "", "clone", "https://github.com/owner/name.git", filepath.Join(t.TempDir(), "w"))
	if err == nil {
		t.Fatal("the clone succeeded")
	}
	if !strings.Contains(stderr, "remote: upstream: you sent ******") {
		t.Errorf("git's stderr does not show the masked echo:\n%s", stderr)
	}
}

// TestPushStreams: the proxy forwards a push's pack as it arrives: the
// upstream has the commands and the first bytes of the pack while the box
// is still sending the rest.
func TestPushStreams(t *testing.T) {
	got := make(chan []byte, 1)
	release := make(chan struct{})
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 4096)
		n, _ := io.ReadAtLeast(r.Body, buf, 100)
		got <- buf[:n]
		<-release
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
		var report []byte
		report = appendPkt(report, []byte("unpack ok\n"))
		report = appendPkt(report, []byte("ok refs/heads/"+testBranch+"\n"))
		w.Write(appendFlush(report))
	})}
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upDone := make(chan struct{})
	go func() { defer close(upDone); up.Serve(upLn) }()
	defer func() { up.Close(); <-upDone }()

	pushed := make(chan Push, 1)
	p := New(Config{})
	tok, revoke := p.Grant(Grant{Session: "s", Repos: []Repo{{Path: testRepo, URL: "http://" + upLn.Addr().String() + "/owner/name.git",
		DefaultBranch: "main", Branches: []string{testBranch}}}, OnPush: func(x Push) { pushed <- x }})
	defer revoke()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	pr, pw := io.Pipe()
	zero, one := strings.Repeat("0", 40), strings.Repeat("1", 40)
	var head []byte
	head = appendPkt(head, []byte(zero+" "+one+" refs/heads/"+testBranch+"\x00report-status\n"))
	head = appendFlush(head)
	head = append(head, "PACK"+strings.Repeat("x", 200)...)
	req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/owner/name.git/git-receive-pack", pr)
	req.SetBasicAuth(TokenUser, tok)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	done := make(chan error, 1)
	go func() {
		res, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		done <- err
	}()
	pw.Write(head)
	select {
	case b := <-got:
		if !bytes.HasPrefix(b, head[:50]) {
			t.Errorf("the upstream got %q first", b)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the upstream got nothing while the box was still sending")
	}
	pw.Write([]byte(strings.Repeat("y", 1<<20)))
	pw.Close()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if x := <-pushed; len(x.Refs) != 1 || !x.Refs[0].OK {
		t.Errorf("OnPush: %+v", x)
	}
}

// TestUpstreamCredentialFails: when Harvest cannot get the upstream
// credential, the box's git gets a 502 with a message, not a password
// prompt, and nothing reaches the upstream.
func TestUpstreamCredentialFails(t *testing.T) {
	h := newHarness(t)
	h.seed(testRepo)
	r := h.repo(testRepo)
	r.Token = func(context.Context) (string, error) { return "", fmt.Errorf("installation token: GitHub said 500") }
	tok, _ := h.grant(r)
	_, stderr, err := h.box(tok, "", "clone", "https://github.com/owner/name.git", filepath.Join(t.TempDir(), "w"))
	if err == nil {
		t.Fatal("the clone succeeded")
	}
	for _, w := range []string{"remote: harvest: could not get a credential for owner/name's upstream; try again", "error: 502"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("git's stderr lacks %q:\n%s", w, stderr)
		}
	}
	if n := len(h.up.seen()); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
	if !strings.Contains(h.logs.String(), "installation token: GitHub said 500") {
		t.Errorf("the log lacks the cause:\n%s", h.logs.String())
	}
}
