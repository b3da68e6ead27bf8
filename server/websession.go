package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
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

// A browser signs in by exchanging an API token for a session cookie
// (POST /v1/auth/session), because EventSource cannot send an
// Authorization header and the token must not sit in page storage where
// any script could read it. The cookie is HttpOnly (scripts never see
// it), SameSite=Strict (other sites' requests do not carry it) and Secure
// when the request came over TLS; it holds a random secret of which the
// store keeps only the SHA-256 (store.WebSession), so signing out or
// deleting the token ends it.
//
// A cookie is ambient authority, so a state-changing request that
// authenticates with it must also prove it comes from our own page: the
// X-Harvest-CSRF header with the CSRF token of the sign-in (an HMAC of the
// cookie's secret, which only a same-origin script can learn, from the
// sign-in's answer or GET /v1/auth/session), and no Origin or
// Sec-Fetch-Site header saying it is cross-site. A bearer token is not
// ambient, so bearer requests need neither.

const (
	// SessionCookie is the name of the sign-in cookie.
	SessionCookie = "harvest_session"
	// CSRFHeader carries the CSRF token on a cookie-authenticated request
	// that changes state.
	CSRFHeader = "X-Harvest-CSRF"
	// webSessionTTL is how long a sign-in lasts.
	webSessionTTL = 7 * 24 * time.Hour
	// webSessionPrefix starts every cookie secret.
	webSessionPrefix = "hvs_"
)

// SignInRequest is the body of POST /v1/auth/session.
type SignInRequest struct {
	Token string `json:"token"`
}

