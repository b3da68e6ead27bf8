package ghsim

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// # The App's user authorization (the OAuth web flow)
//
// GitHub's "Generating a user access token for a GitHub App" flow
// (docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-user-access-token-for-a-github-app),
// served at the root as github.com serves it (not under /api/v3):
//
//	GET  /login                        a sign-in form (a login name: the stand-in keeps no passwords)
//	POST /session                      signs the browser in (cookie ghsim_user), back to return_to
//	GET  /login/oauth/authorize        the App's authorization page, or a redirect to /login first;
//	                                   an App the person authorized before redirects at once, as GitHub does
//	POST /login/oauth/authorize        the page's Authorize (or Cancel) button
//	POST /login/oauth/access_token     a code (and PKCE verifier) or a refresh token for tokens
//
// A code lives 10 minutes and is taken once. The token request
// authenticates the App by client_id and client_secret (in the body, the
// query, or HTTP Basic); it answers form-encoded, or JSON when the request
// accepts application/json, and, as GitHub does, with 200 and an "error"
// field when it refuses: incorrect_client_credentials,
// bad_verification_code (a code unknown, used, expired or another App's,
// and a PKCE code_verifier that does not match the challenge),
// redirect_uri_mismatch, bad_refresh_token, unsupported_grant_type.
// The user-to-server token (ghu_...) lives Options.UserTokenTTL and acts as
// its person on the REST API (GET /user); its refresh token (ghr_...)
// lives Options.RefreshTokenTTL and is taken once. Not served: the
// device flow, the XML answer, scopes (a GitHub App's user token has
// none), and the authorization's revocation.

const (
	codeTTL        = 10 * time.Minute
	browserCookie  = "ghsim_user"
	oauthDocs      = "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors/"
	authorizeDocs  = "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-authorization-request-errors/"
	maxOAuthParams = 64 << 10
)

type oauthState struct {
	browsers   map[string]*user         // cookie → the person signed in
	codes      map[string]*authCode     // code → what it grants
	refresh    map[string]*refreshGrant // ghr_... → what it renews
	authorized map[string]bool          // appID/userID: the person authorized the App
}

type authCode struct {
	app       *app
	user      *user
	redirect  string // the redirect_uri the authorization was asked with ("" none)
	challenge string // the PKCE S256 challenge ("" none)
	expires   time.Time
}

type refreshGrant struct {
	app     *app
	user    *user
	expires time.Time
}

func (o *oauthState) init() {
	if o.browsers == nil {
		o.browsers, o.codes, o.refresh, o.authorized = map[string]*user{}, map[string]*authCode{}, map[string]*refreshGrant{}, map[string]bool{}
	}
}

// webPath says whether a path is github.com's web flow (oauthRoutes),
// not the REST API: its answers are not REST answers, so the request
// log keeps no response body for them (ghschema checks those it keeps).
func webPath(p string) bool {
	return p == "/login" || p == "/session" || p == "/favicon.ico" || strings.HasPrefix(p, "/login/oauth/")
}

func (s *Server) oauthRoutes(m *http.ServeMux) {
	m.HandleFunc("GET /login", s.loginPage)
	m.HandleFunc("POST /session", s.browserSignIn)
	m.HandleFunc("GET /login/oauth/authorize", s.authorizePage)
	m.HandleFunc("POST /login/oauth/authorize", s.authorizeDecision)
	m.HandleFunc("POST /login/oauth/access_token", s.accessToken)
	// A browser on the sign-in pages asks for the site's icon, as on
	// github.com: there is none to show, and it is not a REST call.
	m.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
}

// checkCallbackURL: an App's callback URL is an absolute http(s) URL.
func checkCallbackURL(u string) error {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.Fragment != "" {
		return fmt.Errorf("callback URL %q: want an absolute http or https URL without a fragment", u)
	}
	return nil
}

