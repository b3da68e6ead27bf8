package ghsim_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/sim/ghsim"
)

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestWebhooks makes every kind of webhook the stand-in sends, checks the
// headers as GitHub sets them and each payload against GitHub's webhook
// schema, then redelivers one and sends one with a bad signature.
func TestWebhooks(t *testing.T) {
	w := newWorld(t, ghsim.Options{})
	ctx := ctxT(t)
	v := newValidatingTransport(t)
	tok, err := w.srv.Token(w.instID)
	if err != nil {
		t.Fatal(err)
	}
	gh := client(t, w, v, "token "+tok)

	n, err := w.srv.OpenIssue(ghsim.IssueSpec{Login: "alice", Repo: "acme/widget", Title: "Bug", Body: "it breaks"})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.srv.AddLabel(ghsim.LabelSpec{Login: "alice", Repo: "acme/widget", Number: n, Label: "harvest"}))
	must(w.srv.Assign(ghsim.AssignSpec{Login: "alice", Repo: "acme/widget", Number: n, Assignee: w.app.BotLogin}))
	_, err = w.srv.Comment(ghsim.CommentSpec{Login: "bob", Repo: "acme/widget", Number: n, Body: "@harvest-test fix this"})
	must(err)
	c, _, err := gh.Issues.CreateComment(ctx, "acme", "widget", n, &github.IssueComment{Body: github.Ptr("On it")})
	must(err)
	_, _, err = gh.Issues.EditComment(ctx, "acme", "widget", c.GetID(), &github.IssueComment{Body: github.Ptr("Done")})
	must(err)
	pr, _, err := gh.PullRequests.Create(ctx, "acme", "widget", &github.NewPullRequest{Title: github.Ptr("Fix"), Head: github.Ptr("feature"), Base: github.Ptr("main")})
	must(err)
	_, err = w.srv.ReviewComment(ctx, ghsim.ReviewCommentSpec{Login: "alice", Repo: "acme/widget", Number: pr.GetNumber(), Path: "app.go", Line: 11, Body: "and this?"})
	must(err)
	_, err = w.srv.CompleteCheckSuite(ctx, ghsim.CheckSuiteSpec{Repo: "acme/widget", Number: pr.GetNumber(),
		Runs: []ghsim.CheckRunSpec{{Name: "test", Conclusion: "failure", Title: "1 failed", Summary: "TestX", Text: "boom"}}})
	must(err)
	// A push to the PR's branch: pull_request synchronize.
	dir := t.TempDir()
	url := strings.Replace(w.srv.URL(), "http://", "http://x-access-token:"+tok+"@", 1) + "/acme/widget.git"
	mustGit(t, dir, "clone", "-q", "-b", "feature", url, ".")
	mustGit(t, dir, "commit", "-q", "--allow-empty", "-m", "more")
	mustGit(t, dir, "push", "-q", "origin", "feature")
	// A review of two comments and a body: two review comments, then
	// the review.
	_, err = w.srv.SubmitReview(ctx, ghsim.ReviewSpec{Login: "alice", Repo: "acme/widget", Number: pr.GetNumber(), Body: "See below.",
		Event: "REQUEST_CHANGES", Comments: []ghsim.ReviewCommentLine{{Path: "app.go", Line: 3, Body: "three?"}, {Path: "app.go", Line: 11, Body: "eleven?"}}})
	must(err)
	_, _, err = gh.PullRequests.Edit(ctx, "acme", "widget", pr.GetNumber(), &github.PullRequest{State: github.Ptr("closed")})
	must(err)
	// Another branch's pull request, merged: pull_request closed, merged.
	mustGit(t, dir, "checkout", "-q", "-b", "feature2")
	os.WriteFile(filepath.Join(dir, "NOTES.md"), []byte("notes\n"), 0o644)
	mustGit(t, dir, "add", "NOTES.md")
	mustGit(t, dir, "commit", "-q", "-m", "notes")
	mustGit(t, dir, "push", "-q", "origin", "feature2")
	pr2, err := w.srv.OpenPull(context.Background(), ghsim.PullSpec{Login: "alice", Repo: "acme/widget", Title: "Notes", Head: "feature2"})
	must(err)
	sha, err := w.srv.MergePull(ctx, ghsim.PullActionSpec{Login: "alice", Repo: "acme/widget", Number: pr2})
	must(err)
	merged, _, err := gh.PullRequests.Get(ctx, "acme", "widget", pr2)
	if err != nil || !merged.GetMerged() || merged.GetState() != "closed" || merged.GetMergeCommitSHA() != sha || merged.GetMergedBy().GetLogin() != "alice" {
		t.Fatalf("the merged pull request: %v %+v", err, merged)
	}
	if b, _ := w.srv.Branches("acme/widget"); b["main"] != sha {
		t.Errorf("main after the merge: %s, want the merge commit %s", b["main"], sha)
	}
	if _, err := w.srv.MergePull(ctx, ghsim.PullActionSpec{Login: "alice", Repo: "acme/widget", Number: pr2}); err == nil {
		t.Error("a closed pull request merged again")
	}
	if err := w.srv.ClosePull(ghsim.PullActionSpec{Login: "bob", Repo: "acme/widget", Number: pr.GetNumber()}); err == nil {
		t.Error("bob (read) closed a pull request")
	}

	// The installation managed: a repository taken out and put back, new
	// permissions accepted, suspended and unsuspended; another account's
	// installed and uninstalled.
	_, err = w.srv.CreateRepo(ctx, ghsim.RepoSpec{Owner: "acme", Name: "extra", Dir: w.srcDir})
	must(err)
	must(w.srv.SetInstallationRepos(ghsim.InstallationReposSpec{InstallationID: w.instID, Login: "alice", Remove: []string{"extra"}}))
	must(w.srv.SetInstallationRepos(ghsim.InstallationReposSpec{InstallationID: w.instID, Login: "alice", Add: []string{"extra"}}))
	must(w.srv.AcceptPermissions(ghsim.InstallationPermissionsSpec{InstallationID: w.instID, Login: "alice", Permissions: ghsim.DefaultAppPermissions}))
	must(w.srv.SuspendInstallation(ghsim.InstallationActionSpec{InstallationID: w.instID, Login: "alice"}))
	must(w.srv.UnsuspendInstallation(ghsim.InstallationActionSpec{InstallationID: w.instID, Login: "alice"}))
	other, err := w.srv.CreateInstallation(ghsim.InstallationSpec{AppID: w.app.ID, Account: "globex"})
	must(err)
	must(w.srv.DeleteInstallation(ghsim.InstallationActionSpec{InstallationID: other}))

	ds, err := w.srv.WaitDeliveries(ctx)
	must(err)
	seen := map[ghsim.WebhookKind]bool{}
	got := w.hooks.all()
	if len(got) != len(ds) {
		t.Fatalf("receiver got %d, log has %d", len(got), len(ds))
	}
	for i, d := range ds {
		seen[d.Kind] = true
		if d.State != ghsim.DeliveryDelivered || d.StatusCode != http.StatusAccepted || d.Duration <= 0 {
			t.Errorf("delivery %d %s: %+v", i, d.Kind, d)
		}
		r := got[i]
		h := r.Header
		if !r.SigOK || !strings.HasPrefix(h.Get("X-Hub-Signature"), "sha1=") {
			t.Errorf("%s: signature %q does not verify", d.Kind, h.Get("X-Hub-Signature-256"))
		}
		if h.Get("X-GitHub-Event") != d.Event || h.Get("X-GitHub-Delivery") != d.GUID || !uuidRE.MatchString(d.GUID) ||
			h.Get("X-GitHub-Hook-ID") == "" || h.Get("X-GitHub-Hook-Installation-Target-Type") != "integration" ||
			h.Get("X-GitHub-Hook-Installation-Target-ID") != jsonNum(w.app.ID) || !strings.HasPrefix(h.Get("User-Agent"), "GitHub-Hookshot/") ||
			h.Get("Content-Type") != "application/json" {
			t.Errorf("%s: headers %v", d.Kind, h)
		}
		if err := validateHook(t, d.Kind, r.Body); err != nil {
			t.Errorf("%s payload does not match GitHub's schema: %v\n%s", d.Kind, err, r.Body)
		}
		var p struct {
			Action       string `json:"action"`
			Installation struct {
				ID int64 `json:"id"`
			} `json:"installation"`
			Sender struct {
				Login string `json:"login"`
			} `json:"sender"`
		}
		json.Unmarshal(r.Body, &p)
		if p.Action != d.Action || (p.Installation.ID != w.instID && p.Installation.ID != other) || p.Sender.Login == "" {
			t.Errorf("%s: action %q installation %d sender %q", d.Kind, p.Action, p.Installation.ID, p.Sender.Login)
		}
	}
	for _, k := range ghsim.WebhookKinds() {
		if !seen[k] {
			t.Errorf("no %s delivered", k)
		}
	}
	var mergedSeen, reviewSeen bool
	for _, d := range ds {
		var p struct {
			PullRequest struct {
				Merged   bool                    `json:"merged"`
				MergedBy *struct{ Login string } `json:"merged_by"`
			} `json:"pull_request"`
			Review struct {
				ID    int64  `json:"id"`
				State string `json:"state"`
				Body  string `json:"body"`
			} `json:"review"`
		}
		json.Unmarshal(d.Payload, &p)
		mergedSeen = mergedSeen || (d.Kind == ghsim.HookPullRequestClosed && p.PullRequest.Merged && p.PullRequest.MergedBy != nil && p.PullRequest.MergedBy.Login == "alice")
		reviewSeen = reviewSeen || (d.Kind == ghsim.HookPullRequestReview && p.Review.State == "changes_requested" && p.Review.Body == "See below.")
	}
	if !mergedSeen || !reviewSeen {
		t.Errorf("a merged pull_request closed: %v; the review submitted with changes requested: %v", mergedSeen, reviewSeen)
	}

	// Redeliver: same GUID and body.
	first := ds[0]
	id, err := w.srv.Redeliver(first.ID)
	must(err)
	re, err := w.srv.WaitDelivery(ctx, func(d ghsim.Delivery) bool { return d.ID == id })
	must(err)
	last := w.hooks.all()[len(w.hooks.all())-1]
	if !re.Redelivery || re.GUID != first.GUID || last.Header.Get("X-GitHub-Delivery") != first.GUID || string(last.Body) != string(first.Payload) {
		t.Errorf("redelivery: %+v", re)
	}

	// A bad signature on purpose; the receiver's 401 is logged.
	must(w.srv.SetBadSignature(w.app.ID, true))
	w.hooks.mu.Lock()
	w.hooks.status = http.StatusUnauthorized
	w.hooks.mu.Unlock()
	_, err = w.srv.Comment(ghsim.CommentSpec{Login: "alice", Repo: "acme/widget", Number: n, Body: "forged?"})
	must(err)
	ds, err = w.srv.WaitDeliveries(ctx)
	must(err)
	bad := ds[len(ds)-1]
	if !bad.BadSignature || bad.StatusCode != http.StatusUnauthorized || w.hooks.all()[len(ds)-1].SigOK {
		t.Errorf("bad signature delivery: %+v", bad)
	}
}

