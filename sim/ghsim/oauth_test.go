package ghsim_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/sim/ghsim/ghschema"
)

// The /login/oauth endpoints are not in GitHub's REST description: they
// are checked against the parameters and answers GitHub documents on
// "Generating a user access token for a GitHub App"
// (https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-user-access-token-for-a-github-app),
// "Refreshing user access tokens"
// (https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/refreshing-user-access-tokens)
// and "Troubleshooting OAuth App access token request errors"
// (https://docs.github.com/en/apps/oauth-apps/maintaining-oauth-apps/troubleshooting-oauth-app-access-token-request-errors).

// documentedAuthorizeParams are the query parameters of GET
// /login/oauth/authorize, as the first page lists them.
var documentedAuthorizeParams = []string{"client_id", "redirect_uri", "state", "login", "allow_signup", "prompt", "code_challenge", "code_challenge_method"}

// documentedTokenAnswer are the fields of a token answer (both pages).
var documentedTokenAnswer = []string{"access_token", "expires_in", "refresh_token", "refresh_token_expires_in", "scope", "token_type"}

// documentedErrors: the access token request's errors, each with the
// description GitHub gives (the troubleshooting page).
var documentedErrors = map[string]string{
	"incorrect_client_credentials": "The client_id and/or client_secret passed are incorrect.",
	"redirect_uri_mismatch":        "The redirect_uri MUST match the registered callback URL for this application.",
	"bad_verification_code":        "The code passed is incorrect or expired.",
}

type oauthEnv struct {
	srv      *ghsim.Server
	clk      *clock
	app      ghsim.App
	callback string
	browser  *http.Client // signed in to the stand-in as ada; stops at the callback
}

func newOAuthEnv(t *testing.T) *oauthEnv {
	t.Helper()
	clk := &clock{t: time.Now()}
	srv, err := ghsim.Start(ghsim.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	callback := "http://127.0.0.1:9/auth/github/callback" // never reached: the browser stops there
	app, err := srv.CreateApp(ghsim.AppSpec{Slug: "harvest-oauth", CallbackURLs: []string{callback}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.AddUser(ghsim.UserSpec{Login: "ada", Name: "Ada Lovelace", Email: "ada@example.com"}); err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	b := &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), "http://127.0.0.1:9/") {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	return &oauthEnv{srv: srv, clk: clk, app: app, callback: callback, browser: b}
}

// authorize runs the browser's part: the authorization page (after
// signing in at the stand-in's login form when asked), its Authorize
// button, and returns the callback's query.
func (e *oauthEnv) authorize(t *testing.T, q url.Values) url.Values {
	t.Helper()
	resp, err := e.browser.Get(e.srv.URL() + "/login/oauth/authorize?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusFound {
		return callbackQuery(t, resp)
	}
	if strings.Contains(string(body), `action="/session"`) {
		ret := regexp.MustCompile(`name="return_to" value="([^"]*)"`).FindStringSubmatch(string(body))
		resp, err = e.browser.PostForm(e.srv.URL()+"/session", url.Values{"login": {"ada"}, "return_to": {htmlUnescape(ret[1])}})
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Authorize harvest-oauth") {
		t.Fatalf("authorization page: %d %s", resp.StatusCode, body)
	}
	form := url.Values{"authorize": {"1"}}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`).FindAllStringSubmatch(string(body), -1) {
		form.Set(m[1], htmlUnescape(m[2]))
	}
	resp, err = e.browser.PostForm(e.srv.URL()+"/login/oauth/authorize", form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return callbackQuery(t, resp)
}

func htmlUnescape(s string) string {
	r := strings.NewReplacer("&amp;", "&", "&#43;", "+", "&#34;", `"`, "&#39;", "'", "&lt;", "<", "&gt;", ">")
	return r.Replace(s)
}

func callbackQuery(t *testing.T, resp *http.Response) url.Values {
	t.Helper()
	loc, err := resp.Location()
	if err != nil || !strings.HasPrefix(loc.String(), "http://127.0.0.1:9/auth/github/callback") {
		t.Fatalf("want a redirect to the callback: %d %v %v", resp.StatusCode, loc, err)
	}
	return loc.Query()
}

// token posts to /login/oauth/access_token and decodes the answer.
func (e *oauthEnv) token(t *testing.T, form url.Values, asJSON bool) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL()+"/login/oauth/access_token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if asJSON {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("token endpoint: %d %s (GitHub answers 200, errors included)", resp.StatusCode, b)
	}
	out := map[string]any{}
	if asJSON {
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("JSON answer %s: %v", b, err)
		}
		return out
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		t.Fatalf("form answer with Content-Type %q", resp.Header.Get("Content-Type"))
	}
	v, err := url.ParseQuery(string(b))
	if err != nil {
		t.Fatal(err)
	}
	for k := range v {
		out[k] = v.Get(k)
	}
	return out
}

