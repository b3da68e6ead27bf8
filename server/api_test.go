package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/stacktest/apitest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// docOps lists the operations of openapi.json (which TestOpenAPIMatchesRoutes
// keeps equal to the route table): method, path, whether it takes a JSON
// body, whether it is public, whether it is for admins.
type docOp struct {
	method, path      string
	body, open, admin bool
}

func docOps(t *testing.T) []docOp {
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(server.OpenAPI(), &d); err != nil {
		t.Fatal(err)
	}
	var ops []docOp
	for path, item := range d.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			var op struct {
				Security    *[]any         `json:"security"`
				RequestBody map[string]any `json:"requestBody"`
				Responses   map[string]any `json:"responses"`
			}
			json.Unmarshal(raw, &op)
			// A 403 of Forbidden is an admin route's; CrossSite is a
			// cookie request's without its CSRF token (websession.go).
			forbidden := strings.Contains(fmt.Sprint(op.Responses["403"]), "/Forbidden")
			ops = append(ops, docOp{
				method: strings.ToUpper(method), path: path, body: op.RequestBody != nil,
				open: op.Security != nil && len(*op.Security) == 0,
				// GET /v1/sessions: 403 only for ?owner=; the secrets routes:
				// for another token's scope (secrets_test.go); the memory
				// routes: for a repository the token has no session on
				// (memory_test.go); unlinking an identity: another
				// person's, or one a user signs in with (slacklinks_test.go).
				admin: forbidden && path != "/v1/sessions" && !strings.HasPrefix(path, "/v1/secrets") && !strings.HasPrefix(path, "/v1/memory") &&
					!strings.Contains(path, "/identities/"),
			})
		}
	}
	slices.SortFunc(ops, func(a, b docOp) int { return strings.Compare(a.method+a.path, b.method+b.path) })
	return ops
}