// SetCallbackURLs replaces an App's callback URLs.
func (s *Server) SetCallbackURLs(appID int64, urls []string) error {
	if len(urls) > 10 {
		return fmt.Errorf("%d callback URLs: GitHub allows at most 10", len(urls))
	}
	for _, u := range urls {
		if err := checkCallbackURL(u); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apps[appID]
	if a == nil {
		return fmt.Errorf("app %d: %w", appID, ErrNotFound)
	}
	a.callbacks = append([]string(nil), urls...)
	return nil
}

// redirectAllowed is GitHub's rule for a redirect_uri: the host (and
// port) of a callback URL exactly, and its path or a subdirectory of it.
func redirectAllowed(callbacks []string, redirect string) bool {
	r, err := url.Parse(redirect)
	if err != nil || r.Fragment != "" {
		return false
	}
	for _, c := range callbacks {
		cu, err := url.Parse(c)
		if err != nil {
			continue
		}
		if cu.Scheme != r.Scheme || cu.Host != r.Host {
			continue
		}
		cp, rp := strings.TrimSuffix(cu.Path, "/"), r.Path
		if rp == cu.Path || rp == cp || strings.HasPrefix(rp, cp+"/") {
			return true
		}
	}
	return false
}

var pages = template.Must(template.New("login").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Sign in to GitHub</title></head>
<body>
<h1>Sign in to GitHub</h1>
{{if .Error}}<p id="error" role="alert">{{.Error}}</p>{{end}}
<form method="post" action="/session">
<label for="login_field">Username or email address</label>
<input type="text" name="login" id="login_field" autocomplete="username" autofocus>
<input type="hidden" name="return_to" value="{{.ReturnTo}}">
<input type="submit" name="commit" value="Sign in" id="sign-in">
</form>
</body></html>`))

var authorizeTmpl = template.Must(template.New("authorize").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Authorize {{.AppName}}</title></head>
<body>
<h1>{{.AppName}} by {{.Owner}} would like permission to:</h1>
<p>Verify your GitHub identity (<strong>{{.Login}}</strong>) and act on your behalf.</p>
<form method="post" action="/login/oauth/authorize">
<input type="hidden" name="authenticity_token" value="{{.CSRF}}">
<input type="hidden" name="client_id" value="{{.ClientID}}">
<input type="hidden" name="redirect_uri" value="{{.Redirect}}">
<input type="hidden" name="state" value="{{.State}}">
<input type="hidden" name="code_challenge" value="{{.Challenge}}">
<input type="hidden" name="code_challenge_method" value="{{.Method}}">
<button type="submit" name="authorize" value="0" id="js-oauth-authorize-btn-cancel">Cancel</button>
<button type="submit" name="authorize" value="1" id="js-oauth-authorize-btn">Authorize {{.AppName}}</button>
</form>
<p>Authorizing will redirect to <strong>{{.Redirect}}</strong></p>
</body></html>`))

func htmlPage(w http.ResponseWriter, status int, t *template.Template, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Frame-Options", "deny")
	w.WriteHeader(status)
	t.Execute(w, data)
}

func (s *Server) loginPage(w http.ResponseWriter, req *http.Request) {
	htmlPage(w, http.StatusOK, pages, map[string]string{"ReturnTo": localPath(req.URL.Query().Get("return_to"))})
}

// localPath keeps a return_to on the stand-in itself.
func localPath(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
		return "/"
	}
	return p
}

// browserSignIn signs the browser in as the person named (any person
// AddUser made; the stand-in has no passwords).
func (s *Server) browserSignIn(w http.ResponseWriter, req *http.Request) {
	if err := req.ParseForm(); err != nil {
		htmlPage(w, http.StatusBadRequest, pages, map[string]string{"Error": "bad form: " + err.Error()})
		return
	}
	login, ret := strings.TrimSpace(req.PostForm.Get("login")), localPath(req.PostForm.Get("return_to"))
	s.mu.Lock()
	s.oauth.init()
	u := s.users[strings.ToLower(login)]
	if u == nil || u.typ != "User" {
		s.mu.Unlock()
		htmlPage(w, http.StatusUnauthorized, pages, map[string]string{"Error": "Incorrect username or password.", "ReturnTo": ret})
		return
	}
	c := newToken("")
	s.oauth.browsers[c] = u
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: browserCookie, Value: c, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, req, ret, http.StatusFound)
}