func pkce() (verifier, challenge string) {
	verifier = "a-verifier-of-at-least-43-characters-0123456789abcdef"
	sum := sha256.Sum256([]byte(verifier))
	return verifier, base64.RawURLEncoding.EncodeToString(sum[:])
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestOAuthWebFlow: a person signs in at the stand-in, authorizes the
// App, the App exchanges the code (with its PKCE verifier) for a
// user-to-server token that GET /user answers for (checked against
// GitHub's description), refreshes it (the refresh token is taken once),
// and the token expires after its lifetime.
func TestOAuthWebFlow(t *testing.T) {
	e := newOAuthEnv(t)
	verifier, challenge := pkce()
	q := url.Values{"client_id": {e.app.ClientID}, "redirect_uri": {e.callback}, "state": {"st-1"},
		"code_challenge": {challenge}, "code_challenge_method": {"S256"}, "allow_signup": {"false"}, "prompt": {"select_account"}, "login": {"ada"}}
	for _, p := range documentedAuthorizeParams {
		if !q.Has(p) {
			t.Fatalf("the test sends every documented authorize parameter; %s is missing", p)
		}
	}
	cb := e.authorize(t, q)
	if cb.Get("state") != "st-1" || cb.Get("code") == "" {
		t.Fatalf("callback query %v: want the state back and a code", cb)
	}
	tok := e.token(t, url.Values{"client_id": {e.app.ClientID}, "client_secret": {e.app.ClientSecret}, "code": {cb.Get("code")},
		"redirect_uri": {e.callback}, "code_verifier": {verifier}}, false)
	if got := keys(tok); !slices.Equal(got, slices.Sorted(slices.Values(documentedTokenAnswer))) {
		t.Fatalf("token answer fields %v, GitHub documents %v", got, documentedTokenAnswer)
	}
	access := tok["access_token"].(string)
	if !strings.HasPrefix(access, "ghu_") || !strings.HasPrefix(tok["refresh_token"].(string), "ghr_") ||
		tok["expires_in"] != "28800" || tok["refresh_token_expires_in"] != "15897600" || tok["token_type"] != "bearer" {
		t.Fatalf("token answer %v", tok)
	}
	me := getUser(t, e.srv, access, http.StatusOK)
	if me["login"] != "ada" || me["name"] != "Ada Lovelace" {
		t.Fatalf("GET /user with the user token: %v", me)
	}

	// Refresh (JSON this time): a new pair; the old refresh token is spent.
	ref := e.token(t, url.Values{"client_id": {e.app.ClientID}, "client_secret": {e.app.ClientSecret},
		"grant_type": {"refresh_token"}, "refresh_token": {tok["refresh_token"].(string)}}, true)
	if got := keys(ref); !slices.Equal(got, slices.Sorted(slices.Values(documentedTokenAnswer))) {
		t.Fatalf("refresh answer fields %v, GitHub documents %v", got, documentedTokenAnswer)
	}
	if ref["expires_in"] != float64(28800) || ref["access_token"] == access {
		t.Fatalf("refresh answer %v: want numbers in JSON and a new token", ref)
	}
	again := e.token(t, url.Values{"client_id": {e.app.ClientID}, "client_secret": {e.app.ClientSecret},
		"grant_type": {"refresh_token"}, "refresh_token": {tok["refresh_token"].(string)}}, true)
	if again["error"] != "bad_refresh_token" {
		t.Fatalf("a spent refresh token: %v; want bad_refresh_token", again)
	}

	// Expiry: 8 hours on, the user token is refused as GitHub refuses it.
	e.clk.Advance(8*time.Hour + time.Second)
	getUser(t, e.srv, ref["access_token"].(string), http.StatusUnauthorized)

	// Authorized before: the next authorization redirects at once.
	cb = e.authorize(t, url.Values{"client_id": {e.app.ClientID}, "state": {"st-2"}})
	if cb.Get("code") == "" || cb.Get("state") != "st-2" {
		t.Fatalf("a second authorization: %v", cb)
	}
}

func getUser(t *testing.T, srv *ghsim.Server, token string, want int) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL()+"/api/v3/user", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET /user: %d %s, want %d", resp.StatusCode, b, want)
	}
	if err := ghschema.ValidateREST("GET", "/user", resp.StatusCode, nil, b); err != nil {
		t.Errorf("GET /user's answer against GitHub's description: %v", err)
	}
	var out map[string]any
	json.Unmarshal(b, &out)
	return out
}