// TestEveryEndpointRejectsBadRequests sends every operation of the API
// every kind of bad request: no token, a bad token, a user token on an
// admin route, ids that are malformed or unknown, unknown query
// parameters, malformed JSON, unknown fields, an empty body, a second
// object, an oversized body (with and without Content-Length), a body that
// is not JSON, a method the path does not take. Each gets its 4xx and the
// JSON error envelope, and none of them changes anything.
func TestEveryEndpointRejectsBadRequests(t *testing.T) {
	e := newAPIEnv(t)
	v := e.create(e.AliceC, "")
	ctx := testbin.Context(t)
	st := e.AliceC.Events(ctx, v.ID, client.StreamOptions{})
	defer st.Close()
	stacktest.ReadUntil(t, st, "idle", stacktest.IsState(store.StateIdle))
	before, err := e.Store.Events(ctx, v.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}

	bearer := func(s string) string { return "Bearer " + s }
	huge := append(append([]byte(`{"text":"`), bytes.Repeat([]byte("x"), server.MaxBody)...), `"}`...)
	type expect struct {
		status int
		code   string
		msg    string
	}
	check := func(what string, status int, info server.ErrorInfo, want expect) {
		t.Helper()
		if status != want.status || info.Code != want.code || !strings.Contains(info.Message, want.msg) {
			t.Errorf("%s: %d %s %q\n  want %d %s containing %q", what, status, info.Code, info.Message, want.status, want.code, want.msg)
		}
	}
	// The parameters of a path other than {id}, as they are everywhere.
	otherParams := strings.NewReplacer("{scope}", "user:me", "{name}", "X_TOKEN", "{team}", "qa", "{user}", store.UserIDForToken(e.BobID),
		"{kind}", "slack", "{subject}", "U0BOB")
	ops := docOps(t)
	if len(ops) < 15 {
		t.Fatalf("only %d operations in openapi.json", len(ops))
	}
	for _, op := range ops {
		path := strings.ReplaceAll(op.path, "{id}", v.ID)
		path = otherParams.Replace(path)
		if strings.HasPrefix(op.path, "/v1/tokens/") {
			path = strings.ReplaceAll(op.path, "{id}", e.BobID)
		}
		if strings.HasPrefix(op.path, "/v1/users/") {
			path = strings.ReplaceAll(op.path, "{id}", store.UserIDForToken(e.BobID))
		}
		if strings.HasPrefix(op.path, "/v1/environments/") {
			path = strings.ReplaceAll(op.path, "{id}", "env-0000000000000000")
		}
		delivery := strings.HasPrefix(op.path, "/v1/github/deliveries/")
		if delivery {
			path = strings.ReplaceAll(op.path, "{id}", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
		}
		name := op.method + " " + op.path
		tok := bearer(e.Alice)
		if op.admin || strings.Contains(op.path, "/identities/") { // another user's: an admin's to unlink
			tok = bearer(e.Admin)
		}
		if op.path == "/v1/github/webhook" {
			// Signed, not bearer-authenticated; this server has no GitHub
			// (internal/cli's GitHub tests have one).
			status, info, _ := e.doRaw(op.method, path, "", "", nil)
			check(name+" on a server without GitHub", status, info, expect{404, server.CodeNotFound, "this server has no GitHub configured"})
			continue
		}
		if op.path == "/v1/slack/events" {
			// Signed, not bearer-authenticated; this server has no Slack
			// (internal/cli's Slack tests have one).
			status, info, _ := e.doRaw(op.method, path, "", "", nil)
			check(name+" on a server without Slack", status, info, expect{404, server.CodeNotFound, "this server takes no Slack events over HTTP"})
			continue
		}
		if op.path == "/v1/auth/session" && op.open {
			// Signing in takes a token in its body (websession_test.go).
			status, info, _ := e.doRaw(op.method, path, "", "", nil)
			check(name+" without a body", status, info, expect{400, server.CodeBadRequest, "the request body is empty"})
			continue
		}
		if strings.HasPrefix(op.path, "/v1/auth/github") || strings.HasPrefix(op.path, "/v1/auth/oidc") {
			// Signing in with GitHub or OIDC, which this server does not
			// offer (signin_test.go: servers that do).
			status, info, _ := e.doRaw(op.method, path, "", "", nil)
			check(name+" on a server without it", status, info, expect{404, server.CodeNotFound, "not set up on this server"})
			continue
		}
		if op.open {
			status, _, _ := e.doRaw(op.method, path, "", "", nil)
			if status != 200 {
				t.Errorf("%s without a token: %d", name, status)
			}
			continue
		}

		status, info, hdr := e.doRaw(op.method, path, "", "", nil)
		check(name+" without a token", status, info, expect{401, server.CodeUnauthorized, "no token: send Authorization: Bearer TOKEN"})
		if hdr.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: a 401 without WWW-Authenticate", name)
		}
		status, info, _ = e.doRaw(op.method, path, "Bearer hvt_not-a-token", "", nil)
		check(name+" with an unknown token", status, info, expect{401, server.CodeUnauthorized, "unknown token"})
		status, info, _ = e.doRaw(op.method, path, "Basic YWxpY2U6cHc=", "", nil)
		check(name+" with basic auth", status, info, expect{401, server.CodeUnauthorized, `not "Bearer TOKEN"`})
		if op.admin {
			status, info, _ = e.doRaw(op.method, path, bearer(e.Alice), "", nil)
			check(name+" with a user token", status, info, expect{403, server.CodeForbidden, "needs an admin token"})
		}
		if strings.Contains(op.path, "{id}") {
			bads := []string{"not-an-id", "S-AAAAAAAAAAAAAAAA", strings.Repeat("s", 200), "s-aaaaaaaaaaaaaaa%2F"}
			if delivery { // a GUID's letters, digits and dashes
				bads = []string{"not_an_id", strings.Repeat("s", 200), "s-aaaaaaaaaaaaaaa%2F"}
			}
			for _, bad := range bads {
				status, info, _ = e.doRaw(op.method, otherParams.Replace(strings.ReplaceAll(op.path, "{id}", bad)), tok, "", nil)
				check(name+" with id "+bad, status, info, expect{404, server.CodeNotFound, "is not a"})
			}
			unknown := "s-aaaaaaaaaaaaaaaa"
			if strings.HasPrefix(op.path, "/v1/tokens/") {
				unknown = "tok-000000000000"
			}
			if strings.HasPrefix(op.path, "/v1/users/") {
				unknown = "usr-000000000000"
			}
			if strings.HasPrefix(op.path, "/v1/environments/") {
				unknown = "env-0000000000000000"
			}
			if delivery {
				unknown = "00000000-0000-0000-0000-000000000000"
			}
			var ct string
			var body []byte
			if op.body { // a valid body: the id is what is wrong
				ct, body = "application/json", []byte(`{"text":"msg to nobody"}`)
				if strings.HasPrefix(op.path, "/v1/users/") {
					body = []byte(`{"name":"nobody"}`)
				}
			}
			status, info, _ = e.doRaw(op.method, otherParams.Replace(strings.ReplaceAll(op.path, "{id}", unknown)), tok, ct, body)
			check(name+" with an unknown id", status, info, expect{404, server.CodeNotFound, unknown})
		}
		status, info, _ = e.doRaw(op.method, path+"?bogus=1", tok, "", nil)
		check(name+" with an unknown query parameter", status, info, expect{400, server.CodeBadRequest, `unknown query parameter "bogus"`})
		other := http.MethodPatch
		if strings.HasPrefix(op.path, "/v1/users/") { // it takes PATCH
			other = http.MethodPut
		}
		if strings.HasSuffix(op.path, "/budget") { // it takes PUT
			other = http.MethodPost
		}
		status, info, hdr = e.doRaw(other, path, tok, "", nil)
		check(other+" "+op.path, status, info, expect{405, server.CodeMethodNotAllowed, "this path takes"})
		if !strings.Contains(hdr.Get("Allow"), op.method) {
			t.Errorf("%s %s: Allow %q does not list %s", other, op.path, hdr.Get("Allow"), op.method)
		}

		switch {
		case op.body:
			for _, c := range []struct {
				what, ct, body string
				want           expect
			}{
				{"malformed JSON", "application/json", `{"text":`, expect{400, server.CodeBadRequest, "malformed JSON"}},
				{"an unknown field", "application/json", `{"bogus":1}`, expect{400, server.CodeBadRequest, `unknown field "bogus": the accepted fields are`}},
				{"an empty body", "application/json", ``, expect{400, server.CodeBadRequest, "the request body is empty"}},
				{"two objects", "application/json", `{} {}`, expect{400, server.CodeBadRequest, "more after its JSON object"}},
				{"an array", "application/json", `[]`, expect{400, server.CodeBadRequest, "send a JSON object"}},
				{"text/plain", "text/plain", `{}`, expect{415, server.CodeMediaType, "application/json"}},
				{"no content type", "", `{}`, expect{415, server.CodeMediaType, "no Content-Type"}},
			} {
				status, info, _ = e.doRaw(op.method, path, tok, c.ct, []byte(c.body))
				check(name+" with "+c.what, status, info, c.want)
			}
			status, info, _ = e.doRaw(op.method, path, tok, "application/json", huge)
			check(name+" with an oversized body", status, info, expect{413, server.CodeTooLarge, "larger than 1048576 bytes"})
			// Without Content-Length (chunked): the limit holds while reading.
			req, _ := http.NewRequestWithContext(ctx, op.method, e.URL+path, io.MultiReader(bytes.NewReader(huge)))
			req.Header.Set("Authorization", tok)
			req.Header.Set("Content-Type", "application/json")
			resp, err := e.Transport.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 413 || req.ContentLength != 0 {
				t.Errorf("%s with an oversized chunked body: %d (content length %d)", name, resp.StatusCode, req.ContentLength)
			}
		case op.method == http.MethodPost || op.method == http.MethodDelete:
			// A route without a body says so, whatever was sent: never
			// 413 or 415, which openapi.json does not list for it.
			status, info, _ = e.doRaw(op.method, path, tok, "application/json", []byte(`{"force":true}`))
			check(name+" with a body it does not take", status, info, expect{400, server.CodeBadRequest, "takes no body: send none (or {})"})
			status, info, _ = e.doRaw(op.method, path, tok, "text/plain", []byte(`please`))
			check(name+" with a text body", status, info, expect{400, server.CodeBadRequest, "takes no body"})
			status, info, _ = e.doRaw(op.method, path, tok, "application/json", huge)
			check(name+" with an oversized body", status, info, expect{400, server.CodeBadRequest, "takes no body"})
		}
	}
	status, info, _ := e.doRaw(http.MethodGet, "/v1/nothing-here", bearer(e.Alice), "", nil)
	check("an unknown route", status, info, expect{404, server.CodeNotFound, "no route GET /v1/nothing-here"})
	for _, p := range []string{"/v1/sessions//events", "/v1//sessions", "/v1/sessions/./" + v.ID, "/v1/sessions/" + v.ID + "/.."} {
		status, info, _ = e.doRaw(http.MethodGet, p, bearer(e.Alice), "", nil)
		check("GET "+p, status, info, expect{404, server.CodeNotFound, "the path is not clean"})
	}
	status, info, _ = e.doRaw(http.MethodPost, "/v1/sessions/"+v.ID+"/messages", bearer(e.Alice), "application/json", []byte(`{"text":"  ","mode":"later"}`))
	if status != 400 || info.Code != server.CodeInvalid || len(info.Details) != 2 {
		t.Errorf("an invalid message: %d %+v, want 400 invalid with 2 details", status, info)
	}

	// Nothing was changed by any of it.
	list, err := e.AdminC.ListSessions(ctx, client.ListOptions{})
	if err != nil || len(list) != 1 || list[0].ID != v.ID {
		t.Errorf("sessions after the bad requests: %v %v", list, err)
	}
	got, err := e.AliceC.GetSession(ctx, v.ID)
	if err != nil || len(got.Queue) != 0 || got.State != wire.StateIdle || got.Turns != 0 {
		t.Errorf("the session after the bad requests: %+v %v", got, err)
	}
	toks, err := e.AdminC.ListTokens(ctx)
	if err != nil || len(toks) != 3 {
		t.Errorf("tokens after the bad requests: %d %v", len(toks), err)
	}
	after, _ := e.Store.Events(ctx, v.ID, 0, 0)
	if len(after) != len(before) {
		t.Errorf("events after the bad requests:%s", stacktest.Describe(after[len(before):]))
	}
}

