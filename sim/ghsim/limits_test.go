package ghsim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/sim/ghsim/ghschema"
)

// rawReq sends an authenticated REST request and returns its answer,
// headers included, with the body's message.
func rawReq(t *testing.T, method, url, auth string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctxT(t), method, url, nil)
	req.Header.Set("Authorization", auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Message string `json:"message"`
	}
	json.Unmarshal(b, &e)
	return resp, e.Message
}

// TestLimitsAndInstallationsOverHTTP: through the JSON control API only:
// the rate-limit headers on every answer, a primary limit used up until
// its reset, a secondary limit (429 with Retry-After, and git refused
// too; 403 without one), a 5xx and a slow answer on demand; suspending,
// unsuspending, taking a repository out of an installation, accepting
// fewer permissions and deleting it, each as GitHub answers it. Every
// answer and webhook validates against GitHub's descriptions.
func TestLimitsAndInstallationsOverHTTP(t *testing.T) {
	w := newWorld(t, ghsim.Options{})
	c := ctl{t: t, base: w.srv.URL() + "/_sim/github/"}
	tok, err := w.srv.Token(w.instID)
	if err != nil {
		t.Fatal(err)
	}
	repo := w.srv.URL() + "/api/v3/repos/acme/widget"
	auth := "token " + tok
	inst := map[string]any{"installation_id": w.instID}
	with := func(m map[string]any, kv ...any) map[string]any {
		out := map[string]any{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}

	// The headers, counting down.
	r1, _ := rawReq(t, "GET", repo, auth)
	r2, _ := rawReq(t, "GET", repo, auth)
	h1, h2 := r1.Header, r2.Header
	reset, _ := strconv.ParseInt(h1.Get("X-Ratelimit-Reset"), 10, 64)
	if r1.StatusCode != 200 || h1.Get("X-Ratelimit-Limit") != "5000" || h1.Get("X-Ratelimit-Remaining") != "4999" ||
		h1.Get("X-Ratelimit-Used") != "1" || h1.Get("X-Ratelimit-Resource") != "core" || reset < w.clock.Now().Unix() ||
		h2.Get("X-Ratelimit-Remaining") != "4998" {
		t.Fatalf("rate-limit headers: %v then %v", h1, h2)
	}

	// The primary limit, used up until its reset.
	c.ok("POST", "rate-limits", with(inst, "limit", 10, "remaining", 1, "reset_in", 20), nil)
	if r, _ := rawReq(t, "GET", repo, auth); r.StatusCode != 200 || r.Header.Get("X-Ratelimit-Remaining") != "0" {
		t.Fatalf("the last request of the hour: %d %v", r.StatusCode, r.Header)
	}
	r, msg := rawReq(t, "GET", repo, auth)
	if want := fmt.Sprintf("API rate limit exceeded for installation ID %d.", w.instID); r.StatusCode != 403 || msg != want || r.Header.Get("X-Ratelimit-Remaining") != "0" {
		t.Fatalf("past the limit: %d %q %v; want 403 %q", r.StatusCode, msg, r.Header, want)
	}
	w.clock.Advance(21 * time.Second)
	if r, _ := rawReq(t, "GET", repo, auth); r.StatusCode != 200 || r.Header.Get("X-Ratelimit-Remaining") != "9" {
		t.Fatalf("after the reset: %d %v", r.StatusCode, r.Header)
	}

	// A secondary limit: REST and git refused until it ends.
	c.ok("POST", "secondary-limits", with(inst, "for", 10, "status", 429), nil)
	r, msg = rawReq(t, "GET", repo, auth)
	if r.StatusCode != 429 || r.Header.Get("Retry-After") != "10" || !strings.HasPrefix(msg, "You have exceeded a secondary rate limit") {
		t.Fatalf("inside a secondary limit: %d %q %v", r.StatusCode, msg, r.Header)
	}
	gitURL := strings.Replace(w.srv.URL(), "http://", "http://x-access-token:"+tok+"@", 1) + "/acme/widget.git"
	out, err := exec.Command("git", "ls-remote", gitURL).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "429") {
		t.Errorf("git inside a secondary limit: %v %s; want a 429", err, out)
	}
	w.clock.Advance(10 * time.Second)
	if r, _ := rawReq(t, "GET", repo, auth); r.StatusCode != 200 {
		t.Fatalf("after the secondary limit: %d", r.StatusCode)
	}
	if out, err := exec.Command("git", "ls-remote", gitURL).CombinedOutput(); err != nil {
		t.Errorf("git after the secondary limit: %v %s", err, out)
	}
	c.ok("POST", "secondary-limits", with(inst, "for", 5, "no_retry_after", true), nil)
	if r, msg := rawReq(t, "GET", repo, auth); r.StatusCode != 403 || r.Header.Get("Retry-After") != "" || !strings.Contains(msg, "secondary rate limit") {
		t.Fatalf("a secondary limit without Retry-After: %d %q %v", r.StatusCode, msg, r.Header)
	}
	w.clock.Advance(5 * time.Second)

	// Faults: a 503, then a slow answer.
	c.ok("POST", "faults", map[string]any{"status": 503, "count": 1, "path": "/repos/acme/widget", "method": "GET"}, nil)
	if r, _ := rawReq(t, "GET", repo, auth); r.StatusCode != 503 {
		t.Fatalf("a planned 503: %d", r.StatusCode)
	}
	c.ok("POST", "faults", map[string]any{"delay_ms": 300, "count": 1}, nil)
	start := time.Now()
	if r, _ := rawReq(t, "GET", repo, auth); r.StatusCode != 200 || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("a planned slow answer: %d after %s", r.StatusCode, time.Since(start))
	}
	if r, _ := rawReq(t, "GET", repo, auth); r.StatusCode != 200 {
		t.Fatalf("after the faults: %d", r.StatusCode)
	}

	// Bad input: 400; an unknown installation: 404.
	for _, bad := range []struct {
		path string
		body any
		want int
	}{
		{"rate-limits", with(inst, "login", "alice", "remaining", 0, "reset_in", 5), 400},
		{"rate-limits", with(inst, "remaining", 0), 400},
		{"rate-limits", map[string]any{"installation_id": 99999, "remaining": 0, "reset_in": 5}, 404},
		{"secondary-limits", with(inst, "for", 0), 400},
		{"secondary-limits", with(inst, "for", 5, "status", 500), 400},
		{"faults", map[string]any{"status": 404, "count": 1}, 400},
		{"faults", map[string]any{"status": 500}, 400},
		{"installations/99999/suspend", nil, 404},
		{"installation-repositories", map[string]any{"installation_id": w.instID}, 400},
	} {
		if status, raw := c.do("POST", bad.path, bad.body); status != bad.want {
			t.Errorf("POST %s %v: %d %s; want %d", bad.path, bad.body, status, raw, bad.want)
		}
	}

	// The installation managed over HTTP.
	mint := func(body any) (int, string) {
		t.Helper()
		status, out := doJSON(t, "POST", fmt.Sprintf("%s/api/v3/app/installations/%d/access_tokens", w.srv.URL(), w.instID), "Bearer "+w.jwt(t), body)
		m, _ := out["message"].(string)
		return status, m
	}
	c.ok("POST", fmt.Sprintf("installations/%d/suspend", w.instID), map[string]any{"login": "alice"}, nil)
	if status, msg := mint(nil); status != 403 || msg != "This installation has been suspended" {
		t.Errorf("minting for a suspended installation: %d %q", status, msg)
	}
	if r, _ := rawReq(t, "GET", repo, auth); r.StatusCode != 401 {
		t.Errorf("a token of a suspended installation: %d; want 401 (revoked)", r.StatusCode)
	}
	c.ok("POST", fmt.Sprintf("installations/%d/unsuspend", w.instID), nil, nil)
	if status, _ := mint(nil); status != 201 {
		t.Errorf("minting after the unsuspend: %d", status)
	}
	if _, err := w.srv.CreateRepo(context.Background(), ghsim.RepoSpec{Owner: "acme", Name: "extra", Dir: w.srcDir}); err != nil {
		t.Fatal(err)
	}
	c.ok("POST", "installation-repositories", map[string]any{"installation_id": w.instID, "remove": []string{"widget"}}, nil)
	if status, _ := doJSON(t, "GET", w.srv.URL()+"/api/v3/repos/acme/widget/installation", "Bearer "+w.jwt(t), nil); status != 404 {
		t.Errorf("the installation of a repository taken out of it: %d; want 404", status)
	}
	if status, msg := mint(map[string]any{"repositories": []string{"widget"}}); status != 422 {
		t.Errorf("a token for a repository taken out: %d %q; want 422", status, msg)
	}
	c.ok("POST", "installation-repositories", map[string]any{"installation_id": w.instID, "add": []string{"widget"}}, nil)
	c.ok("POST", "installation-permissions", map[string]any{"installation_id": w.instID, "permissions": map[string]string{"metadata": "read", "issues": "write"}}, nil)
	if status, msg := mint(map[string]any{"permissions": map[string]string{"contents": "write"}}); status != 422 || !strings.Contains(msg, "not granted") {
		t.Errorf("a token with a permission not accepted: %d %q; want 422", status, msg)
	}
	c.ok("POST", fmt.Sprintf("installations/%d/delete", w.instID), nil, nil)
	if status, _ := mint(nil); status != 404 {
		t.Errorf("minting for a deleted installation: %d; want 404", status)
	}

	ds := c.deliveries(true)
	actions := map[string]bool{}
	for _, d := range ds {
		actions[d.Event+" "+d.Action] = true
	}
	for _, want := range []string{"installation suspend", "installation unsuspend", "installation_repositories removed",
		"installation_repositories added", "installation new_permissions_accepted", "installation deleted"} {
		if !actions[want] {
			t.Errorf("no %s delivered: %v", want, actions)
		}
	}
	for _, err := range ghschema.CheckExchanges(w.srv.Requests(), ds) {
		t.Error(err)
	}
}