func jsonNum(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestEditComment: a person's edit is issue_comment edited with the old
// body in changes.body.from, by GitHub's schema (performed_via_github_app
// null, as GitHub sends it for a person's comment).
func TestEditComment(t *testing.T) {
	w := newWorld(t, ghsim.Options{})
	ctx := ctxT(t)
	n, err := w.srv.OpenIssue(ghsim.IssueSpec{Login: "alice", Repo: "acme/widget", Title: "Bug"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := w.srv.Comment(ghsim.CommentSpec{Login: "alice", Repo: "acme/widget", Number: n, Body: "please look"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.srv.EditComment(ghsim.EditCommentSpec{Login: "bob", Repo: "acme/widget", CommentID: id, Body: "@harvest-test please look"}); err == nil {
		t.Error("bob (read) edited alice's comment")
	}
	if err := w.srv.EditComment(ghsim.EditCommentSpec{Login: "alice", Repo: "acme/widget", CommentID: id, Body: "@harvest-test please look"}); err != nil {
		t.Fatal(err)
	}
	ds, err := w.srv.WaitDeliveries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := ds[len(ds)-1]
	var p struct {
		Action  string `json:"action"`
		Changes struct {
			Body struct{ From string } `json:"body"`
		} `json:"changes"`
		Comment struct{ Body string } `json:"comment"`
	}
	json.Unmarshal(d.Payload, &p)
	if d.Kind != ghsim.HookIssueCommentEdited || p.Changes.Body.From != "please look" || p.Comment.Body != "@harvest-test please look" {
		t.Fatalf("the edit's delivery: %s %+v", d.Kind, p)
	}
	if err := validateHook(t, d.Kind, d.Payload); err != nil {
		t.Errorf("the edit's payload does not match GitHub's schema: %v", err)
	}
}
