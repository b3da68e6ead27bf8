// Package client is a Go client of Harvest's HTTP API (package server; its types are package wire's):
// what the CLI's `harvest session ...` commands and the tests use.
//
// Every call takes a context and returns an *Error for an error response,
// carrying the API's status, code and message. Events streams (Events)
// reconnect on their own with Last-Event-ID, so a reader sees every event
// of a session once, in order, across disconnects and server restarts.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/wire"
)

// Client talks to one Harvest server with one token.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
	// ua is the User-Agent of its requests (SetUserAgent).
	ua string
}

// CLIUserAgent starts the User-Agent of the harvest command's requests:
// the server's audit log records them as the cli channel.
const CLIUserAgent = "harvest-cli/"

// SetUserAgent sets the User-Agent of c's requests (call it before using
// c). The CLI sets CLIUserAgent and its version.
func (c *Client) SetUserAgent(ua string) { c.ua = ua }

// New returns a client of the server at baseURL (like
// http://127.0.0.1:7777) using token. hc nil uses a client of its own.
func New(baseURL, token string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server URL %q: give it as http://HOST:PORT", baseURL)
	}
	if hc == nil {
		hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	return &Client{base: u, token: token, hc: hc}, nil
}

// URL is the server's base URL.
func (c *Client) URL() string { return c.base.String() }

// Error is an error response of the API.
type Error struct {
	Status  int
	Code    string // wire.Code*
	Message string
	Details []string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("the server answered %d %s", e.Status, http.StatusText(e.Status))
	}
	return e.Message
}

// IsNotFound reports whether err is a 404 from the server.
func IsNotFound(err error) bool { return StatusOf(err) == http.StatusNotFound }

// StatusOf returns the HTTP status of an *Error, else 0.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// request sends one call: in is encoded as the JSON body (nil: none), out
// decoded from a 2xx body (nil: ignored).
func (c *Client) request(ctx context.Context, method, path string, q url.Values, in, out any) error {
	return c.requestWith(ctx, method, path, q, nil, in, out)
}

// requestWith is request with extra headers.
func (c *Client) requestWith(ctx context.Context, method, path string, q url.Values, hdr http.Header, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	u := c.base.JoinPath(path)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	c.authorize(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.netError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return readError(resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decoding the response: %w", method, path, err)
	}
	return nil
}

// authorize sets a request's token and User-Agent.
func (c *Client) authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.ua != "" {
		req.Header.Set("User-Agent", c.ua)
	}
}

// netError says that the server could not be reached, and what to check.
func (c *Client) netError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return ue.Err
	}
	return fmt.Errorf("cannot reach the Harvest server at %s: %w (is harvest serve running? pass --server or set HARVEST_SERVER)", c.base, err)
}

// readError decodes an error response.
func readError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb wire.ErrorBody
	if json.Unmarshal(b, &eb) == nil && eb.Error.Code != "" {
		return &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message, Details: eb.Error.Details}
	}
	msg := strings.TrimSpace(string(b))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return &Error{Status: resp.StatusCode, Message: fmt.Sprintf("the server answered %d %s: %s (is this a Harvest server?)", resp.StatusCode, http.StatusText(resp.StatusCode), msg)}
}

// Health asks GET /healthz. A server shutting down answers 503: an
// *Error, with the Health it sent.
func (c *Client) Health(ctx context.Context) (*wire.Health, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base.JoinPath("/healthz").String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.netError(err)
	}
	defer resp.Body.Close()
	var h wire.Health
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&h); err != nil || h.Status == "" {
		return nil, &Error{Status: resp.StatusCode, Message: fmt.Sprintf("GET /healthz answered %d with no health status: is %s a Harvest server?", resp.StatusCode, c.base)}
	}
	if resp.StatusCode != http.StatusOK {
		return &h, &Error{Status: resp.StatusCode, Code: wire.CodeUnavailable, Message: fmt.Sprintf("the server is %s", strings.ReplaceAll(h.Status, "_", " "))}
	}
	return &h, nil
}

