package gitproxy

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// TestBoxEnv: the variables BoxEnv sets, for GitHub and an Enterprise
// server.
func TestBoxEnv(t *testing.T) {
	got := BoxEnv("127.0.0.1:4242", "harvest-git-TOKEN", "https://github.com", "https://ghe.example.com/")
	ep := "http://x-harvest:harvest-git-TOKEN@127.0.0.1:4242/"
	want := []string{"GIT_CONFIG_COUNT=7",
		"GIT_CONFIG_KEY_0=url." + ep + ".insteadOf", "GIT_CONFIG_VALUE_0=https://github.com/",
		"GIT_CONFIG_KEY_1=url." + ep + ".insteadOf", "GIT_CONFIG_VALUE_1=git@github.com:",
		"GIT_CONFIG_KEY_2=url." + ep + ".insteadOf", "GIT_CONFIG_VALUE_2=ssh://git@github.com/",
		"GIT_CONFIG_KEY_3=url." + ep + ".insteadOf", "GIT_CONFIG_VALUE_3=https://ghe.example.com/",
		"GIT_CONFIG_KEY_4=url." + ep + ".insteadOf", "GIT_CONFIG_VALUE_4=git@ghe.example.com:",
		"GIT_CONFIG_KEY_5=url." + ep + ".insteadOf", "GIT_CONFIG_VALUE_5=ssh://git@ghe.example.com/",
		"GIT_CONFIG_KEY_6=http.http://127.0.0.1:4242/.proxy", "GIT_CONFIG_VALUE_6=",
		"GIT_TERMINAL_PROMPT=0"}
	if !slices.Equal(got, want) {
		t.Errorf("BoxEnv:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestBoxEnvSpellings: every spelling of a GitHub remote reaches the proxy
// with the box's git (with and without .git, SSH forms).
func TestBoxEnvSpellings(t *testing.T) {
	h := newHarness(t)
	main := h.seed(testRepo)
	tok, _ := h.grant(h.repo(testRepo))
	for _, u := range []string{"https://github.com/owner/name.git", "https://github.com/owner/name",
		"git@github.com:owner/name.git", "ssh://git@github.com/owner/name.git", "https://github.com/Owner/Name.git"} {
		out := h.mustBox(tok, "", "ls-remote", u, "refs/heads/main")
		if !strings.HasPrefix(out, main) {
			t.Errorf("ls-remote %s: %q, want main at %s", u, out, main)
		}
	}
}

// TestListenerBound: a grant bound to a listener is refused on another one
// served by the same proxy, and through Handler.
func TestListenerBound(t *testing.T) {
	h := newHarness(t)
	h.seed(testRepo)
	r := h.repo(testRepo)
	tok, revoke := h.proxy.Grant(Grant{Session: "bound", Repos: []Repo{r}, Listener: h.ln})
	defer revoke()
	h.mu.Lock()
	h.tokens = append(h.tokens, tok)
	h.mu.Unlock()
	if _, errOut, err := h.box(tok, "", "ls-remote", "https://github.com/owner/name.git"); err != nil {
		t.Fatalf("on its listener: %v\n%s", err, errOut)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- h.proxy.Serve(ctx, ln) }()
	defer func() {
		cancel()
		<-served
	}()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/owner/name.git/info/refs?service=git-upload-pack", nil)
	req.SetBasicAuth(TokenUser, tok)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized || res.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("on another listener: %d %q, want 401 with WWW-Authenticate", res.StatusCode, res.Header.Get("WWW-Authenticate"))
	}

	rec := httptest.NewRecorder()
	direct := httptest.NewRequest(http.MethodGet, "/owner/name.git/info/refs?service=git-upload-pack", nil)
	direct.SetBasicAuth(TokenUser, tok)
	h.proxy.Handler().ServeHTTP(rec, direct)
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("through Handler: %d, want 401", rec.Code)
	}
}
