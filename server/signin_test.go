package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/stacktest/apitest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testoidc"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// Sign-in with GitHub (through the GitHub stand-in's real OAuth web flow)
// and with an OIDC provider (zitadel/oidc's example OpenID Provider,
// package testoidc), driven over HTTP as a browser drives them: its
// cookie jar, its redirects, the providers' forms.

// clock is a settable clock shared by the stand-in and the server.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type signInEnv struct {
	*apiEnv
	clk  *clock
	gh   *ghsim.Server
	app  ghsim.App
	ada  ghsim.User
	idp  *testoidc.Provider
	oidc *server.OIDCSignIn
}

// oidcPeople are the provider's people: one of example.com, verified;
// one of another domain; one of example.com whose address is not
// verified.
var oidcPeople = []testoidc.User{
	{ID: "sub-grace", Username: "grace", Password: "pw-grace", FirstName: "Grace", LastName: "Hopper", Email: "grace@example.com", EmailVerified: true},
	{ID: "sub-mallory", Username: "mallory", Password: "pw-mallory", FirstName: "Mal", LastName: "Lory", Email: "mallory@elsewhere.org", EmailVerified: true},
	{ID: "sub-unv", Username: "unverified", Password: "pw-unv", FirstName: "Un", LastName: "Verified", Email: "unv@example.com", EmailVerified: false},
}

func newSignInEnv(t *testing.T) *signInEnv {
	t.Helper()
	clk := &clock{t: time.Now()}
	gh, err := ghsim.Start(ghsim.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gh.Close() })
	app, err := gh.CreateApp(ghsim.AppSpec{Slug: "harvest-signin"})
	if err != nil {
		t.Fatal(err)
	}
	ada, err := gh.AddUser(ghsim.UserSpec{Login: "ada", Name: "Ada Lovelace"})
	if err != nil {
		t.Fatal(err)
	}
	idp := testoidc.Listen(t)
	o := &server.OIDCSignIn{Issuer: idp.Issuer, ClientID: "harvest", ClientSecret: "idp-secret", Name: "Example SSO",
		AllowedDomains: []string{"example.com"}}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	e := newAPIEnv(t, apitest.WithSignIn(server.SignIn{
		GitHub: &server.GitHubSignIn{WebURL: gh.URL(), APIURL: gh.URL() + "/api/v3", ClientID: app.ClientID, ClientSecret: app.ClientSecret, Role: store.RoleMember},
		OIDC:   o,
		Now:    clk.Now,
	}))
	if err := gh.SetCallbackURLs(app.ID, []string{e.URL + "/v1/auth/github/callback"}); err != nil {
		t.Fatal(err)
	}
	idp.Serve(t, "harvest", "idp-secret", e.URL+"/v1/auth/oidc/callback", oidcPeople...)
	return &signInEnv{apiEnv: e, clk: clk, gh: gh, app: app, ada: ada, idp: idp, oidc: o}
}

// agent is a browser: a cookie jar, redirects followed until Harvest's
// UI (the landing page) is reached, which it does not load.
type agent struct {
	t    *testing.T
	e    *signInEnv
	jar  *cookiejar.Jar
	c    *http.Client
	land *url.URL // where the last sign-in landed
}

func (e *signInEnv) newAgent(t *testing.T) *agent {
	jar, _ := cookiejar.New(nil)
	a := &agent{t: t, e: e, jar: jar}
	a.c = &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), e.URL+"/") && !strings.HasPrefix(req.URL.Path, "/v1/") {
			a.land = req.URL
			return http.ErrUseLastResponse
		}
		return nil
	}}
	return a
}