// CreateSession creates a session.
func (c *Client) CreateSession(ctx context.Context, req wire.CreateRequest) (*wire.View, error) {
	var v wire.View
	return &v, c.request(ctx, http.MethodPost, "/v1/sessions", nil, req, &v)
}

// ListOptions filter ListSessions; zero fields match all.
type ListOptions struct {
	States []wire.State
	// Limit: ListSessions returns at most this many (0: all, page after
	// page); for ListSessionsPage it is the page's size (0: the server's
	// default, 1000).
	Limit         int
	UpdatedBefore time.Time
	Owner         string // a token id (admins)
	// Cursor continues a list (ListSessionsPage): the NextCursor of the page
	// before.
	Cursor string
	// PageSize is the size of the pages ListSessions asks for (0: 1000, the
	// largest the server answers).
	PageSize int
}

// maxPage is the largest page GET /v1/sessions answers.
const maxPage = 1000

// ListSessions lists sessions, newest first: every one that matches (or
// o.Limit), following the pages of GET /v1/sessions.
func (c *Client) ListSessions(ctx context.Context, o ListOptions) ([]*wire.Session, error) {
	want, size := o.Limit, o.PageSize
	if size <= 0 || size > maxPage {
		size = maxPage
	}
	var out []*wire.Session
	for {
		o.Limit = size
		if want > 0 {
			o.Limit = min(size, want-len(out))
		}
		p, err := c.ListSessionsPage(ctx, o)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Sessions...)
		if p.NextCursor == "" || (want > 0 && len(out) >= want) {
			return out, nil
		}
		if p.NextCursor == o.Cursor {
			return nil, fmt.Errorf("GET /v1/sessions answered the same cursor twice (%s): not following it", p.NextCursor)
		}
		o.Cursor = p.NextCursor
	}
}

