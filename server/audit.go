package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// # The audit log
//
// A route whose table entry names an action (routes.go) is audited: once
// the caller is known, serve makes the request's entry (who: the token's
// user and the token; from where: the channel and the peer's address;
// what: the action and the path's id) and records it when the handler
// returns, with "ok" or the error code it answered. A change the store
// can record in its own transaction (CreateToken, DeleteToken,
// CreateUser, UpdateUser, PutSecret, DeleteSecret: store.WithAudit) is
// recorded there, with the change, and not again; anything else is
// recorded right after, whatever the result. A request refused before it
// is known whose it is (401) is not recorded: no one is known, and
// anyone could fill the log with them.
//
// The log is append only from the API's point of view: GET /v1/audit
// reads it (admin tokens only), nothing writes or deletes entries.

// audited are the routes that are audited, by "METHOD path" as in the
// table (routes.go), and their actions. TestAuditedRoutes checks that
// each is a route.
var audited = map[string]string{
	"POST /v1/auth/session":                             "auth.sign_in",
	"DELETE /v1/auth/session":                           "auth.sign_out",
	"POST /v1/sessions":                                 "session.create",
	"DELETE /v1/sessions/{id}":                          "session.delete",
	"POST /v1/sessions/{id}/messages":                   "session.send",
	"POST /v1/sessions/{id}/cancel":                     "session.cancel",
	"POST /v1/sessions/{id}/stop":                       "session.stop",
	"GET /v1/sessions/{id}/shell":                       "session.shell",
	"POST /v1/sessions/{id}/unlock":                     "session.unlock",
	"POST /v1/tokens":                                   "token.create",
	"DELETE /v1/tokens/{id}":                            "token.delete",
	"POST /v1/users":                                    "user.create",
	"PATCH /v1/users/{id}":                              "user.update",
	"DELETE /v1/users/{id}/identities/{kind}/{subject}": "identity.unlink",
	"POST /v1/slack/links/{code}":                       "identity.link",
	"POST /v1/teams":                                    "team.create",
	"DELETE /v1/teams/{team}":                           "team.delete",
	"POST /v1/teams/{team}/members":                     "team.add_member",
	"DELETE /v1/teams/{team}/members/{user}":            "team.remove_member",
	"PUT /v1/users/{id}/budget":                         "budget.set",
	"DELETE /v1/users/{id}/budget":                      "budget.delete",
	"PUT /v1/teams/{team}/budget":                       "budget.set",
	"DELETE /v1/teams/{team}/budget":                    "budget.delete",
	"PUT /v1/secrets/{scope}/{name}":                    "secret.put",
	"DELETE /v1/secrets/{scope}/{name}":                 "secret.delete",
	"POST /v1/environments":                             "environment.prepare",
	"POST /v1/github/webhook":                           "github.webhook",
	"POST /v1/github/deliveries/{id}/replay":            "github.replay",
	"POST /v1/slack/events":                             "slack.events",
	"PUT /v1/memory/entity":                             "memory.put",
	"DELETE /v1/memory/entity":                          "memory.delete",
}

// auditing is a request's audit entry while the request is served.
type auditing struct {
	e *store.AuditEntry
	// ctx is the request's context: the entry is written with its values
	// (its store budget), not its cancellation.
	ctx context.Context
	// done: recorded already (a shell, recorded when it opens), or not
	// to be recorded (a webhook delivery that was taken).
	done bool
	// result, when set, is the result of a handler that answered the
	// client itself with an error (it returned nil).
	result string
}

type auditKey struct{}

// auditOf is the request's entry, or nil for a route that is not audited.
func auditOf(r *http.Request) *auditing {
	a, _ := r.Context().Value(auditKey{}).(*auditing)
	return a
}

// channelOf is where a request came from. The CLI says so in its
// User-Agent (client.CLIUserAgent): a claim, good for telling the
// channels apart, not for trusting them.
func channelOf(r *http.Request, c caller) string {
	switch {
	case c.node != "":
		return store.ChannelNode
	case c.web != "":
		return store.ChannelUI
	case strings.HasPrefix(r.UserAgent(), "harvest-cli/"):
		return store.ChannelCLI
	}
	return store.ChannelAPI
}

