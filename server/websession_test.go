package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/wire"
)

// browser is what a signed-in page holds: the cookie (which its scripts
// never see) and the CSRF token of the sign-in.
type browser struct {
	e      *apiEnv
	cookie *http.Cookie
	csrf   string
}

// send makes a request with the cookie and, when set, the CSRF token and
// extra headers; it returns the status and the body.
func (b *browser) send(method, path string, body any, csrf string, hdr map[string]string) (int, []byte, *http.Response) {
	b.e.T.Helper()
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(testbin.Context(b.e.T), method, b.e.URL+path, rd)
	if err != nil {
		b.e.T.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if b.cookie != nil {
		req.AddCookie(b.cookie)
	}
	if csrf != "" {
		req.Header.Set(server.CSRFHeader, csrf)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := b.e.Transport.RoundTrip(req)
	if err != nil {
		b.e.T.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out, resp
}

// signIn exchanges token for the cookie, checking its attributes.
func signIn(e *apiEnv, token string, hdr map[string]string) *browser {
	e.T.Helper()
	b := &browser{e: e}
	st, body, resp := b.send(http.MethodPost, "/v1/auth/session", server.SignInRequest{Token: token}, "", hdr)
	if st != http.StatusOK {
		e.T.Fatalf("sign in: %d %s", st, body)
	}
	var si server.SignedIn
	if err := json.Unmarshal(body, &si); err != nil || si.CSRFToken == "" || si.TokenID == "" {
		e.T.Fatalf("sign in answered %s (%v)", body, err)
	}
	for _, c := range resp.Cookies() {
		if c.Name == server.SessionCookie {
			b.cookie = c
		}
	}
	if b.cookie == nil {
		e.T.Fatalf("sign in set no %s cookie: %v", server.SessionCookie, resp.Header["Set-Cookie"])
	}
	if !b.cookie.HttpOnly || b.cookie.SameSite != http.SameSiteStrictMode || b.cookie.Path != "/" || b.cookie.MaxAge <= 0 {
		e.T.Errorf("the cookie is not HttpOnly, SameSite=Strict, Path=/, with a lifetime: %q", resp.Header.Get("Set-Cookie"))
	}
	if strings.Contains(b.cookie.Value, token) {
		e.T.Errorf("the cookie holds the API token")
	}
	b.csrf = si.CSRFToken
	return b
}

// TestWebSignIn: a token buys a cookie that authenticates as that token
// (a user's sees only its own sessions), state changes need the CSRF
// token and the same origin, and signing out ends it.
func TestWebSignIn(t *testing.T) {
	e := newAPIEnv(t)
	bobs := e.create(e.BobC, "")
	alices := e.create(e.AliceC, "")

	b := signIn(e, e.Alice, nil)
	if b.cookie.Secure {
		t.Errorf("a cookie over plain HTTP is Secure: a browser would drop it")
	}
	if s := signIn(e, e.Alice, map[string]string{"X-Forwarded-Proto": "https"}); !s.cookie.Secure {
		t.Errorf("a sign-in through a TLS proxy set a cookie that is not Secure")
	}

	// Reading: Alice's sessions only; Bob's does not exist for her.
	st, body, _ := b.send(http.MethodGet, "/v1/sessions", nil, "", nil)
	var list wire.SessionList
	if st != 200 || json.Unmarshal(body, &list) != nil {
		t.Fatalf("list by cookie: %d %s", st, body)
	}
	if len(list.Sessions) != 1 || list.Sessions[0].ID != alices.ID {
		t.Errorf("Alice's cookie lists %s, want only her session %s (not Bob's %s)", body, alices.ID, bobs.ID)
	}
	if st, body, _ := b.send(http.MethodGet, "/v1/sessions/"+bobs.ID, nil, "", nil); st != 404 {
		t.Errorf("Alice's cookie reading Bob's session: %d %s, want 404", st, body)
	}
	st, body, _ = b.send(http.MethodGet, "/v1/auth/session", nil, "", nil)
	var who server.SignedIn
	if st != 200 || json.Unmarshal(body, &who) != nil || who.TokenID != e.AliceID || who.CSRFToken != b.csrf || who.Admin {
		t.Errorf("who am I by cookie: %d %s, want %s with the sign-in's CSRF token", st, body, e.AliceID)
	}
	// The event stream, as an EventSource would open it.
	rs := e.openRawCookie(b.cookie, alices.ID)
	if ev, err := rs.next(); err != nil || ev.id != "1" {
		t.Errorf("the first event by cookie: %+v %v", ev, err)
	}
	rs.close()

	// Changing state: refused without the CSRF token, with another, or
	// from another site; accepted from the page.
	msg := server.SendRequest{Text: "msg one"}
	path := "/v1/sessions/" + alices.ID + "/messages"
	for _, c := range []struct {
		name, csrf string
		hdr        map[string]string
	}{
		{"no CSRF token", "", nil},
		{"another CSRF token", strings.Repeat("A", len(b.csrf)), nil},
		{"another origin", b.csrf, map[string]string{"Origin": "http://evil.example"}},
		{"a cross-site fetch", b.csrf, map[string]string{"Sec-Fetch-Site": "cross-site"}},
	} {
		st, body, _ := b.send(http.MethodPost, path, msg, c.csrf, c.hdr)
		var eb server.ErrorBody
		json.Unmarshal(body, &eb)
		if st != 403 || !strings.Contains(eb.Error.Message, "cookie") && !strings.Contains(eb.Error.Message, server.CSRFHeader) {
			t.Errorf("%s: %d %s, want 403 saying why", c.name, st, body)
		}
	}
	if st, body, _ := b.send(http.MethodPost, path, msg, b.csrf, map[string]string{"Origin": e.URL, "Sec-Fetch-Site": "same-origin"}); st != 202 {
		t.Errorf("sending from the page: %d %s, want 202", st, body)
	}
	// A forged sign-in from another site (login CSRF) is refused too.
	if st, body, _ := (&browser{e: e}).send(http.MethodPost, "/v1/auth/session", server.SignInRequest{Token: e.Bob}, "", map[string]string{"Origin": "http://evil.example"}); st != 403 {
		t.Errorf("a cross-site sign-in: %d %s, want 403", st, body)
	}

	// Signing out needs the CSRF token too, then the cookie is dead.
	if st, _, _ := b.send(http.MethodDelete, "/v1/auth/session", nil, "", nil); st != 403 {
		t.Errorf("sign out without the CSRF token: %d, want 403", st)
	}
	st, _, resp := b.send(http.MethodDelete, "/v1/auth/session", nil, b.csrf, nil)
	if st != 204 {
		t.Fatalf("sign out: %d", st)
	}
	cleared := false
	for _, c := range resp.Cookies() {
		cleared = cleared || c.Name == server.SessionCookie && c.MaxAge < 0
	}
	if !cleared {
		t.Errorf("sign out did not clear the cookie: %v", resp.Header["Set-Cookie"])
	}
	if st, _, _ := b.send(http.MethodGet, "/v1/sessions", nil, "", nil); st != 401 {
		t.Errorf("the cookie after sign out: %d, want 401", st)
	}
}

// TestWebSignInRefuses: bad sign-ins say what was wrong; a deleted token
// ends its sign-ins; a bearer request has nothing to sign out of.
func TestWebSignInRefuses(t *testing.T) {
	e := newAPIEnv(t)
	for _, c := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"no body", ``, 400, "empty"},
		{"no token", `{}`, 400, "token: missing"},
		{"not a token", `{"token":"secret"}`, 400, "start with hvt_"},
		{"an unknown token", `{"token":"hvt_nope"}`, 401, "unknown token"},
		{"an unknown field", `{"token":"hvt_x","remember":true}`, 400, "remember"},
	} {
		st, eb, _ := e.doRaw(http.MethodPost, "/v1/auth/session", "", "application/json", []byte(c.body))
		if st != c.status || !strings.Contains(eb.Message, c.want) {
			t.Errorf("%s: %d %q, want %d mentioning %q", c.name, st, eb.Message, c.status, c.want)
		}
	}
	if st, eb, _ := e.doRaw(http.MethodDelete, "/v1/auth/session", "Bearer "+e.Alice, "", nil); st != 400 || !strings.Contains(eb.Message, "not signed in by cookie") {
		t.Errorf("sign out with a bearer token: %d %q", st, eb.Message)
	}
	carol, carolID := e.Token("carol", false)
	b := signIn(e, carol, nil)
	if err := e.AdminC.DeleteToken(testbin.Context(t), carolID); err != nil {
		t.Fatal(err)
	}
	if st, body, _ := b.send(http.MethodGet, "/v1/sessions", nil, "", nil); st != 401 || !strings.Contains(string(body), "sign in again") {
		t.Errorf("the cookie of a deleted token: %d %s, want 401", st, body)
	}
	b.cookie.Value = "junk"
	if st, _, _ := b.send(http.MethodGet, "/v1/sessions", nil, "", nil); st != 401 {
		t.Errorf("a junk cookie: %d, want 401", st)
	}
}

// openRawCookie opens a session's event stream with the sign-in cookie
// only, as a page's EventSource does.
func (e *apiEnv) openRawCookie(c *http.Cookie, id string) *rawStream {
	e.T.Helper()
	req, _ := http.NewRequestWithContext(testbin.Context(e.T), http.MethodGet, e.URL+"/v1/sessions/"+id+"/events", nil)
	req.AddCookie(c)
	resp, err := e.Transport.RoundTrip(req)
	if err != nil {
		e.T.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e.T.Fatalf("events by cookie: %s %s", resp.Status, b)
	}
	rs := &rawStream{resp: resp, rd: bufio.NewReader(resp.Body)}
	e.T.Cleanup(rs.close)
	return rs
}
