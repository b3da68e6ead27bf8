package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// # Signing in with GitHub or an OIDC provider
//
// Besides a token (websession.go), a browser signs in with an account
// the person already has: GitHub (the App's user authorization,
// signin_github.go) or any OpenID Connect provider (signin_oidc.go).
// Both are the OAuth authorization code flow with PKCE, in four steps:
//
//	GET /v1/auth/{github,oidc}          a flow: state, PKCE verifier (and nonce) → store.SignInFlow,
//	   │                                 the state in the harvest_signin cookie; 302 to the provider
//	   ▼
//	provider's login and consent         (its pages: GitHub's, the IdP's)
//	   │
//	   ▼
//	GET /v1/auth/{...}/callback          the state must be the cookie's (a login CSRF is refused) and
//	   │                                 a flow not taken yet (a replayed callback is refused); the
//	   │                                 code is exchanged with the verifier; the identity read
//	   ▼                                 (GitHub's GET /user; the OIDC ID token, verified)
//	the identity's user (made at first sight) gets a web session of its own: the harvest_session
//	cookie, then 302 to the page the sign-in started from.
//
// The flow cookie is SameSite=Lax, not Strict: the callback is a
// top-level navigation from the provider's site, which a Strict cookie
// would not follow. It is HttpOnly, lives as long as the flow (10
// minutes) and is scoped to /v1/auth/. The flow itself is in the store,
// so the callback may reach any node, and is taken once.
//
// A sign-in with a provider is the user's, not a token's: the web
// session names the user (store.WebSession.User) and its secret starts
// with userSessionPrefix. A request it authenticates acts as the user:
// the caller's token is the user itself (callerForUser: its id is the
// user's id, which is what owns the sessions started from such a
// browser and what its user:me secrets are scoped to), its role and
// disabled read with the web session on every request — so a disabled
// user's browser is refused at its next request, and DELETE
// /v1/auth/session deletes the web session.
//
// Every sign-in, refusal and sign-out is in the audit log: action
// auth.sign_in (or auth.sign_out), channel ui, the peer's address, the
// user when known, and the identity (via, login or subject, email) in
// the detail. A callback without the flow cookie is not recorded: no
// sign-in was started from that browser, and anyone could fill the log
// with them (as with a 401).

const (
	// signInCookie binds a flow's state to the browser.
	signInCookie = "harvest_signin"
	// signInFlowTTL is how long a person has at the provider.
	signInFlowTTL = 10 * time.Minute
	// userSessionPrefix starts the cookie secret of a user's own sign-in.
	userSessionPrefix = "hvu_"
	// providerTimeout bounds each call to a provider (token exchange,
	// GET /user, discovery, keys).
	providerTimeout = 30 * time.Second
)

// SignIn configures sign-in with a provider (Config.SignIn).
type SignIn struct {
	// GitHub, when set, enables "Sign in with GitHub".
	GitHub *GitHubSignIn
	// OIDC, when set, enables "Sign in with <OIDC.Name>".
	OIDC *OIDCSignIn
	// PublicURL is the server's URL as browsers reach it, like
	// https://harvest.example.com: the callbacks are under it and must be
	// registered with the providers. "" takes each request's scheme and
	// Host.
	PublicURL string
	// HTTPClient makes the calls to the providers (default: one with
	// providerTimeout).
	HTTPClient *http.Client
	// Now is the clock (default time.Now): a GitHub token is refreshed
	// when it expires within githubRefreshMargin of it.
	Now func() time.Time
}

func (c *SignIn) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *SignIn) client() *http.Client {
	if c.HTTPClient != nil {
		return c.HTTPClient
	}
	return &http.Client{Timeout: providerTimeout}
}

// Providers is the answer of GET /v1/auth/providers: which sign-ins the
// page offers.
type Providers struct {
	// Token: the token form (always).
	Token bool `json:"token"`
	// GitHub: "Sign in with GitHub" goes to GitHubURL.
	GitHub    bool   `json:"github"`
	GitHubURL string `json:"github_url,omitempty"`
	// OIDC: "Sign in with OIDCName" goes to OIDCURL.
	OIDC     bool   `json:"oidc"`
	OIDCName string `json:"oidc_name,omitempty"`
	OIDCURL  string `json:"oidc_url,omitempty"`
}

