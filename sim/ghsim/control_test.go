package ghsim_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/sim/ghsim"
)

// ctl drives the JSON control API over HTTP, as a test in another process
// would.
type ctl struct {
	t    *testing.T
	base string // .../_sim/github/
}

// do sends body (a string is sent as is, anything else as JSON) and
// returns the status and the raw answer.
func (c ctl) do(method, path string, body any) (int, []byte) {
	c.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = strings.NewReader(string(j))
	}
	req, err := http.NewRequestWithContext(ctxT(c.t), method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, raw
}

// ok sends a request that must answer 200 and decodes the answer into out
// (if not nil).
func (c ctl) ok(method, path string, body, out any) {
	c.t.Helper()
	status, raw := c.do(method, path, body)
	if status != http.StatusOK {
		c.t.Fatalf("%s %s: %d %s", method, path, status, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}
}

func (c ctl) deliveries(wait bool) []ghsim.Delivery {
	c.t.Helper()
	path := "deliveries"
	if wait {
		path += "?wait=1"
	}
	var l []ghsim.Delivery
	c.ok("GET", path, nil, &l)
	return l
}

// TestControlAPI sets a stand-in up and acts on it only through
// /_sim/github/: an App without a webhook URL, an installation, a person, a
// repository, a role, an issue (no delivery: no URL yet), then the webhook
// URL, a comment (delivered, signed, valid), a redelivery, a bad
// signature, and the URL cleared again.
func TestControlAPI(t *testing.T) {
	srv, err := ghsim.Start(ghsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	hooks := newReceiver(t, hookSecret)
	c := ctl{t: t, base: srv.URL() + "/_sim/github/"}

	var app ghsim.App
	c.ok("POST", "apps", map[string]any{"slug": "harvest-ctl", "webhook_secret": hookSecret}, &app)
	if app.ID == 0 || app.BotLogin != "harvest-ctl[bot]" || !strings.Contains(app.PrivateKeyPEM, "RSA PRIVATE KEY") {
		t.Fatalf("app: %+v", app)
	}
	if _, err := ghsim.ParsePrivateKey([]byte(app.PrivateKeyPEM)); err != nil {
		t.Fatalf("app key: %v", err)
	}
	var instID int64
	c.ok("POST", "installations", map[string]any{"app_id": app.ID, "account": "acme"}, &instID)
	var ada ghsim.User
	c.ok("POST", "users", map[string]any{"login": "ada", "name": "Ada Lovelace"}, &ada)
	if ada.Login != "ada" || !strings.HasPrefix(ada.Token, "ghp_") {
		t.Fatalf("user: %+v", ada)
	}
	var repo ghsim.Repo
	c.ok("POST", "repos", map[string]any{"owner": "acme", "name": "widget", "dir": makeSource(t), "private": true}, &repo)
	if repo.FullName != "acme/widget" || repo.DefaultBranch != "main" || repo.CloneURL != srv.URL()+"/acme/widget.git" {
		t.Fatalf("repo: %+v", repo)
	}
	c.ok("POST", "permissions", map[string]any{"repo": "acme/widget", "login": "ada", "permission": "write"}, nil)

	var n int
	c.ok("POST", "issues", map[string]any{"login": "ada", "repo": "acme/widget", "title": "Fix the build"}, &n)
	if n != 1 {
		t.Errorf("issue number %d, want 1", n)
	}
	if l := c.deliveries(true); len(l) != 0 {
		t.Fatalf("deliveries before the App has a webhook URL: %+v", l)
	}

	c.ok("POST", fmt.Sprintf("apps/%d/webhook-url", app.ID), map[string]any{"url": hooks.srv.URL}, nil)
	var commentID int64
	c.ok("POST", "comments", map[string]any{"login": "ada", "repo": "acme/widget", "number": n, "body": "@harvest-ctl please"}, &commentID)
	l := c.deliveries(true)
	if len(l) != 1 {
		t.Fatalf("deliveries: %d, want 1 (issue_comment created): %+v", len(l), l)
	}
	d := l[0]
	if d.Kind != ghsim.HookIssueCommentCreated || d.State != ghsim.DeliveryDelivered || d.StatusCode != http.StatusAccepted ||
		d.URL != hooks.srv.URL || d.AppID != app.ID || d.InstallationID != instID || d.RepositoryID != repo.ID {
		t.Fatalf("delivery: %+v", d)
	}
	if err := validateHook(t, d.Kind, d.Payload); err != nil {
		t.Errorf("payload: %v", err)
	}
	var p struct {
		Comment struct{ ID int64 }
		Sender  struct{ Login string }
	}
	if err := json.Unmarshal(d.Payload, &p); err != nil || p.Comment.ID != commentID || p.Sender.Login != "ada" {
		t.Errorf("payload: %v %+v", err, p)
	}
	if got := hooks.all(); len(got) != 1 || !got[0].SigOK || got[0].Header.Get("X-GitHub-Delivery") != d.GUID {
		t.Fatalf("received: %+v", got)
	}

	// An installation token from the control API works on REST.
	var tok string
	c.ok("POST", "tokens", map[string]any{"installation_id": instID}, &tok)
	status, is := doJSON(t, "GET", srv.URL()+"/api/v3/repos/acme/widget/issues/1", "token "+tok, nil)
	if status != http.StatusOK || is["title"] != "Fix the build" {
		t.Errorf("GET issue with the control API's token: %d %v", status, is)
	}
	var reqs []ghsim.Request
	c.ok("GET", "requests", nil, &reqs)
	// The log keeps control and REST calls, not reads of the log itself.
	if len(reqs) == 0 || reqs[len(reqs)-1].Path != "/api/v3/repos/acme/widget/issues/1" || reqs[len(reqs)-1].Status != http.StatusOK ||
		reqs[0].Path != "/_sim/github/apps" || reqs[0].Method != "POST" {
		t.Errorf("request log: %+v", reqs)
	}

	// Redeliver: the same GUID, a new id.
	var re struct{ ID int64 }
	c.ok("POST", fmt.Sprintf("deliveries/%d/redeliver", d.ID), map[string]any{}, &re)
	l = c.deliveries(true)
	if len(l) != 2 || l[1].ID != re.ID || re.ID == d.ID || l[1].GUID != d.GUID || !l[1].Redelivery || l[1].State != ghsim.DeliveryDelivered {
		t.Fatalf("redelivery: %+v", l)
	}

	// A bad signature, then a good one again.
	c.ok("POST", fmt.Sprintf("apps/%d/bad-signature", app.ID), map[string]any{"on": true}, nil)
	c.ok("POST", "comments", map[string]any{"login": "ada", "repo": "acme/widget", "number": n, "body": "again"}, nil)
	c.deliveries(true)
	c.ok("POST", fmt.Sprintf("apps/%d/bad-signature", app.ID), map[string]any{"on": false}, nil)
	c.ok("POST", "comments", map[string]any{"login": "ada", "repo": "acme/widget", "number": n, "body": "and again"}, nil)
	l = c.deliveries(true)
	got := hooks.all()
	if len(l) != 4 || !l[2].BadSignature || l[3].BadSignature || len(got) != 4 || got[2].SigOK || !got[3].SigOK {
		t.Fatalf("bad signature on and off: deliveries %+v, received %+v", l, got)
	}

	// A new URL takes the next delivery; "" stops them.
	other := newReceiver(t, hookSecret)
	c.ok("POST", fmt.Sprintf("apps/%d/webhook-url", app.ID), map[string]any{"url": other.srv.URL}, nil)
	c.ok("POST", "comments", map[string]any{"login": "ada", "repo": "acme/widget", "number": n, "body": "elsewhere"}, nil)
	if l = c.deliveries(true); len(l) != 5 || l[4].URL != other.srv.URL || len(other.all()) != 1 || len(hooks.all()) != 4 {
		t.Fatalf("after the URL changed: deliveries %+v", l)
	}
	c.ok("POST", fmt.Sprintf("apps/%d/webhook-url", app.ID), map[string]any{"url": ""}, nil)
	c.ok("POST", "comments", map[string]any{"login": "ada", "repo": "acme/widget", "number": n, "body": "to no one"}, nil)
	if l = c.deliveries(true); len(l) != 5 {
		t.Fatalf("deliveries with no webhook URL: %+v", l[5:])
	}

	// Unknown things are 404, bad input 400, each with a message that
	// says what was wrong.
	for _, tc := range []struct {
		path   string
		body   any
		status int
		msg    string
	}{
		{"installations", map[string]any{"app_id": 999999, "account": "acme"}, 404, "app 999999: not found"},
		{"permissions", map[string]any{"repo": "acme/nope", "login": "ada", "permission": "read"}, 404, "repository acme/nope: not found"},
		{"permissions", map[string]any{"repo": "acme/widget", "login": "nobody", "permission": "read"}, 404, "user nobody: not found"},
		{"issues", map[string]any{"login": "ada", "repo": "acme/nope", "title": "x"}, 404, "repository acme/nope: not found"},
		{"comments", map[string]any{"login": "ada", "repo": "acme/widget", "number": 99, "body": "x"}, 404, "acme/widget#99: not found"},
		{"tokens", map[string]any{"installation_id": 999999}, 404, "installation 999999: not found"},
		{"apps/999999/webhook-url", map[string]any{"url": "http://127.0.0.1:1/"}, 404, "app 999999: not found"},
		{"apps/abc/webhook-url", map[string]any{"url": "http://127.0.0.1:1/"}, 404, `app "abc": not found`},
		{"apps/999999/bad-signature", map[string]any{"on": true}, 404, "app 999999: not found"},
		{"deliveries/999999/redeliver", map[string]any{}, 404, "delivery 999999: not found"},

		{"apps", map[string]any{"slug": "Not A Slug"}, 400, `app slug "Not A Slug"`},
		{"apps", map[string]any{"slug": "harvest-ctl"}, 400, "already registered"},
		{"apps", map[string]any{"slug": "other", "webhook_url": "not a url"}, 400, `webhook URL "not a url"`},
		{"apps", map[string]any{"slug": "other", "nope": 1}, 400, `unknown field "nope"`},
		{"apps", "{", 400, "body: "},
		{"installations", map[string]any{"app_id": app.ID, "account": "acme"}, 400, "already installed on acme"},
		{"users", map[string]any{"login": "-bad-"}, 400, `login "-bad-": not a GitHub login`},
		{"users", map[string]any{"login": "ada"}, 400, "user ada: already exists"},
		{"repos", map[string]any{"owner": "acme", "name": "gadget", "dir": "/no/such/dir"}, 400, "is not a directory"},
		{"permissions", map[string]any{"repo": "acme/widget", "login": "ada", "permission": "owner"}, 400, `permission "owner"`},
		{"issues", map[string]any{"login": "ada", "repo": "acme/widget"}, 400, "an issue needs a title"},
		{"comments", map[string]any{"login": "ada", "repo": "acme/widget", "number": n}, 400, "a comment needs a body"},
		{fmt.Sprintf("apps/%d/webhook-url", app.ID), map[string]any{"url": "ftp://example.com/"}, 400, "want an absolute http or https URL"},
		{fmt.Sprintf("apps/%d/webhook-url", app.ID), map[string]any{}, 400, `body: want {"url"`},
		{fmt.Sprintf("apps/%d/bad-signature", app.ID), map[string]any{}, 400, `body: want {"on"`},
	} {
		status, raw := c.do("POST", tc.path, tc.body)
		var e struct{ Error string }
		json.Unmarshal(raw, &e)
		if status != tc.status || !strings.Contains(e.Error, tc.msg) {
			t.Errorf("POST %s %v: %d %s, want %d and an error with %q", tc.path, tc.body, status, raw, tc.status, tc.msg)
		}
	}
	if status, raw := c.do("GET", "nope", nil); status != http.StatusNotFound {
		t.Errorf("GET /_sim/github/nope: %d %s, want 404", status, raw)
	}
	// Nothing above acted: no delivery was queued by the failures.
	if l = c.deliveries(true); len(l) != 5 {
		t.Errorf("deliveries after failed calls: %+v", l[5:])
	}
}
