package ghsim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/sim/ghsim/ghschema"
)

// TestForks: bob (read on acme/widget) forks it through the REST API
// (202, a repository of his with fork, parent and source), pushes a
// branch to his fork and opens a pull request from it into acme/widget
// ("bob:fix"). The pull request says where its head is as GitHub does
// (head.repo the fork, fork true, head.label bob:fix), in REST and in
// the pull_request opened webhook; the base repository serves its commits
// as refs/pull/N/head, which an installation token of acme's fetches and
// nobody can push; that token can neither push to the fork nor fork.
// bob's next push to the fork moves the pull request (synchronize) and
// its ref. Every exchange validates against GitHub's descriptions.
func TestForks(t *testing.T) {
	w := newWorld(t, ghsim.Options{})
	ctx := ctxT(t)
	api := w.srv.URL() + "/api/v3"
	bob := "token " + w.bob.Token

	st, fork := doJSON(t, "POST", api+"/repos/acme/widget/forks", bob, map[string]any{"default_branch_only": true})
	if st != 202 || fork["full_name"] != "bob/widget" || fork["fork"] != true {
		t.Fatalf("fork: %d %v", st, fork)
	}
	if p, _ := fork["parent"].(map[string]any); p["full_name"] != "acme/widget" {
		t.Errorf("the fork's parent: %v", fork["parent"])
	}
	if st, again := doJSON(t, "POST", api+"/repos/acme/widget/forks", bob, nil); st != 202 || again["id"] != fork["id"] {
		t.Errorf("forking again: %d %v; want the same fork", st, again["id"])
	}
	if st, got := doJSON(t, "GET", api+"/repos/bob/widget", bob, nil); st != 200 || got["fork"] != true {
		t.Errorf("GET the fork: %d fork=%v", st, got["fork"])
	}
	if st, got := doJSON(t, "GET", api+"/repos/acme/widget", bob, nil); st != 200 || got["forks_count"] != float64(1) || got["fork"] != false {
		t.Errorf("GET the parent: %d forks_count=%v fork=%v", st, got["forks_count"], got["fork"])
	}
	tok, err := w.srv.Token(w.instID)
	if err != nil {
		t.Fatal(err)
	}
	if st, got := doJSON(t, "POST", api+"/repos/acme/widget/forks", "token "+tok, nil); st != 403 || got["message"] != "Resource not accessible by integration" {
		t.Errorf("an installation token forking: %d %v", st, got)
	}
	if br, _ := w.srv.Branches("bob/widget"); len(br) != 1 || br["main"] == "" {
		t.Errorf("the fork's branches (default_branch_only): %v", br)
	}

	// bob's branch on his fork, and a pull request from it.
	forkURL := strings.Replace(w.srv.URL(), "http://", "http://bob:"+w.bob.Token+"@", 1) + "/bob/widget.git"
	dir := t.TempDir()
	mustGit(t, dir, "clone", "-q", forkURL, ".")
	mustGit(t, dir, "checkout", "-q", "-b", "fix")
	os.WriteFile(filepath.Join(dir, "FIX.md"), []byte("fix\n"), 0o644)
	mustGit(t, dir, "add", "FIX.md")
	mustGit(t, dir, "commit", "-q", "-m", "bob's fix")
	mustGit(t, dir, "push", "-q", "origin", "fix")
	first := mustGit(t, dir, "rev-parse", "HEAD")
	if br, _ := w.srv.Branches("acme/widget"); br["fix"] != "" {
		t.Fatalf("bob's push to his fork reached acme/widget: %v", br)
	}
	st, pr := doJSON(t, "POST", api+"/repos/acme/widget/pulls", bob, map[string]any{"title": "A fix", "head": "bob:fix", "base": "main"})
	if st != 201 {
		t.Fatalf("opening the fork's pull request: %d %v", st, pr)
	}
	num := int(pr["number"].(float64))
	head := pr["head"].(map[string]any)
	hrepo := head["repo"].(map[string]any)
	if head["label"] != "bob:fix" || head["ref"] != "fix" || head["sha"] != first || hrepo["full_name"] != "bob/widget" || hrepo["fork"] != true {
		t.Errorf("the pull request's head: %v", head)
	}
	if base := pr["base"].(map[string]any); base["repo"].(map[string]any)["full_name"] != "acme/widget" {
		t.Errorf("the pull request's base: %v", base)
	}
	if st, _ := doJSON(t, "POST", api+"/repos/acme/widget/pulls", bob, map[string]any{"title": "x", "head": "mallory:fix", "base": "main"}); st != 422 {
		t.Errorf("a head in no fork: %d; want 422", st)
	}
	if st, l := doJSONList(t, api+"/repos/acme/widget/pulls?head=bob:fix", bob); st != 200 || len(l) != 1 {
		t.Errorf("listing head=bob:fix: %d, %d pull requests", st, len(l))
	}
	d, err := w.srv.WaitDelivery(ctx, func(d ghsim.Delivery) bool { return d.Kind == ghsim.HookPullRequestOpened })
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(d.Payload), `"full_name":"bob/widget"`) {
		t.Errorf("pull_request opened does not name the fork as its head's repository")
	}

	// refs/pull/N/head in the base repository: fetched with acme's
	// token, refused to a push.
	ref := fmt.Sprintf("refs/pull/%d/head", num)
	mine := t.TempDir()
	mustGit(t, mine, "init", "-q")
	mustGit(t, mine, "fetch", "-q", cloneURL(w, tok), "+"+ref+":refs/remotes/pr")
	if got := mustGit(t, mine, "rev-parse", "refs/remotes/pr"); got != first {
		t.Errorf("%s is %s; want %s", ref, got, first)
	}
	if out, err := runGit(t, dir, "push", cloneURL(w, tok), "HEAD:"+ref); err == nil || !strings.Contains(out, "deny updating a hidden ref") {
		t.Errorf("pushing to %s: %v\n%s", ref, err, out)
	}
	tokFork := strings.Replace(w.srv.URL(), "http://", "http://x-access-token:"+tok+"@", 1) + "/bob/widget.git"
	if out, err := runGit(t, dir, "push", tokFork, "HEAD:refs/heads/harvest"); err == nil {
		t.Errorf("acme's installation token pushed to bob's fork:\n%s", out)
	}

	// bob pushes again: synchronize, and the ref follows.
	os.WriteFile(filepath.Join(dir, "FIX.md"), []byte("fix, twice\n"), 0o644)
	mustGit(t, dir, "commit", "-q", "-am", "bob's second fix")
	mustGit(t, dir, "push", "-q", "origin", "fix")
	second := mustGit(t, dir, "rev-parse", "HEAD")
	if _, err := w.srv.WaitDelivery(ctx, func(d ghsim.Delivery) bool { return d.Kind == ghsim.HookPullRequestSynchronize }); err != nil {
		t.Fatal(err)
	}
	mustGit(t, mine, "fetch", "-q", cloneURL(w, tok), "+"+ref+":refs/remotes/pr")
	if got := mustGit(t, mine, "rev-parse", "refs/remotes/pr"); got != second {
		t.Errorf("after bob's push %s is %s; want %s", ref, got, second)
	}
	if st, got := doJSON(t, "GET", fmt.Sprintf("%s/repos/acme/widget/pulls/%d", api, num), bob, nil); st != 200 || got["head"].(map[string]any)["sha"] != second || got["commits"] != float64(2) {
		t.Errorf("the pull request after bob's push: %d head %v, %v commits", st, got["head"], got["commits"])
	}

	// Merged: the base gets the fork's commits.
	if _, err := w.srv.MergePull(ctx, ghsim.PullActionSpec{Login: "alice", Repo: "acme/widget", Number: num}); err != nil {
		t.Fatal(err)
	}
	br, _ := w.srv.Branches("acme/widget")
	mustGit(t, mine, "fetch", "-q", cloneURL(w, tok), "+refs/heads/main:refs/remotes/main")
	if out, err := runGit(t, mine, "merge-base", "--is-ancestor", second, "refs/remotes/main"); err != nil || br["main"] == "" {
		t.Errorf("the merged main does not have bob's commits: %v %s", err, out)
	}
	ds, err := w.srv.WaitDeliveries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range ghschema.CheckExchanges(w.srv.Requests(), ds) {
		t.Error(err)
	}
}

// doJSONList GETs a list (validated like doJSON's answers).
func doJSONList(t *testing.T, url, auth string) (int, []any) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out []any
	json.Unmarshal(raw, &out)
	if op, ok := matchOperation("GET", req.URL.EscapedPath()); ok {
		if err := validateREST(t, op, resp.StatusCode, nil, raw); err != nil {
			t.Errorf("GET %s: %v", url, err)
		}
	}
	return resp.StatusCode, out
}