// browser is the person the request's cookie signed in, or nil. Called
// with s.mu held.
func (s *Server) browser(req *http.Request) *user {
	c, err := req.Cookie(browserCookie)
	if err != nil {
		return nil
	}
	return s.oauth.browsers[c.Value]
}

// authParams are an authorization request's parameters.
type authParams struct {
	clientID, redirect, state, challenge, method string
}

func readAuthParams(v url.Values) authParams {
	return authParams{clientID: v.Get("client_id"), redirect: v.Get("redirect_uri"), state: v.Get("state"),
		challenge: v.Get("code_challenge"), method: v.Get("code_challenge_method")}
}

// checkAuthorize validates an authorization request: the App, the
// redirect (defaulting to its first callback URL) and PKCE. On failure
// it has answered: an unknown App or no callback an HTML 404, a
// redirect_uri that is not allowed a redirect to the App's callback with
// error=redirect_uri_mismatch, as GitHub does. Called with s.mu held.
func (s *Server) checkAuthorize(w http.ResponseWriter, req *http.Request, p *authParams) *app {
	var a *app
	for _, x := range s.apps {
		if x.clientID == p.clientID && p.clientID != "" {
			a = x
		}
	}
	if a == nil || len(a.callbacks) == 0 {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, "<!DOCTYPE html><html><body><h1>404</h1><p>This is not the web page you are looking for (no application with this client_id, or it has no callback URL).</p></body></html>")
		return nil
	}
	if p.redirect == "" {
		p.redirect = a.callbacks[0]
	}
	if !redirectAllowed(a.callbacks, p.redirect) {
		authError(w, req, a.callbacks[0], p.state, "redirect_uri_mismatch", "The redirect_uri MUST match the registered callback URL for this application.", "#redirect-uri-mismatch")
		return nil
	}
	if p.challenge != "" || p.method != "" {
		// GitHub supports S256 only; a challenge is 43 to 128 characters.
		if p.method != "S256" || len(p.challenge) < 43 || len(p.challenge) > 128 {
			authError(w, req, p.redirect, p.state, "invalid_request", "code_challenge_method must be S256 and code_challenge 43 to 128 characters.", "")
			return nil
		}
	}
	return a
}

// authError redirects to the App's callback with an error, as GitHub
// does for a request it cannot authorize.
func authError(w http.ResponseWriter, req *http.Request, to, state, code, desc, anchor string) {
	q := url.Values{"error": {code}, "error_description": {desc}, "error_uri": {authorizeDocs + anchor}}
	if state != "" {
		q.Set("state", state)
	}
	http.Redirect(w, req, withQuery(to, q), http.StatusFound)
}

func withQuery(to string, q url.Values) string {
	u, err := url.Parse(to)
	if err != nil {
		return to
	}
	all := u.Query()
	for k, v := range q {
		all[k] = v
	}
	u.RawQuery = all.Encode()
	return u.String()
}

// csrfFor is the page's authenticity token: the browser cookie's HMAC-ish
// digest, so a form posted from elsewhere (no cookie) does not match.
func csrfFor(cookie string) string {
	h := sha256.Sum256([]byte("ghsim authorize " + cookie))
	return hex.EncodeToString(h[:16])
}

func (s *Server) authorizePage(w http.ResponseWriter, req *http.Request) {
	p := readAuthParams(req.URL.Query())
	s.mu.Lock()
	s.oauth.init()
	a := s.checkAuthorize(w, req, &p)
	if a == nil {
		s.mu.Unlock()
		return
	}
	u := s.browser(req)
	if u == nil {
		s.mu.Unlock()
		http.Redirect(w, req, "/login?"+url.Values{"return_to": {req.URL.RequestURI()}}.Encode(), http.StatusFound)
		return
	}
	if s.oauth.authorized[authKey(a, u)] {
		// Authorized before: GitHub redirects at once.
		to := s.grantCode(a, u, p)
		s.mu.Unlock()
		http.Redirect(w, req, to, http.StatusFound)
		return
	}
	ck, _ := req.Cookie(browserCookie)
	data := map[string]string{"AppName": a.name, "Owner": a.owner.login, "Login": u.login, "CSRF": csrfFor(ck.Value),
		"ClientID": a.clientID, "Redirect": p.redirect, "State": p.state, "Challenge": p.challenge, "Method": p.method}
	s.mu.Unlock()
	htmlPage(w, http.StatusOK, authorizeTmpl, data)
}

