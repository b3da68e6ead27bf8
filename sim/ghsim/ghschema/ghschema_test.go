package ghschema

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/sim/ghsim"
)

// TestChecks: a real answer and a real webhook of the stand-in validate;
// each made wrong in one way (a date that is not a date-time, a URL that
// is not one, an email that is not one, a required field dropped, a null
// where the description does not allow one) does not; a null where it
// does (OpenAPI 3.0's nullable) does.
func TestChecks(t *testing.T) {
	srv, err := ghsim.Start(ghsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) }))
	defer hook.Close()
	app, err := srv.CreateApp(ghsim.AppSpec{Slug: "checks", WebhookURL: hook.URL, WebhookSecret: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.CreateInstallation(ghsim.InstallationSpec{AppID: app.ID, Account: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.AddUser(ghsim.UserSpec{Login: "ada"}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644)
	if _, err := srv.CreateRepo(context.Background(), ghsim.RepoSpec{Owner: "acme", Name: "w", Dir: dir}); err != nil {
		t.Fatal(err)
	}
	n, err := srv.OpenIssue(ghsim.IssueSpec{Login: "ada", Repo: "acme/w", Title: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/w", Number: n, Body: "hi"}); err != nil {
		t.Fatal(err)
	}

	// An issue comment, as a REST answer (POST .../comments, 201).
	comment := map[string]any{
		"id": 1, "node_id": "IC_1", "url": "https://api.github.com/repos/acme/w/issues/comments/1",
		"html_url": "https://github.com/acme/w/issues/1#issuecomment-1", "body": "hi",
		"user": nil, "created_at": "2024-01-02T03:04:05Z", "updated_at": "2024-01-02T03:04:05Z",
		"issue_url": "https://api.github.com/repos/acme/w/issues/1", "author_association": "OWNER",
	}
	const op = "/repos/{owner}/{repo}/issues/{issue_number}/comments"
	check := func(name string, mutate func(map[string]any), ok bool) {
		t.Helper()
		c := map[string]any{}
		for k, v := range comment {
			c[k] = v
		}
		mutate(c)
		b, _ := json.Marshal(c)
		err := ValidateREST("POST", op, 201, []byte(`{"body":"hi"}`), b)
		if (err == nil) != ok {
			t.Errorf("%s: %v; want valid %v", name, err, ok)
		}
	}
	check("as made", func(map[string]any) {}, true)
	check("user null (nullable-simple-user)", func(c map[string]any) { c["user"] = nil }, true)
	check("created_at not a date-time", func(c map[string]any) { c["created_at"] = "yesterday" }, false)
	check("html_url not a URI", func(c map[string]any) { c["html_url"] = "not a uri" }, false)
	check("id missing", func(c map[string]any) { delete(c, "id") }, false)
	check("body not a string", func(c map[string]any) { c["body"] = 7 }, false)
	check("node_id null", func(c map[string]any) { c["node_id"] = nil }, false)
	if err := ValidateREST("POST", op, 201, []byte(`{"bod":"hi"}`), mustJSON(comment)); err == nil {
		t.Error("a request body without body validates")
	}

	// Every webhook the stand-in sent validates; a push with a bad email
	// does not.
	ds, err := srv.WaitDeliveries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if errs := CheckExchanges(srv.Requests(), ds); len(errs) > 0 {
		t.Errorf("the stand-in's exchanges: %v", errs)
	}
	push := `{"ref":"refs/heads/main","before":"a","after":"b","created":false,"deleted":false,"forced":false,"base_ref":null,
		"compare":"https://github.com/acme/w/compare/a...b","commits":[],"head_commit":null,"pusher":{"name":"ada","email":"EMAIL"},
		"repository":REPO,"sender":null}`
	var repo json.RawMessage
	for _, d := range ds {
		var p struct {
			Repository json.RawMessage `json:"repository"`
		}
		if json.Unmarshal(d.Payload, &p) == nil && p.Repository != nil {
			repo = p.Repository
		}
	}
	if repo == nil {
		t.Fatal("no delivery with a repository")
	}
	good := strings.NewReplacer("EMAIL", "ada@example.com", "REPO", string(repo)).Replace(push)
	bad := strings.NewReplacer("EMAIL", "not an email", "REPO", string(repo)).Replace(push)
	good = strings.Replace(good, `"sender":null`, `"sender":{"login":"ada","id":1,"node_id":"U_1","avatar_url":"https://github.com/a.png","gravatar_id":"","url":"https://api.github.com/users/ada","html_url":"https://github.com/ada","followers_url":"https://api.github.com/users/ada/followers","following_url":"https://api.github.com/users/ada/following{/other_user}","gists_url":"https://api.github.com/users/ada/gists{/gist_id}","starred_url":"https://api.github.com/users/ada/starred{/owner}{/repo}","subscriptions_url":"https://api.github.com/users/ada/subscriptions","organizations_url":"https://api.github.com/users/ada/orgs","repos_url":"https://api.github.com/users/ada/repos","events_url":"https://api.github.com/users/ada/events{/privacy}","received_events_url":"https://api.github.com/users/ada/received_events","type":"User","site_admin":false}`, 1)
	bad = strings.Replace(bad, `"sender":null`, good[strings.Index(good, `"sender":`):len(good)-1], 1)
	if err := ValidateHook("push", []byte(good)); err != nil {
		t.Errorf("a push: %v", err)
	}
	if err := ValidateHook("push", []byte(bad)); err == nil {
		t.Error("a push whose pusher's email is not one validates")
	}
	for addr, ok := range map[string]bool{
		"ada@example.com": true, "41898282+github-actions[bot]@users.noreply.github.com": true,
		"harvest[bot]@users.noreply.127.0.0.1": true, "[bot]@example.com": false, "ada[bot]@example.com": false,
		"Ada <ada@example.com>": false, "not an email": false,
	} {
		if err := emailFormat(addr); (err == nil) != ok {
			t.Errorf("email %q: %v; want valid %v", addr, err, ok)
		}
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