// TestTokenSeesOnlyItsSessions: to another user's token a session does not
// exist (404 on every route, absent from lists); an admin sees everything;
// a deleted token is refused.
func TestTokenSeesOnlyItsSessions(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	a := e.create(e.AliceC, "msg from alice")
	b := e.create(e.BobC, "")
	if a.Owner != e.AliceID || b.Owner != e.BobID {
		t.Fatalf("owners %s %s, want %s %s", a.Owner, b.Owner, e.AliceID, e.BobID)
	}
	notFound := func(what string, err error) {
		t.Helper()
		var ce *client.Error
		if !asError(err, &ce) || ce.Status != 404 || ce.Code != server.CodeNotFound {
			t.Errorf("bob %s alice's session: %v, want 404", what, err)
		}
	}
	_, err := e.BobC.GetSession(ctx, a.ID)
	notFound("gets", err)
	_, err = e.BobC.Send(ctx, a.ID, "msg from bob", "")
	notFound("sends to", err)
	notFound("cancels", e.BobC.Cancel(ctx, a.ID))
	notFound("deletes", e.BobC.DeleteSession(ctx, a.ID))
	_, err = e.BobC.EventLog(ctx, a.ID, 0, 0)
	notFound("reads the log of", err)
	_, err = e.BobC.Lock(ctx, a.ID)
	notFound("reads the lock of", err)
	bs := e.BobC.Events(ctx, a.ID, client.StreamOptions{})
	_, err = bs.Next()
	notFound("streams", err)
	bs.Close()
	err = e.BobC.Unlock(ctx, a.ID)
	if client.StatusOf(err) != 403 {
		t.Errorf("bob unlocks: %v, want 403", err)
	}

	ids := func(c *client.Client, o client.ListOptions) []string {
		t.Helper()
		list, err := c.ListSessions(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range list {
			out = append(out, s.ID)
		}
		slices.Sort(out)
		return out
	}
	both := []string{a.ID, b.ID}
	slices.Sort(both)
	for what, c := range map[string]struct {
		got, want []string
	}{
		"alice's list":           {ids(e.AliceC, client.ListOptions{}), []string{a.ID}},
		"bob's list":             {ids(e.BobC, client.ListOptions{}), []string{b.ID}},
		"bob's list of his own":  {ids(e.BobC, client.ListOptions{Owner: e.BobID}), []string{b.ID}},
		"the admin's list":       {ids(e.AdminC, client.ListOptions{}), both},
		"the admin's of alice's": {ids(e.AdminC, client.ListOptions{Owner: e.AliceID}), []string{a.ID}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: %v, want %v", what, c.got, c.want)
		}
	}
	if _, err := e.BobC.ListSessions(ctx, client.ListOptions{Owner: e.AliceID}); client.StatusOf(err) != 403 {
		t.Errorf("bob lists alice's: %v, want 403", err)
	}
	if _, err := e.AliceC.CreateToken(ctx, "mallory", true); client.StatusOf(err) != 403 {
		t.Errorf("alice makes an admin token: %v, want 403", err)
	}

	// The admin sees and acts on alice's session.
	if _, err := e.AdminC.GetSession(ctx, a.ID); err != nil {
		t.Error(err)
	}
	st := e.AdminC.Events(ctx, a.ID, client.StreamOptions{})
	defer st.Close()
	stacktest.ReadUntil(t, st, "alice's first turn to end", stacktest.TurnEnded("t1"))

	// A deleted token is refused; its sessions stay, for the admin.
	if err := e.AdminC.DeleteToken(ctx, e.BobID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.BobC.ListSessions(ctx, client.ListOptions{}); client.StatusOf(err) != 401 {
		t.Errorf("a deleted token: %v, want 401", err)
	}
	if _, err := e.AdminC.GetSession(ctx, b.ID); err != nil {
		t.Errorf("the session of a deleted token: %v", err)
	}
	// A token made through the API works, once.
	made, err := e.AdminC.CreateToken(ctx, "carol", false)
	if err != nil || !strings.HasPrefix(made.Secret, server.TokenPrefix) || made.Admin {
		t.Fatalf("%+v %v", made, err)
	}
	if list, err := e.Client(made.Secret).ListSessions(ctx, client.ListOptions{}); err != nil || len(list) != 0 {
		t.Errorf("carol's list: %v %v", list, err)
	}
}

func asError(err error, target **client.Error) bool {
	ce, ok := err.(*client.Error)
	if ok {
		*target = ce
	}
	return ok
}

// TestSessionOverHTTP goes through a session's life with the client: the
// first turn, a second message, the log, cancel, the lock, delete.
func TestSessionOverHTTP(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	v := e.create(e.AliceC, "msg hello")
	if len(v.Queue) != 1 || v.Queue[0].Text != "msg hello" || !session.ValidID(v.ID) {
		t.Fatalf("created: %+v", v)
	}
	st := e.AliceC.Events(ctx, v.ID, client.StreamOptions{})
	defer st.Close()
	seen := stacktest.ReadUntil(t, st, "turn t1 to end", stacktest.TurnEnded("t1"))
	if _, ok := seen[len(seen)-1].Data.(event.TurnFinished); !ok {
		t.Fatalf("turn t1:%s", stacktest.Describe(seen))
	}
	seen = append(seen, stacktest.ReadUntil(t, st, "idle", stacktest.IsState(store.StateIdle))...)

	m, err := e.AliceC.Send(ctx, v.ID, "msg again", "")
	if err != nil || m.State != "queued" || m.Seq != 2 {
		t.Fatalf("send: %+v %v", m, err)
	}
	seen = append(seen, stacktest.ReadUntil(t, st, "turn t2 to end", stacktest.TurnEnded("t2"))...)
	seen = append(seen, stacktest.ReadUntil(t, st, "idle", stacktest.IsState(store.StateIdle))...)
	got, err := e.AliceC.GetSession(ctx, v.ID)
	if err != nil || got.Turns != 2 || len(got.Queue) != 0 || got.Usage.InputTokens == 0 {
		t.Fatalf("after two turns: %+v %v", got, err)
	}

	// The log pages through the same events the stream gave, in order.
	var logged []event.Event
	for after := int64(0); ; {
		p, err := e.AliceC.EventLog(ctx, v.ID, after, 3)
		if err != nil {
			t.Fatal(err)
		}
		logged = append(logged, p.Events...)
		if len(p.Events) == 0 {
			break
		}
		after = p.Events[len(p.Events)-1].Seq
	}
	for i, ev := range logged {
		if ev.Seq != int64(i+1) {
			t.Fatalf("log: seq %d at %d", ev.Seq, i)
		}
	}
	seen = slices.DeleteFunc(seen, func(ev event.Event) bool { return ev.Live > 0 }) // live pieces: not logged
	if len(seen) > len(logged) || !slices.Equal(seqs(seen), seqs(logged[:len(seen)])) {
		t.Errorf("the stream gave %v, the log %v", seqs(seen), seqs(logged))
	}

	if err := e.AliceC.Cancel(ctx, v.ID); err != nil {
		t.Errorf("cancel with nothing running: %v", err)
	}
	// The runner lets the lock go once it finds the queue empty, just after
	// the session.state idle event.
	var lock *server.LockInfo
	testbin.WaitFor(t, stacktest.WaitTimeout, "the session lock to be released", func() bool {
		l, err := e.AliceC.Lock(ctx, v.ID)
		lock = l
		return err == nil && !l.Held
	})
	if lock.Key != "session/"+v.ID {
		t.Errorf("lock: %+v", lock)
	}
	if err := e.AdminC.Unlock(ctx, v.ID); err != nil {
		t.Errorf("unlock: %v", err)
	}
	if err := e.AliceC.DeleteSession(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	// The open stream learns the session is gone.
	for {
		_, err := st.Next()
		if err == nil {
			continue
		}
		if !client.IsNotFound(err) || !strings.Contains(err.Error(), "deleted") {
			t.Errorf("the stream of a deleted session: %v", err)
		}
		break
	}
	if _, err := e.AliceC.GetSession(ctx, v.ID); !client.IsNotFound(err) {
		t.Errorf("get after delete: %v", err)
	}
	if _, err := e.AliceC.Send(ctx, v.ID, "msg late", ""); !client.IsNotFound(err) {
		t.Errorf("send after delete: %v", err)
	}
}

func seqs(evs []event.Event) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Seq
	}
	return out
}

// TestSSEReconnectGetsExactlyTheMissedEvents: a client that disconnects and
// comes back with Last-Event-ID (or ?since=) gets exactly the events it
// missed, in order, none twice, then the live ones.
func TestSSEReconnectGetsExactlyTheMissedEvents(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	v := e.create(e.AliceC, "msg one")

	// First connection: up to the end of turn t1, on the wire (its
	// stored events: live pieces, event/live.go, take no seq of their own).
	raw := e.openRaw(e.Alice, v.ID, nil, "")
	var first []sseEvent
	for {
		ev, err := raw.next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.data == "" || strings.Contains(ev.data, `"live":`) {
			continue // a keepalive, a live piece
		}
		first = append(first, ev)
		if ev.typ == string(event.TypeTurnFinished) {
			break
		}
	}
	for i, ev := range first {
		var w event.Event
		if err := json.Unmarshal([]byte(ev.data), &w); err != nil {
			t.Fatalf("data of event %s: %v", ev.id, err)
		}
		if ev.id != strconv.Itoa(i+1) || w.Seq != int64(i+1) || ev.typ != string(w.Type()) || w.Session != v.ID {
			t.Fatalf("event %d on the wire: id %s, event %s, data %s", i+1, ev.id, ev.typ, ev.data)
		}
	}
	last := first[len(first)-1].id
	raw.close()

	// While nobody listens: two more turns.
	for _, text := range []string{"msg two", "msg three"} {
		if _, err := e.AliceC.Send(ctx, v.ID, text, ""); err != nil {
			t.Fatal(err)
		}
	}
	testbin.WaitFor(t, stacktest.WaitTimeout, "turn t3 to end", func() bool {
		got, err := e.AliceC.GetSession(ctx, v.ID)
		return err == nil && got.Turns == 3 && got.State == wire.StateIdle && len(got.Queue) == 0
	})
	if err := e.Journal.Flush(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	stored, err := e.Store.Events(ctx, v.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(last)
	missed := stored[n:]

	// Back with Last-Event-ID (and a stale ?since= the header overrides,
	// as a reconnecting EventSource sends both).
	for _, how := range []struct {
		header http.Header
		query  string
	}{
		{http.Header{"Last-Event-ID": {last}}, "since=1"},
		{nil, "since=" + last},
	} {
		raw := e.openRaw(e.Alice, v.ID, how.header, how.query)
		for i, want := range missed {
			ev, err := raw.next()
			if err != nil {
				t.Fatalf("%v %q: after %d of %d missed events: %v", how.header, how.query, i, len(missed), err)
			}
			if ev.id != strconv.FormatInt(want.Seq, 10) || ev.typ != string(want.Type()) {
				t.Fatalf("%v %q: missed event %d is id %s %s, want %d %s", how.header, how.query, i, ev.id, ev.typ, want.Seq, want.Type())
			}
		}
		raw.close()
	}

	// The client does the same by itself, across a disconnect in the
	// middle of a turn's events: every event once, in order.
	st := e.AliceC.Events(ctx, v.ID, client.StreamOptions{})
	var got []event.Event
	for range 5 {
		ev, err := st.Next()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	st.Close()
	st = e.AliceC.Events(ctx, v.ID, client.StreamOptions{After: st.LastSeq()})
	defer st.Close()
	if _, err := e.AliceC.Send(ctx, v.ID, "msg four", ""); err != nil {
		t.Fatal(err)
	}
	got = append(got, stacktest.ReadUntil(t, st, "turn t4 to end", stacktest.TurnEnded("t4"))...)
	got = slices.DeleteFunc(got, func(ev event.Event) bool { return ev.Live > 0 })
	all, _ := e.Store.Events(ctx, v.ID, 0, 0)
	if len(got) > len(all) || !slices.Equal(seqs(got), seqs(all[:len(got)])) {
		t.Errorf("reconnecting client: seqs %v\nstored %v", seqs(got), seqs(all))
	}
}

// TestSSESlowClientIsCutOffAndLosesNothing: a client that stops reading
// while events pile up is cut off by the journal (the server ends the
// stream with "event: stream.error" too_slow) instead of holding anyone up; the
// client reconnects with Last-Event-ID and gets every event, once.
func TestSSESlowClientIsCutOffAndLosesNothing(t *testing.T) {
	e := newAPIEnv(t,
		apitest.WithJournal(journal.Options{Buffer: 16}),
		apitest.WithSendBuffer(4096), // so that the kernel does not absorb the whole backlog
		apitest.WithReceiveBuffer(4096),
	)
	ctx := testbin.Context(t)
	v := e.create(e.AliceC, "")

	// A raw connection that reads its first event and then nothing.
	raw := e.openRaw(e.Alice, v.ID, nil, "")
	if _, err := raw.next(); err != nil {
		t.Fatal(err)
	}
	// The client's stream, also stalled after its first event.
	st := e.AliceC.Events(ctx, v.ID, client.StreamOptions{})
	defer st.Close()
	if _, err := st.Next(); err != nil {
		t.Fatal(err)
	}
	// Connections from now on (the client's reconnect) have the usual
	// buffers: a 4 KiB window is slow to replay through.
	e.SmallBufs.Store(false)
	// Events that must all be delivered, far more than the buffers hold.
	const n = 2000
	for i := range n {
		if _, err := e.Journal.Append(event.Event{Session: v.ID, Data: event.SessionState{State: "idle", Reason: "filler " + strconv.Itoa(i) + strings.Repeat(".", 200)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Journal.Flush(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	last, err := e.Store.LastSeq(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}

	// The raw reader finds, after what was sent, the cut-off.
	var end sseEvent
	for {
		ev, err := raw.next()
		if err != nil {
			t.Fatalf("the stalled stream ended without an error event: %v", err)
		}
		if ev.typ == server.StreamErrorEvent {
			end = ev
			break
		}
	}
	var eb server.ErrorBody
	if err := json.Unmarshal([]byte(end.data), &eb); err != nil || eb.Error.Code != server.StreamTooSlow || end.id != "" {
		t.Errorf("the final event: id %q data %s", end.id, end.data)
	}
	if _, err := raw.next(); err != io.EOF && err != io.ErrUnexpectedEOF {
		t.Errorf("after the error event: %v, want the end of the stream", err)
	}

	// The client reconnects by itself and misses nothing.
	prev := int64(1)
	e.Transport.CloseIdleConnections() // the raw stream's, with its small buffers
	for prev < last {
		ev, err := st.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq != prev+1 {
			t.Fatalf("after %d came %d: a gap over events that must be delivered", prev, ev.Seq)
		}
		prev = ev.Seq
	}
	if st.Reconnects() < 1 {
		t.Errorf("the client was never cut off (%d reconnects): the test did not test it", st.Reconnects())
	}
}

// TestSSEKeepaliveAndDrain: an idle stream gets keepalive comments; Drain
// ends open streams with an "unavailable" stream.error event (so clients come
// back later) and refuses new requests with 503.
func TestSSEKeepaliveAndDrain(t *testing.T) {
	e := newAPIEnv(t, apitest.WithKeepAlive(20*time.Millisecond))
	v := e.create(e.AliceC, "")
	raw := e.openRaw(e.Alice, v.ID, nil, "")
	// Events until the session is idle, then only keepalives.
	for {
		ev, err := raw.next()
		if err != nil {
			t.Fatal(err)
		}
		if len(ev.comments) > 0 && slices.Contains(ev.comments, ": keepalive") {
			break
		}
	}
	e.Server.Drain()
	var last sseEvent
	for {
		ev, err := raw.next()
		if err != nil {
			break
		}
		last = ev
	}
	if last.typ != server.StreamErrorEvent || !strings.Contains(last.data, `"code":"unavailable"`) {
		t.Errorf("the stream's end after Drain: %+v", last)
	}
	status, info, hdr := e.doRaw(http.MethodGet, "/v1/sessions", "Bearer "+e.Alice, "", nil)
	if status != 503 || info.Code != server.CodeUnavailable || hdr.Get("Retry-After") == "" {
		t.Errorf("a request while draining: %d %+v", status, info)
	}
	h, err := e.AliceC.Health(context.Background())
	if client.StatusOf(err) != 503 || h == nil || h.Status != "shutting_down" {
		t.Errorf("health while draining: %+v %v", h, err)
	}
}

// TestEndedSessionConflicts: a session that has ended (here: at its max
// lifetime) refuses messages and cancels with 409 and says why.
func TestEndedSessionConflicts(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	v, err := e.AliceC.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: e.Repo}}, Limits: store.Limits{MaxLifetime: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	st := e.AliceC.Events(ctx, v.ID, client.StreamOptions{})
	defer st.Close()
	stacktest.ReadUntil(t, st, "the session to stop", stacktest.IsState(store.StateStopped))
	_, err = e.AliceC.Send(ctx, v.ID, "msg too late", "")
	var ce *client.Error
	if !asError(err, &ce) || ce.Status != 409 || ce.Code != server.CodeConflict || !strings.Contains(ce.Message, "start a new session") {
		t.Errorf("a message to a stopped session: %v", err)
	}
	if err := e.AliceC.Cancel(ctx, v.ID); client.StatusOf(err) != 409 {
		t.Errorf("cancel of a stopped session: %v", err)
	}
	// It can still be read and deleted.
	if got, err := e.AliceC.GetSession(ctx, v.ID); err != nil || got.State != wire.StateStopped {
		t.Errorf("get: %+v %v", got, err)
	}
	if err := e.AliceC.DeleteSession(ctx, v.ID); err != nil {
		t.Error(err)
	}
}