// ListSessionsPage lists one page of sessions, newest first; its NextCursor
// (as o.Cursor) asks for the next.
func (c *Client) ListSessionsPage(ctx context.Context, o ListOptions) (*wire.SessionList, error) {
	q := url.Values{}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if len(o.States) > 0 {
		var s []string
		for _, st := range o.States {
			s = append(s, string(st))
		}
		q.Set("state", strings.Join(s, ","))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if !o.UpdatedBefore.IsZero() {
		q.Set("updated_before", o.UpdatedBefore.UTC().Format(time.RFC3339Nano))
	}
	if o.Owner != "" {
		q.Set("owner", o.Owner)
	}
	var l wire.SessionList
	if err := c.request(ctx, http.MethodGet, "/v1/sessions", q, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// GetSession returns a session with its queue.
func (c *Client) GetSession(ctx context.Context, id string) (*wire.View, error) {
	var v wire.View
	return &v, c.request(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(id), nil, nil, &v)
}

// Send sends a message; mode "" is the session's.
func (c *Client) Send(ctx context.Context, id, text, mode string) (*wire.Message, error) {
	var m wire.Message
	return &m, c.request(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/messages", nil, wire.SendRequest{Text: text, Mode: mode}, &m)
}

// SendOnce sends a message with an idempotency key: calling it again with
// the same key (after a timeout, a lost connection, a 503 while the server
// restarts) gives back the message stored the first time, never a second
// one. Use a new unique key (NewIdempotencyKey) per message. The same key
// with another text or mode is a 409 conflict.
func (c *Client) SendOnce(ctx context.Context, id, key, text, mode string) (*wire.Message, error) {
	var m wire.Message
	hdr := http.Header{wire.IdempotencyKeyHeader: {key}}
	return &m, c.requestWith(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/messages", nil, hdr, wire.SendRequest{Text: text, Mode: mode}, &m)
}

// NewIdempotencyKey returns a random key for SendOnce.
func NewIdempotencyKey() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return hex.EncodeToString(b[:])
}

// Cancel cancels the running turn of a session.
func (c *Client) Cancel(ctx context.Context, id string) error {
	return c.request(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/cancel", nil, nil, nil)
}

// Stop ends a session for good (its box destroyed, queued messages
// dropped; its workspace and history kept).
func (c *Client) Stop(ctx context.Context, id string, req wire.StopRequest) error {
	return c.request(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/stop", nil, req, nil)
}

// DeleteSession deletes a session (its box, workspace, messages, events).
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	return c.request(ctx, http.MethodDelete, "/v1/sessions/"+url.PathEscape(id), nil, nil, nil)
}

// Lock says who holds a session's lock.
func (c *Client) Lock(ctx context.Context, id string) (*wire.LockInfo, error) {
	var l wire.LockInfo
	return &l, c.request(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(id)+"/lock", nil, nil, &l)
}

// Unlock force-releases a session's lock (admin).
func (c *Client) Unlock(ctx context.Context, id string) error {
	return c.request(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/unlock", nil, nil, nil)
}

// EventLog returns a page of a session's stored events with seq > after
// (limit 0: the server's default page). Events the server's retention
// policy removed are an event.EventsCompacted per removed run (see
// Stream).
func (c *Client) EventLog(ctx context.Context, id string, after int64, limit int) (*wire.EventPage, error) {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var p wire.EventPage
	return &p, c.request(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(id)+"/log", q, nil, &p)
}

// Changes reads a session's changes since it started, in its box (409
// when it has none: suspended, starting or ended).
func (c *Client) Changes(ctx context.Context, id string) (*wire.Changes, error) {
	var ch wire.Changes
	return &ch, c.request(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(id)+"/diff", nil, nil, &ch)
}

// CreateToken makes an API token (admin); the secret is in the result only.
func (c *Client) CreateToken(ctx context.Context, name string, admin bool) (*wire.TokenCreated, error) {
	var t wire.TokenCreated
	return &t, c.request(ctx, http.MethodPost, "/v1/tokens", nil, wire.TokenRequest{Name: name, Admin: admin}, &t)
}

// ListTokens lists the API tokens (admin).
func (c *Client) ListTokens(ctx context.Context) ([]*wire.Token, error) {
	var l wire.TokenList
	if err := c.request(ctx, http.MethodGet, "/v1/tokens", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Tokens, nil
}

// DeleteToken deletes an API token (admin).
func (c *Client) DeleteToken(ctx context.Context, id string) error {
	return c.request(ctx, http.MethodDelete, "/v1/tokens/"+url.PathEscape(id), nil, nil, nil)
}

// PutSecret sets the secret name of scope ("repo:owner/name", admin
// tokens; "user:me", the caller's own) to value; session also gives it to
// sessions' environments. The value is never returned, by this or any call.
func (c *Client) PutSecret(ctx context.Context, scope, name, value string, session bool) (*wire.Secret, error) {
	var x wire.Secret
	return &x, c.request(ctx, http.MethodPut, secretPath(scope, name), nil, wire.SecretRequest{Value: value, Session: session}, &x)
}

// ListSecrets lists secrets (without values): an admin's, all; a user's,
// its own. Scopes, when given, narrow the list.
func (c *Client) ListSecrets(ctx context.Context, scopes ...string) ([]*wire.Secret, error) {
	q := url.Values{}
	for _, s := range scopes {
		q.Add("scope", s)
	}
	var l wire.SecretList
	if err := c.request(ctx, http.MethodGet, "/v1/secrets", q, nil, &l); err != nil {
		return nil, err
	}
	return l.Secrets, nil
}

// DeleteSecret deletes the secret name of scope.
func (c *Client) DeleteSecret(ctx context.Context, scope, name string) error {
	return c.request(ctx, http.MethodDelete, secretPath(scope, name), nil, nil, nil)
}

// secretPath is a secret's path, the / of a repository scope escaped.
func secretPath(scope, name string) string {
	return "/v1/secrets/" + url.PathEscape(scope) + "/" + url.PathEscape(name)
}
