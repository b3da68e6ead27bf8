package cli

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/wire"
)

// TestGitHubCommenterSignsIn: Ada comments on an issue, and the session
// Harvest starts is her user's; then she signs in to harvest serve with
// GitHub (--github-client-id, --github-client-secret-file), through the
// stand-in's sign-in and authorization pages, and is that same user.
func TestGitHubCommenterSignsIn(t *testing.T) {
	g := newGHEnv(t)
	secret := filepath.Join(t.TempDir(), "client-secret")
	if err := os.WriteFile(secret, []byte(g.app.ClientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The server's public URL (serveArgs: http://harvest.example) is
	// where the App's callback is; the browser reaches it at the
	// server's address, as through a proxy.
	if err := g.gs.SetCallbackURLs(g.app.ID, []string{"http://harvest.example/v1/auth/github/callback"}); err != nil {
		t.Fatal(err)
	}
	e, s := g.serve(t, "--github-client-id", g.app.ClientID, "--github-client-secret-file", secret)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := e.client(s)

	started := adaAsks(t, ctx, g, admin)

	serveAddr := strings.TrimPrefix(s.url, "http://")
	jar, _ := cookiejar.New(nil)
	var landed *url.URL
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == "harvest.example:80" {
				addr = serveAddr
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Host == "harvest.example" && !strings.HasPrefix(req.URL.Path, "/v1/") {
				landed = req.URL
				return http.ErrUseLastResponse
			}
			return nil
		}}
	read := func(resp *http.Response, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	body := read(browser.Get("http://harvest.example/v1/auth/github"))
	ret := regexp.MustCompile(`name="return_to" value="([^"]*)"`).FindStringSubmatch(body)
	if ret == nil {
		t.Fatalf("want the stand-in's sign-in form: %s", body)
	}
	body = read(browser.PostForm(g.gs.URL()+"/session", url.Values{"login": {"ada"}, "return_to": {strings.ReplaceAll(ret[1], "&amp;", "&")}}))
	form := url.Values{"authorize": {"1"}}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`).FindAllStringSubmatch(body, -1) {
		form.Set(m[1], strings.ReplaceAll(m[2], "&amp;", "&"))
	}
	read(browser.PostForm(g.gs.URL()+"/login/oauth/authorize", form))
	if landed == nil || landed.Query().Get("signin_error") != "" {
		t.Fatalf("the sign-in landed on %v", landed)
	}
	me := read(browser.Get("http://harvest.example/v1/me"))
	var m wire.Me
	if err := json.Unmarshal([]byte(me), &m); err != nil || m.User == nil || m.SignedInVia != "github" {
		t.Fatalf("GET /v1/me: %s", me)
	}
	if m.User.ID != started.User {
		t.Fatalf("signed in as %s; the commenter's session is %s's: want the same user", m.User.ID, started.User)
	}
}

// adaAsks has ada comment "@harvest fix the failing test" on g's issue
// and returns the session it starts, once it names its user (admin lists
// every session).
func adaAsks(t *testing.T, ctx context.Context, g *ghEnv, admin *client.Client) *wire.Session {
	t.Helper()
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "@harvest fix the failing test"}); err != nil {
		t.Fatal(err)
	}
	var started *wire.Session
	testbin.WaitFor(t, time.Minute, "the session the comment started", func() bool {
		l, err := admin.ListSessions(ctx, client.ListOptions{})
		if err == nil && len(l) == 1 {
			started = l[0]
		}
		return started != nil && started.User != ""
	})
	return started
}