func (s *Server) providers(w http.ResponseWriter, r *http.Request, _ caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	p := Providers{Token: true}
	if s.cfg.SignIn.GitHub != nil {
		p.GitHub, p.GitHubURL = true, "/v1/auth/github"
	}
	if o := s.cfg.SignIn.OIDC; o != nil {
		p.OIDC, p.OIDCName, p.OIDCURL = true, o.name(), "/v1/auth/oidc"
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// randomString is n random bytes, base64url.
func randomString(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// callbackURL is the absolute URL of a callback path on this server.
func (s *Server) callbackURL(r *http.Request, path string) string {
	if p := strings.TrimSuffix(s.cfg.SignIn.PublicURL, "/"); p != "" {
		return p + path
	}
	scheme := "http"
	if overTLS(r) {
		scheme = "https"
	}
	return scheme + "://" + r.Host + path
}

// returnPath is where a sign-in lands: a path of the UI (not the API,
// not another site), else the list.
func returnPath(p string) string {
	// A browser drops tabs and newlines from a URL and reads \ as /, so
	// "/\t/evil.example" would be "//evil.example": no control character
	// and no backslash anywhere.
	if p == "" || !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/v1/") || len(p) > 1000 ||
		strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
		return "/"
	}
	return p
}

// startFlow stores a flow and sets its cookie; the state is returned for
// the provider's redirect.
func (s *Server) startFlow(w http.ResponseWriter, r *http.Request, provider, verifier, nonce string) (string, *apiError) {
	state := randomString(32)
	now := s.cfg.SignIn.now().UTC()
	f := &store.SignInFlow{Hash: HashToken(state), Provider: provider, Verifier: verifier, Nonce: nonce,
		Return: returnPath(r.URL.Query().Get("return")), CreatedAt: now, ExpiresAt: now.Add(signInFlowTTL)}
	if err := s.cfg.Store.CreateSignInFlow(r.Context(), f); err != nil {
		return "", storeFailed("starting the sign-in", err)
	}
	http.SetCookie(w, &http.Cookie{Name: signInCookie, Value: state, Path: "/v1/auth/", MaxAge: int(signInFlowTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: overTLS(r)})
	return state, nil
}

// refusal is a sign-in refused: what the person is told (on the sign-in
// page), the audit result, and the detail recorded.
type refusal struct {
	result  string // the audit result: forbidden, unauthorized, invalid, unavailable
	message string
	detail  map[string]any
	user    string
}

func refuse(result, format string, args ...any) *refusal {
	return &refusal{result: result, message: fmt.Sprintf(format, args...)}
}

// callbackFlow is a callback's takeFlow with its refusal answered: the
// browser is sent back to the page with the reason (and the refusal
// audited when the browser had started a sign-in here). nil: answered.
func (s *Server) callbackFlow(w http.ResponseWriter, r *http.Request, provider string) *store.SignInFlow {
	f, hadCookie, rf := s.takeFlow(w, r, provider)
	if rf == nil {
		return f
	}
	if !hadCookie {
		http.Redirect(w, r, "/?signin_error="+urlQueryEscape(rf.message), http.StatusFound)
	} else {
		s.refused(w, r, provider, rf)
	}
	return nil
}

// takeFlow checks a callback's state against the browser's cookie and
// takes the flow. hadCookie says whether the browser started a sign-in
// here at all (a refusal without is not recorded).
func (s *Server) takeFlow(w http.ResponseWriter, r *http.Request, provider string) (f *store.SignInFlow, hadCookie bool, rf *refusal) {
	// The cookie is spent whatever happens next.
	http.SetCookie(w, &http.Cookie{Name: signInCookie, Value: "", Path: "/v1/auth/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: overTLS(r)})
	ck, err := r.Cookie(signInCookie)
	if err != nil || ck.Value == "" {
		return nil, false, refuse("forbidden", "this browser has no sign-in under way (no %s cookie): the sign-in took longer than %s, or was started in another browser; sign in again", signInCookie, signInFlowTTL)
	}
	state := r.URL.Query().Get("state")
	if state == "" || subtle.ConstantTimeCompare([]byte(state), []byte(ck.Value)) != 1 {
		return nil, true, refuse("forbidden", "the sign-in's state does not match this browser's: the answer is not for the sign-in this browser started (a forged or stale link); sign in again")
	}
	f, err = s.cfg.Store.TakeSignInFlow(r.Context(), HashToken(state), s.cfg.SignIn.now())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, true, refuse("forbidden", "this sign-in was completed already or has expired (after %s): sign in again", signInFlowTTL)
	case err != nil:
		return nil, true, refuse("unavailable", "the server could not read the sign-in (%v): try again", err)
	case f.Provider != provider:
		return nil, true, refuse("forbidden", "this sign-in was started with %s, not %s: sign in again", f.Provider, provider)
	}
	if e := r.URL.Query().Get("error"); e != "" {
		return f, true, refuse("forbidden", "%s did not sign you in: %s (%s)", provider, clip(e, 100), clip(r.URL.Query().Get("error_description"), 300))
	}
	if r.URL.Query().Get("code") == "" {
		return f, true, refuse("invalid", "%s's answer has no code: sign in again", provider)
	}
	return f, true, nil
}

// finishSignIn gives u a web session of its own and sends the browser
// to where it started, recording the sign-in.
func (s *Server) finishSignIn(w http.ResponseWriter, r *http.Request, f *store.SignInFlow, u *store.User, detail map[string]any) {
	if u.Disabled {
		s.refused(w, r, f.Provider, &refusal{result: "unauthorized", user: u.ID, detail: detail,
			message: fmt.Sprintf("user %s (%s) is disabled: an admin enables them again (harvest user enable %s)", u.ID, u.Name, u.ID)})
		return
	}
	secret := userSessionPrefix + randomString(32)
	now := time.Now().UTC()
	ws := &store.WebSession{Hash: HashToken(secret), User: u.ID, Via: f.Provider, CreatedAt: now, ExpiresAt: now.Add(webSessionTTL)}
	if err := s.cfg.Store.CreateWebSession(r.Context(), ws); err != nil {
		s.refused(w, r, f.Provider, &refusal{result: "unavailable", user: u.ID, detail: detail, message: "the server could not record the sign-in: " + err.Error()})
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: secret, Path: "/", Expires: ws.ExpiresAt, MaxAge: int(webSessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r),
	})
	s.auditSignIn(r, "auth.sign_in", u.ID, store.AuditOK, detail)
	http.Redirect(w, r, returnPath(f.Return), http.StatusFound)
}

// refused sends the browser back to the sign-in page with the reason
// (?signin_error=), recording the refusal when the browser had started
// a sign-in here.
func (s *Server) refused(w http.ResponseWriter, r *http.Request, provider string, rf *refusal) {
	d := map[string]any{"via": provider, "why": rf.message}
	for k, v := range rf.detail {
		d[k] = v
	}
	s.auditSignIn(r, "auth.sign_in", rf.user, rf.result, d)
	s.log.Info("sign-in refused", "via", provider, "user", rf.user, "why", rf.message)
	http.Redirect(w, r, "/?"+url.Values{"signin_error": {rf.message}}.Encode(), http.StatusFound)
}

// auditSignIn records a sign-in, its refusal or a sign-out.
func (s *Server) auditSignIn(r *http.Request, action, user, result string, detail map[string]any) {
	e := &store.AuditEntry{Action: action, Channel: store.ChannelUI, Remote: remoteIP(r), User: user, Target: user,
		Result: result, Time: time.Now().UTC(), Detail: mustJSON(detail)}
	s.recordAudit(r.Context(), e)
}

// userForIdentity is the user of an identity, made at first sight with
// role.
func (s *Server) userForIdentity(ctx context.Context, id *store.Identity, name string, role store.Role) (*store.User, bool, error) {
	return s.cfg.Store.UserForIdentity(ctx, id, &store.User{ID: store.NewUserID(), Name: name, Role: role})
}

// userCookieCaller authenticates a user's own sign-in (a secret with
// userSessionPrefix): the user, read with the web session.
func (s *Server) userCookieCaller(r *http.Request, secret string) (caller, *apiError) {
	ws, u, err := s.cfg.Store.UserByWebSession(r.Context(), HashToken(secret), time.Now())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return caller{}, errorf(http.StatusUnauthorized, CodeUnauthorized, "the sign-in has expired or was signed out: sign in again")
	case err != nil:
		return caller{}, storeFailed("checking the sign-in", err)
	}
	if e := checkCSRF(r, secret); e != nil {
		return caller{}, e
	}
	if u.Disabled {
		return caller{}, errorf(http.StatusUnauthorized, CodeUnauthorized, fmt.Sprintf("user %s is disabled: an admin enables them again (harvest user enable %s)", u.ID, u.ID))
	}
	return callerForUser(u, secret, ws.Via), nil
}

// callerForUser is a request made by a user's own sign-in: the user
// stands where a token would (see the package doc above).
func callerForUser(u *store.User, secret, via string) caller {
	t := &store.Token{ID: u.ID, Name: u.Name, User: u.ID, Role: u.Role, Disabled: u.Disabled, Admin: u.Role == store.RoleAdmin, CreatedAt: u.CreatedAt}
	return caller{token: t, web: secret, via: via}
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
