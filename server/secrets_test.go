package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/stacktest/apitest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/secrets"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// lockedBuffer is a log destination the test reads while the server may
// still write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSecretValuesNeverLeave: canary values set through the API (a
// repository's, a user's) appear in no response body of any route, sent
// by the admin or a user, nor in an error about a value (too long, of the
// wrong type, malformed), nor in anything the server, the sessions or the
// journal log (at debug level), nor in the database files; and Resolve
// gives them back, so they were stored.
func TestSecretValuesNeverLeave(t *testing.T) {
	const (
		canary     = "canary-4f9c2e-value"
		userCanary = "canary-user-8d1b"
		numCanary  = "987654321987"
	)
	var logs lockedBuffer
	e := newAPIEnv(t, apitest.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	ctx := testbin.Context(t)
	if _, err := e.AdminC.PutSecret(ctx, "repo:octo/hello", "NPM_TOKEN", canary, true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.AliceC.PutSecret(ctx, "user:me", "GH_TOKEN", userCanary, false); err != nil {
		t.Fatal(err)
	}

	var bodies []string
	record := func(what string, resp *http.Response, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body) // an event stream ends at its deadline
		bodies = append(bodies, what+" → "+resp.Status+"\n"+string(b))
	}
	send := func(method, path, token, body string) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(rctx, method, e.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := e.Transport.RoundTrip(req)
		record(method+" "+path, resp, err)
	}

	// Errors about a value say what is wrong with it without quoting it.
	long := strings.Repeat(canary, secrets.MaxValue/len(canary)+1)
	for _, body := range []string{
		`{"value":"` + long + `"}`,
		`{"value":` + numCanary + `}`,
		`{"value":"` + canary + `\q"}`,
		`{"value":"` + canary + `"` + numCanary + `}`,
		numCanary,
		`{"value":"` + canary + `\u0000"}`,
	} {
		send(http.MethodPut, "/v1/secrets/user:me/X", e.Alice, body)
		if !strings.Contains(bodies[len(bodies)-1], "400 Bad Request") {
			t.Errorf("a bad value: %s", bodies[len(bodies)-1])
		}
	}

	// A session, so that every route has something to show.
	v := e.create(e.AliceC, "msg one")
	st := e.AliceC.Events(ctx, v.ID, client.StreamOptions{})
	stacktest.ReadUntil(t, st, "the turn's end", stacktest.TurnEnded("t1"))
	stacktest.ReadUntil(t, st, "idle", stacktest.IsState(store.StateIdle))
	st.Close()

	rank := map[string]int{http.MethodGet: 0, http.MethodPut: 1, http.MethodPost: 2, http.MethodDelete: 3}
	ops := docOps(t)
	slices.SortStableFunc(ops, func(a, b docOp) int { return rank[a.method] - rank[b.method] })
	paths := strings.NewReplacer("{scope}", "user:me", "{name}", "SWEEP")
	for _, op := range ops {
		path := paths.Replace(op.path)
		if strings.HasPrefix(op.path, "/v1/tokens/") {
			path = strings.ReplaceAll(path, "{id}", e.BobID)
		}
		path = strings.ReplaceAll(path, "{id}", v.ID)
		body := ""
		switch {
		case op.path == "/v1/sessions" && op.method == http.MethodPost:
			body = `{}`
		case strings.HasSuffix(op.path, "/messages"):
			body = `{"text":"msg two"}`
		case op.path == "/v1/tokens" && op.method == http.MethodPost:
			body = `{"name":"sweep"}`
		case op.method == http.MethodPut:
			body = `{"value":"sweep"}`
		}
		for _, tok := range []string{e.Alice, e.Admin} {
			send(op.method, path, tok, body)
		}
	}
	for _, q := range []string{"", "?scope=repo:octo/hello", "?scope=user:me"} {
		send(http.MethodGet, "/v1/secrets"+q, e.Admin, "")
	}
	if len(bodies) < 30 {
		t.Fatalf("only %d responses", len(bodies))
	}
	for _, b := range bodies {
		for _, c := range []string{canary, userCanary, numCanary} {
			if strings.Contains(b, c) {
				t.Errorf("a response shows a secret value:\n%s", b)
			}
		}
	}
	if !slices.ContainsFunc(bodies, func(b string) bool { return strings.Contains(b, `"name":"NPM_TOKEN"`) }) {
		t.Error("no response listed the secrets: the sweep did not reach GET /v1/secrets")
	}

	// The values are stored: the environment builder gets them.
	setup, session, err := secrets.Resolve(ctx, e.Store, e.SecretKey, "Octo/Hello", e.AliceID)
	if err != nil || !slices.Equal(setup, []string{"GH_TOKEN=" + userCanary, "NPM_TOKEN=" + canary}) || !slices.Equal(session, []string{"NPM_TOKEN=" + canary}) {
		t.Fatalf("resolve = %q %q %v", setup, session, err)
	}
	l := logs.String()
	if !strings.Contains(l, "level=") {
		t.Fatal("nothing was logged: the capture does not work")
	}
	for _, c := range []string{canary, userCanary, numCanary} {
		if strings.Contains(l, c) {
			t.Errorf("the logs show the secret value %s", c)
		}
	}
	// A stolen database (with its WAL) holds no value in clear. (On
	// PostgreSQL, $HARVEST_TEST_STORE=postgres, there is no file to read.)
	for _, suffix := range []string{"", "-wal"} {
		if e.StoreURL != "" {
			break
		}
		b, err := os.ReadFile(e.DBPath + suffix)
		if err != nil && suffix == "" {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(canary)) || bytes.Contains(b, []byte(userCanary)) {
			t.Errorf("harvest.db%s holds a secret value in clear", suffix)
		}
	}
}

// TestSecretsAuthorization: an admin manages every scope; a user token
// manages its own user scope (user:me or its id) and nothing else: not a
// repository's, not another token's; lists show each its own.
func TestSecretsAuthorization(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	forbidden := func(what string, err error, msg string) {
		t.Helper()
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != 403 || ce.Code != wire.CodeForbidden || !strings.Contains(ce.Message, msg) {
			t.Errorf("%s: %v, want 403 saying %q", what, err, msg)
		}
	}
	x, err := e.AliceC.PutSecret(ctx, "user:me", "A_TOKEN", "alice-1", false)
	if err != nil || x.Scope != "user:"+e.AliceID || x.Name != "A_TOKEN" || x.SetBy != e.AliceID || x.Session || x.CreatedAt.IsZero() {
		t.Fatalf("alice sets her own: %+v, %v", x, err)
	}
	if x, err = e.AliceC.PutSecret(ctx, "user:"+e.AliceID, "A_TOKEN", "alice-2", true); err != nil || !x.Session {
		t.Fatalf("alice sets her own by id: %+v, %v", x, err)
	}
	_, err = e.AliceC.PutSecret(ctx, "user:"+e.BobID, "A_TOKEN", "v", false)
	forbidden("alice sets bob's", err, "manages its own secrets only")
	_, err = e.AliceC.PutSecret(ctx, "repo:octo/hello", "A_TOKEN", "v", false)
	forbidden("alice sets a repository's", err, "only an admin token")
	_, err = e.AliceC.ListSecrets(ctx, "repo:octo/hello")
	forbidden("alice lists a repository's", err, "only an admin token")
	_, err = e.AliceC.ListSecrets(ctx, "user:"+e.BobID)
	forbidden("alice lists bob's", err, "another token's")

	if _, err := e.AdminC.PutSecret(ctx, "repo:Octo/Hello", "R_TOKEN", "repo", true); err != nil {
		t.Fatalf("the admin sets a repository's: %v", err)
	}
	if x, err := e.AdminC.PutSecret(ctx, "user:"+e.BobID, "B_TOKEN", "for-bob", false); err != nil || x.SetBy == e.BobID {
		t.Fatalf("the admin sets bob's: %+v %v", x, err)
	}
	_, err = e.AdminC.PutSecret(ctx, "user:tok-000000000000", "B_TOKEN", "v", false)
	if ce := (*client.Error)(nil); !errors.As(err, &ce) || ce.Status != 400 || !strings.Contains(ce.Message, "there is no token tok-000000000000") {
		t.Errorf("the admin sets a secret of no token: %v", err)
	}

	names := func(xs []*wire.Secret, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range xs {
			out = append(out, x.Scope+" "+x.Name)
		}
		return out
	}
	if got, want := names(e.AliceC.ListSecrets(ctx)), []string{"user:" + e.AliceID + " A_TOKEN"}; !slices.Equal(got, want) {
		t.Errorf("alice lists %v, want %v", got, want)
	}
	if got, want := names(e.BobC.ListSecrets(ctx, "user:me")), []string{"user:" + e.BobID + " B_TOKEN"}; !slices.Equal(got, want) {
		t.Errorf("bob lists %v, want %v", got, want)
	}
	all := names(e.AdminC.ListSecrets(ctx))
	want := []string{"repo:octo/hello R_TOKEN", "user:" + e.AliceID + " A_TOKEN", "user:" + e.BobID + " B_TOKEN"}
	slices.Sort(want) // by scope, then name
	if !slices.Equal(all, want) {
		t.Errorf("the admin lists %v, want %v", all, want)
	}

	forbidden("alice deletes bob's", e.AliceC.DeleteSecret(ctx, "user:"+e.BobID, "B_TOKEN"), "another token's")
	forbidden("alice deletes a repository's", e.AliceC.DeleteSecret(ctx, "repo:octo/hello", "R_TOKEN"), "only an admin token")
	if err := e.BobC.DeleteSecret(ctx, "user:me", "NOPE"); !client.IsNotFound(err) || !strings.Contains(err.Error(), "no secret NOPE in user:"+e.BobID) {
		t.Errorf("deleting a missing secret: %v", err)
	}
	if err := e.AliceC.DeleteSecret(ctx, "user:me", "A_TOKEN"); err != nil {
		t.Fatal(err)
	}
	if err := e.AdminC.DeleteSecret(ctx, "repo:octo/HELLO", "R_TOKEN"); err != nil {
		t.Fatalf("the admin deletes a repository's (named in another case): %v", err)
	}
	if got := names(e.AdminC.ListSecrets(ctx)); !slices.Equal(got, []string{"user:" + e.BobID + " B_TOKEN"}) {
		t.Errorf("after the deletions: %v", got)
	}
}

// TestSecretsBadInput: bad scopes, names and values are 400s whose
// messages say what to give instead, every problem listed; an unescaped
// repository scope gets a 404 saying how to escape it.
func TestSecretsBadInput(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	admin := "Bearer " + e.Admin
	put := func(scope, name, body string) (int, server.ErrorInfo) {
		t.Helper()
		status, info, _ := e.doRaw(http.MethodPut, "/v1/secrets/"+url.PathEscape(scope)+"/"+url.PathEscape(name), admin, "application/json", []byte(body))
		return status, info
	}
	for _, c := range []struct {
		scope, name, body string
		msgs              []string
	}{
		{"org:x", "A", `{"value":"v"}`, []string{`scope "org:x": give repo:OWNER/NAME`}},
		{"repo:octo", "A", `{"value":"v"}`, []string{`repository "octo": give it as GitHub names it, owner/name`}},
		{"user:a b", "A", `{"value":"v"}`, []string{`user "a b": give a token id`}},
		{"user:me", "npm_token", `{"value":"v"}`, []string{"did you mean NPM_TOKEN?"}},
		{"user:me", "1ABC", `{"value":"v"}`, []string{"named like an environment variable"}},
		{"user:me", strings.Repeat("A", 129), `{"value":"v"}`, []string{"at most 128 characters"}},
		{"user:me", "A", `{"value":""}`, []string{"the value is empty"}},
		{"user:me", "A", `{"session":true}`, []string{"the value is empty"}},
		{"user:me", "A", `{"value":"` + strings.Repeat("x", secrets.MaxValue+1) + `"}`, []string{"the value is 65537 bytes: at most 65536"}},
		{"user:me", "A", `{"value":"a\u0000b"}`, []string{"NUL"}},
		{"user:me", "a-b", `{"value":""}`, []string{"environment variable", "the value is empty"}},
		{"user:me", "A", `{"value":true}`, []string{`field "value": want a string`}},
	} {
		status, info := put(c.scope, c.name, c.body)
		ok := status == 400 && (info.Code == server.CodeInvalid || info.Code == server.CodeBadRequest)
		for _, m := range c.msgs {
			ok = ok && strings.Contains(info.Message, m)
		}
		if info.Code == server.CodeInvalid && len(info.Details) != len(c.msgs) {
			ok = false
		}
		if !ok {
			t.Errorf("PUT %s %s %.40s: %d %s %q %q; want 400 saying %q", c.scope, c.name, c.body, status, info.Code, info.Message, info.Details, c.msgs)
		}
	}
	if status, info := put("user:me", "A", `{"value":"`+strings.Repeat("x", secrets.MaxValue)+`"}`); status != 200 {
		t.Errorf("a value of exactly 64 KiB: %d %s", status, info.Message)
	}
	status, info, _ := e.doRaw(http.MethodPut, "/v1/secrets/repo:octo/hello/A", admin, "application/json", []byte(`{"value":"v"}`))
	if status != 404 || !strings.Contains(info.Message, "%2F") {
		t.Errorf("an unescaped repository scope: %d %q", status, info.Message)
	}
	for _, q := range []string{"?scope=nope", "?bogus=1"} {
		status, info, _ := e.doRaw(http.MethodGet, "/v1/secrets"+q, admin, "", nil)
		if status != 400 {
			t.Errorf("GET /v1/secrets%s: %d %q", q, status, info.Message)
		}
	}
	status, info, _ = e.doRaw(http.MethodDelete, "/v1/secrets/user:me/bad-name", admin, "", nil)
	if status != 400 || !strings.Contains(info.Message, "environment variable") {
		t.Errorf("DELETE with a bad name: %d %q", status, info.Message)
	}
	if xs, err := e.AdminC.ListSecrets(ctx); err != nil || len(xs) != 1 {
		t.Errorf("after the bad requests: %d secrets, %v (want the 64 KiB one only)", len(xs), err)
	}
}

// TestSecretsNeedAStore: a server started without a secret store answers
// 404 on the secrets routes, saying so.
func TestSecretsNeedAStore(t *testing.T) {
	e := newAPIEnv(t)
	srv, err := server.New(server.Config{Manager: e.Manager, Store: e.Store})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/v1/secrets", nil)
	req.Header.Set("Authorization", "Bearer "+e.Admin)
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	if rec.Code != 404 || !strings.Contains(rec.Body.String(), "keeps no secrets") {
		t.Errorf("GET /v1/secrets without a store: %d %s", rec.Code, rec.Body.String())
	}
}