func authKey(a *app, u *user) string {
	return strconv.FormatInt(a.id, 10) + "/" + strconv.FormatInt(u.id, 10)
}

// grantCode makes a code for u's authorization of a and returns the
// redirect that hands it over. Called with s.mu held.
func (s *Server) grantCode(a *app, u *user, p authParams) string {
	code := newHex(10)
	s.oauth.codes[code] = &authCode{app: a, user: u, redirect: p.redirect, challenge: p.challenge, expires: s.now().Add(codeTTL)}
	q := url.Values{"code": {code}}
	if p.state != "" {
		q.Set("state", p.state)
	}
	return withQuery(p.redirect, q)
}

func (s *Server) authorizeDecision(w http.ResponseWriter, req *http.Request) {
	if err := req.ParseForm(); err != nil {
		http.Error(w, "bad form: "+err.Error(), http.StatusBadRequest)
		return
	}
	p := readAuthParams(req.PostForm)
	s.mu.Lock()
	s.oauth.init()
	a := s.checkAuthorize(w, req, &p)
	if a == nil {
		s.mu.Unlock()
		return
	}
	u := s.browser(req)
	ck, _ := req.Cookie(browserCookie)
	if u == nil || subtle.ConstantTimeCompare([]byte(req.PostForm.Get("authenticity_token")), []byte(csrfFor(ck.Value))) != 1 {
		s.mu.Unlock()
		http.Error(w, "422 Unprocessable Entity: the authenticity token is not this browser's (sign in and use the authorization page)", http.StatusUnprocessableEntity)
		return
	}
	if req.PostForm.Get("authorize") != "1" {
		s.mu.Unlock()
		authError(w, req, p.redirect, p.state, "access_denied", "The user has denied your application access.", "#access-denied")
		return
	}
	s.oauth.authorized[authKey(a, u)] = true
	to := s.grantCode(a, u, p)
	s.mu.Unlock()
	http.Redirect(w, req, to, http.StatusFound)
}

// tokenParams reads the token request's parameters: the query, then a
// form or JSON body (GitHub takes either), and HTTP Basic for the App's
// credentials.
func tokenParams(req *http.Request) (url.Values, error) {
	v := req.URL.Query()
	ct, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		var m map[string]any
		if err := json.NewDecoder(http.MaxBytesReader(nil, req.Body, maxOAuthParams)).Decode(&m); err != nil {
			return nil, err
		}
		for k, x := range m {
			if s, ok := x.(string); ok {
				v.Set(k, s)
			}
		}
	case "application/x-www-form-urlencoded", "":
		req.Body = http.MaxBytesReader(nil, req.Body, maxOAuthParams)
		if err := req.ParseForm(); err != nil {
			return nil, err
		}
		for k, x := range req.PostForm {
			v[k] = x
		}
	}
	if id, secret, ok := req.BasicAuth(); ok && v.Get("client_id") == "" {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
		v.Set("client_id", id)
		v.Set("client_secret", secret)
	}
	return v, nil
}

// tokenAnswer writes the token endpoint's answer in the format asked for.
func tokenAnswer(w http.ResponseWriter, req *http.Request, fields [][2]string) {
	if strings.Contains(req.Header.Get("Accept"), "application/json") {
		m := map[string]any{}
		for _, f := range fields {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil && strings.HasSuffix(f[0], "expires_in") {
				m[f[0]] = n
			} else {
				m[f[0]] = f[1]
			}
		}
		writeJSONPlain(w, m)
		return
	}
	q := url.Values{}
	for _, f := range fields {
		q.Set(f[0], f[1])
	}
	w.Header().Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	w.Write([]byte(q.Encode()))
}