// SignedIn is who a browser is signed in as, and the CSRF token its
// state-changing requests send in X-Harvest-CSRF.
type SignedIn struct {
	TokenID string `json:"token_id,omitempty"`
	Name    string `json:"name"`
	Admin   bool   `json:"admin"`
	// User is the id of the token's user (GET /v1/me says more).
	User string `json:"user,omitempty"`
	// Via is how the browser signed in: "github" or "oidc" for a
	// user's own sign-in (TokenID is then ""), else absent.
	Via       string    `json:"via,omitempty"`
	CSRFToken string    `json:"csrf_token"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// csrfToken is the CSRF token of a cookie secret.
func csrfToken(secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("harvest csrf v1"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sameOrigin refuses a request a browser says comes from another site:
// Sec-Fetch-Site other than same-origin, or an Origin whose host is not
// the request's. (Clients other than browsers send neither header.)
func sameOrigin(r *http.Request) *apiError {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return errorf(http.StatusForbidden, CodeForbidden, fmt.Sprintf("a cross-site request (Sec-Fetch-Site: %s) may not use the sign-in cookie: use the Harvest page itself, or send Authorization: Bearer TOKEN", clip(s, 40)))
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return errorf(http.StatusForbidden, CodeForbidden, fmt.Sprintf("a request from origin %q may not use the sign-in cookie of %s: use the Harvest page itself, or send Authorization: Bearer TOKEN", clip(o, 100), clip(r.Host, 100)))
		}
	}
	return nil
}

// safeMethod: requests that change nothing need no CSRF token.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// cookieCaller authenticates the sign-in cookie's secret; for a request
// that changes state it also checks the CSRF token and the origin.
func (s *Server) cookieCaller(r *http.Request, secret string) (caller, *apiError) {
	if strings.HasPrefix(secret, userSessionPrefix) {
		return s.userCookieCaller(r, secret) // signin.go
	}
	if !strings.HasPrefix(secret, webSessionPrefix) {
		return caller{}, errorf(http.StatusUnauthorized, CodeUnauthorized, "the "+SessionCookie+" cookie is not a sign-in: sign in again (POST /v1/auth/session)")
	}
	t, err := s.cfg.Store.TokenByWebSession(r.Context(), HashToken(secret), time.Now())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return caller{}, errorf(http.StatusUnauthorized, CodeUnauthorized, "the sign-in has expired, was signed out, or its token was deleted: sign in again with a token")
	case err != nil:
		return caller{}, &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: "checking the sign-in: " + err.Error(), cause: err}
	}
	if e := checkCSRF(r, secret); e != nil {
		return caller{}, e
	}
	if _, ok := NodeOf(t); ok {
		// Never made (signIn refuses them); refused all the same.
		return caller{}, errorf(http.StatusUnauthorized, CodeUnauthorized, "this sign-in is a node's token's: sign in again with a person's token")
	}
	if e := userOK(t); e != nil {
		return caller{}, e
	}
	return caller{token: t, web: secret}, nil
}

// checkCSRF: a cookie-authenticated request that changes state comes
// from our own page (its origin, and the sign-in's CSRF token).
func checkCSRF(r *http.Request, secret string) *apiError {
	if safeMethod(r.Method) {
		return nil
	}
	if e := sameOrigin(r); e != nil {
		return e
	}
	got := r.Header.Get(CSRFHeader)
	if got == "" {
		return errorf(http.StatusForbidden, CodeForbidden, "a request signed in by cookie that changes state needs the "+CSRFHeader+" header with the csrf_token of the sign-in (GET /v1/auth/session returns it)")
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(csrfToken(secret))) != 1 {
		return errorf(http.StatusForbidden, CodeForbidden, "the "+CSRFHeader+" header is not this sign-in's CSRF token: reload the page (GET /v1/auth/session returns the current one)")
	}
	return nil
}

// signIn exchanges a token for the sign-in cookie.
func (s *Server) signIn(w http.ResponseWriter, r *http.Request, _ caller) *apiError {
	if a := auditOf(r); a != nil {
		// A browser's sign-in, whatever it signs in with: the UI's, as
		// one with GitHub or OIDC (no cookie yet says so).
		a.e.Channel = store.ChannelUI
	}
	if e := noQuery(r); e != nil {
		return e
	}
	if e := sameOrigin(r); e != nil {
		return e // a forged sign-in would put the victim in the attacker's account
	}
	b, e := readBody(w, r)
	if e != nil {
		return e
	}
	var req SignInRequest
	if e := decodeBody(r.Header.Get("Content-Type"), b, &req, true); e != nil {
		return e
	}
	if req.Token == "" {
		return errorf(http.StatusBadRequest, CodeInvalid, "token: missing: send the API token to sign in with (harvest serve writes an admin token to DATA/admin-token; harvest token create makes more)")
	}
	if !strings.HasPrefix(req.Token, TokenPrefix) {
		return errorf(http.StatusBadRequest, CodeInvalid, "token: not an API token: they start with "+TokenPrefix)
	}
	t, err := s.cfg.Store.TokenByHash(r.Context(), HashToken(req.Token))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errorf(http.StatusUnauthorized, CodeUnauthorized, "unknown token: it was deleted or mistyped; use the one in DATA/admin-token or make one with harvest token create")
	case err != nil:
		return storeFailed("checking the token", err)
	}
	if node, ok := NodeOf(t); ok {
		return errorf(http.StatusForbidden, CodeForbidden, fmt.Sprintf("token %s is node %s's: a node's token never signs in; sign in with a person's token", t.ID, node))
	}
	if e := userOK(t); e != nil {
		return e
	}
	if a := auditOf(r); a != nil {
		a.e.User, a.e.Token, a.e.Target = t.User, t.ID, t.User
	}
	var key [32]byte
	rand.Read(key[:])
	secret := webSessionPrefix + base64.RawURLEncoding.EncodeToString(key[:])
	now := time.Now().UTC()
	ws := &store.WebSession{Hash: HashToken(secret), TokenID: t.ID, Via: store.WebViaToken, CreatedAt: now, ExpiresAt: now.Add(webSessionTTL)}
	if err := s.cfg.Store.CreateWebSession(r.Context(), ws); err != nil {
		return fromManager(err)
	}
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: secret, Path: "/", Expires: ws.ExpiresAt, MaxAge: int(webSessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r),
	})
	writeJSON(w, http.StatusOK, SignedIn{TokenID: t.ID, Name: t.Name, Admin: (caller{token: t}).admin(), User: t.User, CSRFToken: csrfToken(secret), ExpiresAt: ws.ExpiresAt})
	return nil
}

// whoAmI says who the caller is; signed in by cookie, with the CSRF token
// (a page that was reloaded learns it again here).
func (s *Server) whoAmI(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	out := SignedIn{TokenID: c.token.ID, Name: c.token.Name, Admin: c.admin(), User: c.token.User}
	if c.userSignIn() {
		out.TokenID, out.Via = "", c.via
	}
	if c.web != "" {
		out.CSRFToken = csrfToken(c.web)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// signOut ends the cookie's sign-in and clears the cookie.
func (s *Server) signOut(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noBody(w, r); e != nil {
		return e
	}
	if c.web == "" {
		return errorf(http.StatusBadRequest, CodeBadRequest, "this request is not signed in by cookie, so there is nothing to sign out of: a bearer token stays valid until harvest token delete")
	}
	if a := auditOf(r); a != nil && c.userSignIn() {
		a.addDetail(map[string]any{"via": c.via})
	}
	if err := s.cfg.Store.DeleteWebSession(r.Context(), HashToken(c.web)); err != nil {
		return fromManager(err)
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r)})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// overTLS: the request reached us, or the TLS proxy in front, over TLS.
// (Trusting X-Forwarded-Proto here only ever makes the cookie stricter.)
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}