// TestOAuthErrors: each refusal GitHub documents, in GitHub's shape
// (200, error, error_description, error_uri).
func TestOAuthErrors(t *testing.T) {
	e := newOAuthEnv(t)
	verifier, challenge := pkce()
	code := func() string {
		return e.authorize(t, url.Values{"client_id": {e.app.ClientID}, "redirect_uri": {e.callback},
			"code_challenge": {challenge}, "code_challenge_method": {"S256"}}).Get("code")
	}
	creds := func(v url.Values) url.Values {
		v.Set("client_id", e.app.ClientID)
		if !v.Has("client_secret") {
			v.Set("client_secret", e.app.ClientSecret)
		}
		return v
	}
	used := code()
	if tok := e.token(t, creds(url.Values{"code": {used}, "code_verifier": {verifier}}), true); tok["access_token"] == nil {
		t.Fatalf("a good exchange: %v", tok)
	}
	for _, tc := range []struct {
		name string
		form url.Values
		want string
	}{
		{"wrong client secret", creds(url.Values{"client_secret": {"nope"}, "code": {code()}, "code_verifier": {verifier}}), "incorrect_client_credentials"},
		{"unknown code", creds(url.Values{"code": {"0123456789abcdef0123"}, "code_verifier": {verifier}}), "bad_verification_code"},
		{"code used twice", creds(url.Values{"code": {used}, "code_verifier": {verifier}}), "bad_verification_code"},
		{"wrong PKCE verifier", creds(url.Values{"code": {code()}, "code_verifier": {"another-verifier-of-at-least-43-characters-xyz"}}), "bad_verification_code"},
		{"no PKCE verifier", creds(url.Values{"code": {code()}}), "bad_verification_code"},
		{"other redirect_uri", creds(url.Values{"code": {code()}, "code_verifier": {verifier}, "redirect_uri": {"http://127.0.0.1:9/elsewhere"}}), "redirect_uri_mismatch"},
		{"unknown grant", creds(url.Values{"grant_type": {"password"}}), "unsupported_grant_type"},
		{"bad refresh token", creds(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"ghr_nope"}}), "bad_refresh_token"},
	} {
		for _, asJSON := range []bool{false, true} {
			got := e.token(t, tc.form, asJSON)
			if got["error"] != tc.want || got["error_description"] == "" || !strings.HasPrefix(got["error_uri"].(string), "https://docs.github.com/") || got["access_token"] != nil {
				t.Errorf("%s (json %v): %v; want error %s", tc.name, asJSON, got, tc.want)
			}
			if d, ok := documentedErrors[tc.want]; ok && tc.name != "wrong PKCE verifier" && tc.name != "no PKCE verifier" && got["error_description"] != d {
				t.Errorf("%s: error_description %q, GitHub documents %q", tc.name, got["error_description"], d)
			}
		}
	}

	// The authorization request itself: a redirect_uri that is not
	// under a callback URL sends the browser to the App's callback with
	// redirect_uri_mismatch; an unknown client is a 404 page.
	resp, err := e.browser.Get(e.srv.URL() + "/login/oauth/authorize?" + url.Values{"client_id": {e.app.ClientID}, "redirect_uri": {"http://evil.example/cb"}, "state": {"s"}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if q := callbackQuery(t, resp); q.Get("error") != "redirect_uri_mismatch" || q.Get("state") != "s" {
		t.Fatalf("a foreign redirect_uri: %v", q)
	}
	resp, err = e.browser.Get(e.srv.URL() + "/login/oauth/authorize?client_id=Iv1.nobody")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("an unknown client_id: %d, want 404", resp.StatusCode)
	}
	// A form posted without the browser's authenticity token is refused.
	resp, err = e.browser.PostForm(e.srv.URL()+"/login/oauth/authorize", url.Values{"client_id": {e.app.ClientID}, "authorize": {"1"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("an authorization without the page's token: %d, want 422", resp.StatusCode)
	}
}