func (a *agent) get(u string) (*http.Response, string) {
	a.t.Helper()
	a.land = nil
	resp, err := a.c.Get(u)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (a *agent) post(u string, form url.Values) (*http.Response, string) {
	a.t.Helper()
	a.land = nil
	resp, err := a.c.PostForm(u, form)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var hiddenRE = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

func unescapeHTML(s string) string {
	return strings.NewReplacer("&amp;", "&", "&#43;", "+", "&#34;", `"`, "&#39;", "'", "&lt;", "<", "&gt;", ">").Replace(s)
}

// githubAuthorize goes from a page of the stand-in's flow (its login form
// or authorization page) through to the landing: signs in as login when
// asked, presses Authorize.
func (a *agent) githubAuthorize(body, login string) {
	a.t.Helper()
	if strings.Contains(body, `action="/session"`) {
		ret := regexp.MustCompile(`name="return_to" value="([^"]*)"`).FindStringSubmatch(body)
		var resp *http.Response
		resp, body = a.post(a.e.gh.URL()+"/session", url.Values{"login": {login}, "return_to": {unescapeHTML(ret[1])}})
		if a.land != nil || resp.StatusCode == http.StatusFound {
			return // authorized before: straight back (or stopped on the way)
		}
	}
	if !strings.Contains(body, "Authorize harvest-signin") {
		a.t.Fatalf("want the stand-in's authorization page, got %s", body)
	}
	form := url.Values{"authorize": {"1"}}
	for _, m := range hiddenRE.FindAllStringSubmatch(body, -1) {
		form.Set(m[1], unescapeHTML(m[2]))
	}
	a.post(a.e.gh.URL()+"/login/oauth/authorize", form)
}

// signInGitHub signs in as login and returns where it landed.
func (a *agent) signInGitHub(login, ret string) *url.URL {
	a.t.Helper()
	_, body := a.get(a.e.URL + "/v1/auth/github?return=" + url.QueryEscape(ret))
	if a.land == nil {
		a.githubAuthorize(body, login)
	}
	if a.land == nil {
		a.t.Fatal("the GitHub sign-in did not come back to Harvest")
	}
	return a.land
}

// signInOIDC signs in at the provider's login form and returns where it
// landed.
func (a *agent) signInOIDC(username, password string) *url.URL {
	a.t.Helper()
	resp, body := a.get(a.e.URL + "/v1/auth/oidc")
	if !strings.Contains(body, `action="/login/username"`) {
		a.t.Fatalf("want the provider's login form, got %d %s", resp.StatusCode, body)
	}
	id := regexp.MustCompile(`name="id" value="([^"]*)"`).FindStringSubmatch(body)
	a.post(a.e.idp.Issuer+"login/username", url.Values{"id": {unescapeHTML(id[1])}, "username": {username}, "password": {password}})
	if a.land == nil {
		a.t.Fatal("the OIDC sign-in did not come back to Harvest")
	}
	return a.land
}

// cookie is the sign-in cookie the browser holds for Harvest.
func (a *agent) cookie() *http.Cookie {
	u, _ := url.Parse(a.e.URL)
	for _, c := range a.jar.Cookies(u) {
		if c.Name == server.SessionCookie {
			return c
		}
	}
	return nil
}

// api calls Harvest's API as the page does: the cookie, and the CSRF
// token for changes.
func (a *agent) api(method, path, csrf string) (int, []byte) {
	a.t.Helper()
	b := &browser{e: a.e.apiEnv, cookie: a.cookie()}
	st, body, _ := b.send(method, path, nil, csrf, nil)
	return st, body
}

func (a *agent) me() wire.Me {
	a.t.Helper()
	st, body := a.api(http.MethodGet, "/v1/me", "")
	if st != http.StatusOK {
		a.t.Fatalf("GET /v1/me: %d %s", st, body)
	}
	var m wire.Me
	json.Unmarshal(body, &m)
	return m
}

func signInError(u *url.URL) string { return u.Query().Get("signin_error") }

// audits are the entries of an action, oldest first.
func (e *signInEnv) audits(action string) []*store.AuditEntry {
	l, err := e.Store.ListAudit(testbin.Context(e.T), store.AuditFilter{Action: action})
	if err != nil {
		e.T.Fatal(err)
	}
	for i, j := 0, len(l)-1; i < j; i, j = i+1, j-1 {
		l[i], l[j] = l[j], l[i]
	}
	return l
}

// TestSignInGitHub: a person signs in with GitHub through the stand-in's
// authorization page; the browser lands where it started, signed in as
// the user of their GitHub account (no token), recorded in the audit
// log; signing out ends the cookie; the next sign-in is the same user.
func TestSignInGitHub(t *testing.T) {
	e := newSignInEnv(t)
	st, body := (&agent{t: t, e: e}).apiNoCookie(http.MethodGet, "/v1/auth/providers")
	var p server.Providers
	if json.Unmarshal(body, &p); st != http.StatusOK || !p.Token || !p.GitHub || !p.OIDC || p.OIDCName != "Example SSO" || p.GitHubURL != "/v1/auth/github" {
		t.Fatalf("GET /v1/auth/providers: %d %s", st, body)
	}

	a := e.newAgent(t)
	land := a.signInGitHub("ada", "/s/s-abc")
	if land.Path != "/s/s-abc" || signInError(land) != "" {
		t.Fatalf("landed on %s, want /s/s-abc", land)
	}
	ck := a.cookie()
	if ck == nil || !strings.HasPrefix(ck.Value, "hvu_") {
		t.Fatalf("no user sign-in cookie: %+v", ck)
	}
	me := a.me()
	if me.Token != nil || me.SignedInVia != "github" || me.User == nil || me.Admin || me.User.Role != "member" ||
		len(me.User.Identities) != 1 || me.User.Identities[0].Kind != "github" || me.User.Identities[0].Login != "ada" ||
		me.User.Identities[0].Subject != itoa(e.ada.ID) {
		t.Fatalf("GET /v1/me: %+v %+v", me, me.User)
	}
	st, body = a.api(http.MethodGet, "/v1/auth/session", "")
	var si server.SignedIn
	if json.Unmarshal(body, &si); st != http.StatusOK || si.Via != "github" || si.TokenID != "" || si.User != me.User.ID || si.CSRFToken == "" {
		t.Fatalf("GET /v1/auth/session: %d %s", st, body)
	}
	// The page starts a session: the user's, with no token; it is in
	// their list.
	pb := &browser{e: e.apiEnv, cookie: a.cookie()}
	st, body, _ = pb.send(http.MethodPost, "/v1/sessions", wire.CreateRequest{Repos: []wire.RepoSpec{{Source: e.Repo}}}, si.CSRFToken, nil)
	var v wire.View
	if json.Unmarshal(body, &v); st != http.StatusCreated || v.Session.User != me.User.ID {
		t.Fatalf("POST /v1/sessions signed in with GitHub: %d %s", st, body)
	}
	st, body = a.api(http.MethodGet, "/v1/sessions", "")
	var list wire.SessionList
	if json.Unmarshal(body, &list); st != http.StatusOK || len(list.Sessions) != 1 || list.Sessions[0].ID != v.Session.ID {
		t.Fatalf("GET /v1/sessions signed in with GitHub: %d %s", st, body)
	}
	if l := e.audits("session.create"); len(l) != 1 || l[0].User != me.User.ID || l[0].Token != "" || l[0].Channel != store.ChannelUI {
		t.Fatalf("audit of the session's start: %+v", l)
	}
	// The GitHub token is kept, sealed: the store holds no token in clear.
	g, err := e.Store.OAuthGrant(testbin.Context(t), me.User.ID, store.WebViaGitHub)
	if err != nil || strings.Contains(string(g.Access), "ghu_") || len(g.Refresh) == 0 || g.ExpiresAt.IsZero() {
		t.Fatalf("the kept grant: %+v, %v", g, err)
	}
	if l := e.audits("auth.sign_in"); len(l) != 1 || l[0].User != me.User.ID || l[0].Channel != store.ChannelUI || l[0].Result != "ok" ||
		l[0].Remote != "127.0.0.1" || !strings.Contains(string(l[0].Detail), `"login":"ada"`) {
		t.Fatalf("audit of the sign-in: %+v", l)
	}

	// Sign out: the cookie is refused after.
	if st, body := a.api(http.MethodDelete, "/v1/auth/session", si.CSRFToken); st != http.StatusNoContent {
		t.Fatalf("sign out: %d %s", st, body)
	}
	b := &browser{e: e.apiEnv, cookie: ck}
	if st, _, _ := b.send(http.MethodGet, "/v1/me", nil, "", nil); st != http.StatusUnauthorized {
		t.Fatalf("the signed-out cookie: %d, want 401", st)
	}
	if l := e.audits("auth.sign_out"); len(l) != 1 || l[0].User != me.User.ID || l[0].Token != "" || !strings.Contains(string(l[0].Detail), `"via":"github"`) {
		t.Fatalf("audit of the sign-out: %+v", l)
	}

	// Again (GitHub remembers the authorization): the same user.
	a2 := e.newAgent(t)
	a2.signInGitHub("ada", "")
	if m2 := a2.me(); m2.User == nil || m2.User.ID != me.User.ID {
		t.Fatalf("a second sign-in is user %+v, want %s", m2.User, me.User.ID)
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func (a *agent) apiNoCookie(method, path string) (int, []byte) {
	b := &browser{e: a.e.apiEnv}
	st, body, _ := b.send(method, path, nil, "", nil)
	return st, body
}

// TestSignInGitHubCommenterIsSameUser: the user a GitHub commenter
// became (package ghbot makes it, as for a webhook's requester) is the
// user that GitHub account signs in as.
func TestSignInGitHubCommenterIsSameUser(t *testing.T) {
	e := newSignInEnv(t)
	ctx := testbin.Context(t)
	// What ghbot does for a comment's author (ghbot/people.go): the
	// identity by GitHub's numeric id, made at first sight.
	u, created, err := e.Store.UserForIdentity(ctx, &store.Identity{Kind: store.IdentityGitHub, Subject: itoa(e.ada.ID), Login: "ada"},
		&store.User{ID: store.NewUserID(), Name: "ada", Role: store.RoleViewer})
	if err != nil || !created {
		t.Fatal(err, created)
	}
	a := e.newAgent(t)
	a.signInGitHub("ada", "")
	if me := a.me(); me.User == nil || me.User.ID != u.ID || me.User.Role != "viewer" {
		t.Fatalf("signed in as %+v, want the commenter's user %s (a viewer)", me.User, u.ID)
	}
}

// TestSignInGitHubRefusals: a callback whose state is not the browser's,
// one replayed, a code from another sign-in (its PKCE verifier is not
// this one's), a disabled user — each refused, back on the sign-in page
// with the reason, and recorded; a disabled user's open sign-in stops
// at the next request.
func TestSignInGitHubRefusals(t *testing.T) {
	e := newSignInEnv(t)

	// State mismatch: the browser started a sign-in, the callback names
	// another state.
	a := e.newAgent(t)
	resp, _ := a.get(e.URL + "/v1/auth/github")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the flow's first page: %d", resp.StatusCode)
	}
	a.get(e.URL + "/v1/auth/github/callback?code=x&state=not-mine")
	if a.land == nil || !strings.Contains(signInError(a.land), "state does not match") || a.cookie() != nil {
		t.Fatalf("a foreign state: landed %v", a.land)
	}
	if l := e.audits("auth.sign_in"); len(l) != 1 || l[0].Result != "forbidden" || !strings.Contains(string(l[0].Detail), "state does not match") {
		t.Fatalf("audit of the refusal: %+v", l)
	}

	// A replayed callback: the good one, then the same URL again with a
	// fresh flow cookie for that state (as an attacker holding both would).
	a = e.newAgent(t)
	var callback *url.URL
	a.c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if strings.HasPrefix(req.URL.Path, "/v1/auth/github/callback") {
			callback = req.URL
		}
		if strings.HasPrefix(req.URL.String(), e.URL+"/") && !strings.HasPrefix(req.URL.Path, "/v1/") {
			a.land = req.URL
			return http.ErrUseLastResponse
		}
		return nil
	}
	a.signInGitHub("ada", "")
	if callback == nil || signInError(a.land) != "" {
		t.Fatalf("the first sign-in: %v %v", callback, a.land)
	}
	replay := e.newAgent(t)
	replay.jar.SetCookies(callback, []*http.Cookie{{Name: "harvest_signin", Value: callback.Query().Get("state"), Path: "/v1/auth/"}})
	replay.get(callback.String())
	if replay.land == nil || !strings.Contains(signInError(replay.land), "completed already") || replay.cookie() != nil {
		t.Fatalf("a replayed callback: landed %v", replay.land)
	}

	// PKCE: the code of sign-in B delivered to sign-in A's callback
	// (code injection) fails at GitHub, which checks A's verifier
	// against B's challenge.
	a = e.newAgent(t)
	b := e.newAgent(t)
	var bCallback *url.URL
	b.c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if strings.HasPrefix(req.URL.Path, "/v1/auth/github/callback") {
			bCallback = req.URL
			return http.ErrUseLastResponse // B's browser never delivers it
		}
		return nil
	}
	_, body := b.get(e.URL + "/v1/auth/github")
	b.githubAuthorize(body, "ada")
	if bCallback == nil {
		t.Fatal("B's authorization did not redirect to the callback")
	}
	a.get(e.URL + "/v1/auth/github") // A's flow: its cookie, its state
	var aState string
	for _, c := range a.jar.Cookies(bCallback) {
		if c.Name == "harvest_signin" {
			aState = c.Value
		}
	}
	a.get(e.URL + "/v1/auth/github/callback?" + url.Values{"code": {bCallback.Query().Get("code")}, "state": {aState}}.Encode())
	if a.land == nil || !strings.Contains(signInError(a.land), "bad_verification_code") || a.cookie() != nil {
		t.Fatalf("a code of another sign-in: landed %v", a.land)
	}

	// Disabled: an open sign-in stops at the next request; a new one is
	// refused.
	a = e.newAgent(t)
	a.signInGitHub("ada", "")
	me := a.me()
	if _, err := e.AdminC.UpdateUser(testbin.Context(t), me.User.ID, wire.UserPatch{Disabled: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	if st, body := a.api(http.MethodGet, "/v1/sessions", ""); st != http.StatusUnauthorized || !strings.Contains(string(body), "disabled") {
		t.Fatalf("a disabled user's cookie: %d %s", st, body)
	}
	a2 := e.newAgent(t)
	a2.signInGitHub("ada", "")
	if !strings.Contains(signInError(a2.land), "disabled") || a2.cookie() != nil {
		t.Fatalf("a disabled user's sign-in: landed %v", a2.land)
	}
	l := e.audits("auth.sign_in")
	if last := l[len(l)-1]; last.Result != "unauthorized" || last.User != me.User.ID {
		t.Fatalf("audit of the disabled user's sign-in: %+v", last)
	}
}

// TestGitHubTokenRefresh: the kept user-to-server token is handed out
// while valid, refreshed with the refresh token once it is about to
// expire (GitHub's 8 hours, on the shared clock), and the new one works.
func TestGitHubTokenRefresh(t *testing.T) {
	e := newSignInEnv(t)
	a := e.newAgent(t)
	a.signInGitHub("ada", "")
	user := a.me().User.ID
	ctx := context.Background()
	first, err := e.Server.GitHubToken(ctx, user)
	if err != nil || !strings.HasPrefix(first, "ghu_") {
		t.Fatalf("GitHubToken: %q, %v", first, err)
	}
	if again, _ := e.Server.GitHubToken(ctx, user); again != first {
		t.Fatal("a valid token was refreshed")
	}
	e.clk.Advance(8*time.Hour - time.Minute) // within the refresh margin
	fresh, err := e.Server.GitHubToken(ctx, user)
	if err != nil || fresh == first || !strings.HasPrefix(fresh, "ghu_") {
		t.Fatalf("after 8 hours less a minute: %q, %v; want a new token", fresh, err)
	}
	e.clk.Advance(2 * time.Minute) // the first has expired at GitHub
	if st := ghUserStatus(t, e.gh, first); st != http.StatusUnauthorized {
		t.Fatalf("the old token at GitHub: %d, want 401", st)
	}
	if st := ghUserStatus(t, e.gh, fresh); st != http.StatusOK {
		t.Fatalf("the refreshed token at GitHub: %d, want 200", st)
	}
	if again, err := e.Server.GitHubToken(ctx, user); err != nil || again != fresh {
		t.Fatalf("after the refresh: %q, %v; want the refreshed token", again, err)
	}
	if _, err := e.Server.GitHubToken(ctx, "usr-nobody"); err == nil {
		t.Fatal("a token for a user who never signed in with GitHub")
	}
}

func ghUserStatus(t *testing.T, gh *ghsim.Server, token string) int {
	req, _ := http.NewRequest(http.MethodGet, gh.URL()+"/api/v3/user", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSignInOIDC: through the provider's real login form, a person of an
// allowed domain with a verified address lands signed in as the user of
// (issuer, subject); one of another domain, and one whose address the
// provider has not verified, are refused, each recorded.
func TestSignInOIDC(t *testing.T) {
	e := newSignInEnv(t)
	a := e.newAgent(t)
	land := a.signInOIDC("grace", "pw-grace")
	if land.Path != "/" || signInError(land) != "" {
		t.Fatalf("landed on %s", land)
	}
	me := a.me()
	if me.SignedInVia != "oidc" || me.User == nil || len(me.User.Identities) != 1 {
		t.Fatalf("GET /v1/me: %+v", me)
	}
	id := me.User.Identities[0]
	if id.Kind != "oidc" || id.Issuer != e.idp.Issuer || id.Subject != "sub-grace" || id.Email != "grace@example.com" || me.User.Name != "Grace Hopper" {
		t.Fatalf("the identity: %+v (user %+v)", id, me.User)
	}
	// The same person again: the same user.
	if m := e.newAgentSignedInOIDC(t, "grace", "pw-grace"); m.User.ID != me.User.ID {
		t.Fatalf("a second sign-in: user %s, want %s", m.User.ID, me.User.ID)
	}
	for _, tc := range []struct{ user, pw, want string }{
		{"mallory", "pw-mallory", "not an address of example.com"},
		{"unverified", "pw-unv", "has not verified"},
	} {
		b := e.newAgent(t)
		land := b.signInOIDC(tc.user, tc.pw)
		if !strings.Contains(signInError(land), tc.want) || b.cookie() != nil {
			t.Errorf("%s: landed %v, want refused (%s)", tc.user, land, tc.want)
		}
	}
	// An ID token past its expiry (the provider's: an hour) on the
	// server's clock is refused.
	e.clk.Advance(2 * time.Hour)
	b := e.newAgent(t)
	if land := b.signInOIDC("grace", "pw-grace"); !strings.Contains(signInError(land), "expired") || b.cookie() != nil {
		t.Fatalf("an expired ID token: landed %v", land)
	}
	e.clk.Advance(-2 * time.Hour)

	l := e.audits("auth.sign_in")
	var ok, refused int
	for _, x := range l {
		switch x.Result {
		case "ok":
			ok++
		case "forbidden":
			refused++
			if !strings.Contains(string(x.Detail), `"via":"oidc"`) || x.Channel != store.ChannelUI {
				t.Errorf("a refusal's entry: %+v", x)
			}
		}
	}
	if ok != 2 || refused != 2 || len(l) != 5 || l[4].Result != "unauthorized" {
		t.Fatalf("audit: %d sign-ins and %d refusals (and an expired token), want 2 and 2 (and 1): %+v", ok, refused, l)
	}
}

func (e *signInEnv) newAgentSignedInOIDC(t *testing.T, user, pw string) wire.Me {
	a := e.newAgent(t)
	a.signInOIDC(user, pw)
	return a.me()
}