// remoteIP is the peer's address without its port.
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// startAudit makes the entry of a request to an audited route and puts it
// in the request's context (for the handler, and for the store calls
// that record it in their transaction).
func startAudit(r *http.Request, action string, c caller) (*http.Request, *auditing) {
	e := &store.AuditEntry{Action: action, Channel: channelOf(r, c), Remote: remoteIP(r), Time: time.Now().UTC()}
	if c.token != nil {
		e.User, e.Token = c.token.User, c.token.ID
		if c.userSignIn() {
			e.Token = "" // a user's own sign-in: no token (signin.go)
		}
	}
	switch {
	case r.PathValue("scope") != "":
		e.Target = r.PathValue("scope") + "/" + r.PathValue("name")
	case r.PathValue("id") != "":
		e.Target = r.PathValue("id")
	}
	if by := r.Header.Get("Harvest-Forwarded-By"); by != "" {
		// Forwarded by another node (server/cluster): the peer is that node.
		e.Detail = mustJSON(map[string]string{"forwarded_by": clip(by, 100)})
	}
	a := &auditing{e: e, ctx: r.Context()}
	ctx := context.WithValue(r.Context(), auditKey{}, a)
	return r.WithContext(store.WithAudit(ctx, e)), a
}

// finishAudit records a request's entry with its result, unless the
// store recorded it with the change (which then succeeded) or it is done.
func (s *Server) finishAudit(a *auditing, res *apiError) {
	if a.done || (res == nil && a.e.ID != 0) {
		return
	}
	e := *a.e
	e.ID, e.Result = 0, store.AuditOK
	switch {
	case res != nil:
		e.Result = res.code
	case a.result != "":
		e.Result = a.result
	}
	s.recordAudit(a.ctx, &e)
}

// recordNow records the entry now, as succeeded, for a handler that
// goes on long after the action (a shell): finishAudit then records
// nothing.
func (s *Server) recordNow(a *auditing) {
	if a == nil || a.done {
		return
	}
	e := *a.e
	e.ID, e.Result = 0, store.AuditOK
	s.recordAudit(a.ctx, &e)
	a.done = true
}

// recordAudit appends e, whatever became of the request's context (its
// client may be gone), within the request's store budget (a store that
// does not answer does not hold the answer up: --store-timeout) and a
// deadline; a failure is logged, and the entry is lost.
func (s *Server) recordAudit(rctx context.Context, e *store.AuditEntry) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(rctx), 10*time.Second)
	defer cancel()
	if err := s.cfg.Store.AppendAudit(ctx, e); err != nil {
		s.log.Error("recording an audit entry", "action", e.Action, "target", e.Target, "user", e.User, "err", err)
	}
}

// addDetail merges kv into the entry's detail.
func (a *auditing) addDetail(kv map[string]any) {
	if a == nil {
		return
	}
	m := map[string]any{}
	if len(a.e.Detail) > 0 {
		json.Unmarshal(a.e.Detail, &m)
	}
	for k, v := range kv {
		m[k] = v
	}
	a.e.Detail = mustJSON(m)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // maps of strings and numbers
	}
	return b
}

// The audit cursor is opaque to callers, like the session list's:
// base64url of "a1.<id>", the last entry of a page.
const auditCursorVersion = "a1"

func makeAuditCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(auditCursorVersion + "." + strconv.FormatInt(id, 10)))
}

func parseAuditCursor(c string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, fmt.Errorf("not a cursor this server gave out")
	}
	v, n, ok := strings.Cut(string(b), ".")
	id, err := strconv.ParseInt(n, 10, 64)
	if !ok || v != auditCursorVersion || err != nil || id <= 0 {
		return 0, fmt.Errorf("not a cursor of GET /v1/audit")
	}
	return id, nil
}

// listAudit pages through the audit log, newest first.
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	f := store.AuditFilter{Limit: 100}
	for k, vs := range r.URL.Query() {
		v := vs[len(vs)-1]
		switch k {
		case "user":
			f.User = v
		case "action":
			f.Action = v
		case "since", "until":
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("%s %q: give a time like 2026-01-02T15:04:05Z (RFC 3339)", k, clip(v, 80)))
			}
			if k == "since" {
				f.Since = t
			} else {
				f.Until = t
			}
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1000 {
				return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("limit %q: give a whole number from 1 to 1000", clip(v, 40)))
			}
			f.Limit = n
		case "cursor":
			id, err := parseAuditCursor(v)
			if err != nil {
				return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("cursor %q: %v: give the next_cursor of the page before, or none for the first page", clip(v, 80), err))
			}
			f.Before = id
		default:
			return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("unknown query parameter %q: GET /v1/audit takes user, action, since, until, limit and cursor", clip(k, 40)))
		}
	}
	size := f.Limit
	f.Limit = size + 1
	es, err := s.cfg.Store.ListAudit(r.Context(), f)
	if err != nil {
		return fromManager(err)
	}
	out := wire.AuditList{Entries: []*wire.AuditEntry{}}
	if len(es) > size {
		es = es[:size]
		out.NextCursor = makeAuditCursor(es[size-1].ID)
	}
	for _, e := range es {
		out.Entries = append(out.Entries, &wire.AuditEntry{ID: e.ID, Time: e.Time, User: e.User, Token: e.Token, Channel: e.Channel,
			Remote: e.Remote, Action: e.Action, Target: e.Target, Result: e.Result, Detail: e.Detail})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
