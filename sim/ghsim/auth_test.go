package ghsim_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sim/ghsim"
)

// TestAppJWT: the /app endpoints take only a well-formed, fresh JWT signed
// by the App's key.
func TestAppJWT(t *testing.T) {
	w := newWorld(t, ghsim.Options{})
	now := w.clock.Now()
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	cases := []struct {
		name   string
		auth   string
		status int
		msg    string
	}{
		{"good", "Bearer " + jwt(t, w.key, w.app.ID, now.Add(-time.Minute), now.Add(9*time.Minute)), 200, ""},
		{"none", "", 401, "A JSON web token is required"},
		{"a token, not a JWT", "token " + w.alice.Token, 401, "could not be decoded"},
		{"wrong key", "Bearer " + jwt(t, other, w.app.ID, now, now.Add(5*time.Minute)), 401, "could not be decoded"},
		{"unknown app", "Bearer " + jwt(t, w.key, 1, now, now.Add(5*time.Minute)), 401, "could not be decoded"},
		{"expired", "Bearer " + jwt(t, w.key, w.app.ID, now.Add(-11*time.Minute), now.Add(-time.Minute)), 401, "'Expiration time' claim ('exp') must be a numeric value"},
		{"too long", "Bearer " + jwt(t, w.key, w.app.ID, now, now.Add(11*time.Minute)), 401, "is too far in the future"},
		{"issued in the future", "Bearer " + jwt(t, w.key, w.app.ID, now.Add(5*time.Minute), now.Add(9*time.Minute)), 401, "'Issued at' claim"},
	}
	for _, c := range cases {
		status, body := doJSON(t, "GET", w.srv.URL()+"/api/v3/app", c.auth, nil)
		if status != c.status || !strings.Contains(fmt.Sprint(body["message"]), c.msg) {
			t.Errorf("%s: %d %v, want %d %q", c.name, status, body["message"], c.status, c.msg)
		}
		if status >= 400 && body["documentation_url"] == nil {
			t.Errorf("%s: no documentation_url", c.name)
		}
	}
}

// TestInstallationTokens: tokens are scoped to the repositories and
// permissions they were minted with, and expire.
func TestInstallationTokens(t *testing.T) {
	w := newWorld(t, ghsim.Options{TokenTTL: 10 * time.Minute})
	ctx := ctxT(t)
	if _, err := w.srv.CreateRepo(ctx, ghsim.RepoSpec{Owner: "acme", Name: "other", Dir: t.TempDir(), Private: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.srv.CreateRepo(ctx, ghsim.RepoSpec{Owner: "zeta", Name: "elsewhere", Dir: t.TempDir(), Private: true}); err != nil {
		t.Fatal(err)
	}
	url := w.srv.URL() + "/api/v3/app/installations/" + fmt.Sprint(w.instID) + "/access_tokens"
	status, body := doJSON(t, "POST", url, "Bearer "+w.jwt(t), map[string]any{
		"repositories": []string{"widget"}, "permissions": map[string]string{"issues": "read", "metadata": "read"}})
	if status != 201 {
		t.Fatalf("mint: %d %v", status, body)
	}
	exp, _ := time.Parse(time.RFC3339, body["expires_at"].(string))
	if !exp.Equal(w.clock.Now().Add(10 * time.Minute)) {
		t.Errorf("expires_at %v with a 10m TTL", exp)
	}
	tok := "token " + body["token"].(string)
	api := w.srv.URL() + "/api/v3/repos/"
	for _, c := range []struct {
		method, path string
		body         any
		status       int
	}{
		{"GET", "acme/widget", nil, 200},
		{"GET", "acme/other", nil, 404},     // not in the token's repositories
		{"GET", "zeta/elsewhere", nil, 404}, // not the installation's account
		{"POST", "acme/widget/issues/1/comments", map[string]string{"body": "x"}, 404},
		{"POST", "acme/widget/pulls", map[string]string{"title": "x", "head": "feature", "base": "main"}, 403}, // issues:read only
		{"GET", "acme/widget/pulls", nil, 403},
	} {
		if got, b := doJSON(t, c.method, api+c.path, tok, c.body); got != c.status {
			t.Errorf("%s %s: %d %v, want %d", c.method, c.path, got, b, c.status)
		}
	}
	for _, c := range []struct {
		req  map[string]any
		want string
	}{
		{map[string]any{"permissions": map[string]string{"administration": "write"}}, "not granted"},
		{map[string]any{"permissions": map[string]string{"checks": "write"}}, "not granted"},
		{map[string]any{"repositories": []string{"elsewhere"}}, "not accessible to the parent installation"},
	} {
		status, b := doJSON(t, "POST", url, "Bearer "+w.jwt(t), c.req)
		if status != 422 || !strings.Contains(fmt.Sprint(b["message"]), c.want) {
			t.Errorf("mint %v: %d %v", c.req, status, b)
		}
	}

	// Expiry: the token stops working; a refresh works.
	w.clock.Advance(10 * time.Minute)
	if got, b := doJSON(t, "GET", api+"acme/widget", tok, nil); got != 401 || b["message"] != "Bad credentials" {
		t.Errorf("expired token: %d %v", got, b)
	}
	status, body = doJSON(t, "POST", url, "Bearer "+w.jwt(t), nil)
	if status != 201 {
		t.Fatalf("refresh: %d", status)
	}
	if got, _ := doJSON(t, "GET", api+"acme/widget", "Bearer "+body["token"].(string), nil); got != 200 {
		t.Errorf("refreshed token: %d", got)
	}
	if got, _ := doJSON(t, "GET", w.srv.URL()+"/api/v3/user", "Bearer "+body["token"].(string), nil); got != 403 {
		t.Errorf("GET /user with an installation token: %d", got)
	}
	if got, _ := doJSON(t, "GET", api+"acme/widget", "token nope", nil); got != 401 {
		t.Errorf("bad token: %d", got)
	}
	if got, _ := doJSON(t, "GET", api+"acme/widget", "token "+w.mallory.Token, nil); got != 404 {
		t.Errorf("PAT without access to a private repo: %d", got)
	}

	// The request log keeps what was sent.
	var saw bool
	for _, r := range w.srv.Requests() {
		if r.Method == "POST" && strings.HasSuffix(r.Path, "/access_tokens") && r.Status == 201 {
			var b map[string]any
			json.Unmarshal(r.Body, &b)
			saw = saw || b["repositories"] != nil
		}
	}
	if !saw {
		t.Error("request log lacks the minting request")
	}
}