func writeJSONPlain(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

func tokenError(w http.ResponseWriter, req *http.Request, code, desc, anchor string) {
	tokenAnswer(w, req, [][2]string{{"error", code}, {"error_description", desc}, {"error_uri", oauthDocs + anchor}})
}

var errBadParams = errors.New("bad parameters")

func (s *Server) accessToken(w http.ResponseWriter, req *http.Request) {
	v, err := tokenParams(req)
	if err != nil {
		http.Error(w, "400 Bad Request: "+errBadParams.Error()+": "+err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.oauth.init()
	var a *app
	for _, x := range s.apps {
		if x.clientID == v.Get("client_id") && v.Get("client_id") != "" {
			a = x
		}
	}
	if a == nil || subtle.ConstantTimeCompare([]byte(v.Get("client_secret")), []byte(a.clientSecret)) != 1 {
		tokenError(w, req, "incorrect_client_credentials", "The client_id and/or client_secret passed are incorrect.", "#incorrect-client-credentials")
		return
	}
	switch gt := v.Get("grant_type"); gt {
	case "", "authorization_code":
		c := s.oauth.codes[v.Get("code")]
		if c == nil || c.app != a || !s.now().Before(c.expires) {
			tokenError(w, req, "bad_verification_code", "The code passed is incorrect or expired.", "#bad-verification-code")
			return
		}
		if r := v.Get("redirect_uri"); r != "" && r != c.redirect {
			tokenError(w, req, "redirect_uri_mismatch", "The redirect_uri MUST match the registered callback URL for this application.", "#redirect-uri-mismatch")
			return
		}
		if c.challenge != "" {
			sum := sha256.Sum256([]byte(v.Get("code_verifier")))
			if v.Get("code_verifier") == "" || base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge {
				// The code stays unused: a client that sent the wrong
				// verifier may not retry with it either (it is gone).
				delete(s.oauth.codes, v.Get("code"))
				tokenError(w, req, "bad_verification_code", "The code_verifier does not match the code_challenge of the authorization request.", "#bad-verification-code")
				return
			}
		}
		delete(s.oauth.codes, v.Get("code"))
		s.issueUserToken(w, req, a, c.user)
	case "refresh_token":
		g := s.oauth.refresh[v.Get("refresh_token")]
		if g == nil || g.app != a || !s.now().Before(g.expires) {
			tokenError(w, req, "bad_refresh_token", "The refresh token passed is incorrect or expired.", "#bad-refresh-token")
			return
		}
		delete(s.oauth.refresh, v.Get("refresh_token"))
		s.issueUserToken(w, req, a, g.user)
	default:
		tokenError(w, req, "unsupported_grant_type", fmt.Sprintf("The grant type %q is not supported.", gt), "")
	}
}

// issueUserToken answers a user-to-server token and its refresh token.
// Called with s.mu held.
func (s *Server) issueUserToken(w http.ResponseWriter, req *http.Request, a *app, u *user) {
	now := s.now()
	t := &token{kind: tokUser, value: newToken("ghu_"), user: u, app: a, expires: now.Add(s.opts.UserTokenTTL)}
	s.tokens[t.value] = t
	r := newToken("ghr_") + newToken("") // GitHub's refresh tokens are longer: 76 characters
	s.oauth.refresh[r] = &refreshGrant{app: a, user: u, expires: now.Add(s.opts.RefreshTokenTTL)}
	tokenAnswer(w, req, [][2]string{
		{"access_token", t.value},
		{"expires_in", strconv.FormatInt(int64(s.opts.UserTokenTTL/time.Second), 10)},
		{"refresh_token", r},
		{"refresh_token_expires_in", strconv.FormatInt(int64(s.opts.RefreshTokenTTL/time.Second), 10)},
		{"scope", ""},
		{"token_type", "bearer"},
	})
}

func newHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
