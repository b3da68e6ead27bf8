package ghsim_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/sim/ghsim"
)

// authTransport adds an Authorization header (none if auth is ""), then
// validates.
type authTransport struct {
	auth string
	next http.RoundTripper
}

func (a *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if a.auth != "" {
		req.Header.Set("Authorization", a.auth)
	}
	return a.next.RoundTrip(req)
}

// client is go-github pointed at the stand-in as Harvest points it.
func client(t *testing.T, w *world, v *validatingTransport, auth string) *github.Client {
	t.Helper()
	c, err := github.NewClient(&http.Client{Transport: &authTransport{auth, v}}).WithEnterpriseURLs(w.srv.URL(), w.srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestGoGitHub drives every REST operation with go-github v75, the client
// Harvest uses, and checks each request and response against GitHub's
// description.
func TestGoGitHub(t *testing.T) {
	w := newWorld(t, ghsim.Options{})
	v := newValidatingTransport(t)
	ctx := ctxT(t)

	appc := client(t, w, v, "Bearer "+w.jwt(t))
	a, _, err := appc.Apps.Get(ctx, "")
	if err != nil || a.GetID() != w.app.ID || a.GetSlug() != "harvest-test" {
		t.Fatalf("GET /app: %v %+v", err, a)
	}
	inst, _, err := appc.Apps.FindRepositoryInstallation(ctx, "acme", "widget")
	if err != nil || inst.GetID() != w.instID || inst.GetAccount().GetLogin() != "acme" {
		t.Fatalf("GET installation: %v %+v", err, inst)
	}
	tok, resp, err := appc.Apps.CreateInstallationToken(ctx, w.instID, &github.InstallationTokenOptions{
		Repositories: []string{"widget"},
		Permissions: &github.InstallationPermissions{Contents: github.Ptr("write"), Issues: github.Ptr("write"),
			PullRequests: github.Ptr("write"), Checks: github.Ptr("read"), Metadata: github.Ptr("read")},
	})
	if err != nil || resp.StatusCode != 201 || !strings.HasPrefix(tok.GetToken(), "ghs_") || len(tok.Repositories) != 1 {
		t.Fatalf("POST access_tokens: %v %+v", err, tok)
	}
	if !tok.GetExpiresAt().Time.Equal(w.clock.Now().Add(time.Hour)) {
		t.Errorf("expires_at %v, want an hour from now", tok.GetExpiresAt())
	}
	// Asking for more than the installation has is a 422.
	_, resp, err = appc.Apps.CreateInstallationToken(ctx, w.instID, &github.InstallationTokenOptions{
		Permissions: &github.InstallationPermissions{Administration: github.Ptr("write")}})
	if err == nil || resp.StatusCode != 422 {
		t.Errorf("over-asking: %v", err)
	}

	gh := client(t, w, v, "token "+tok.GetToken())
	alice := client(t, w, v, "Bearer "+w.alice.Token)

	// The app's installations, and what a token reaches: the one narrowed
	// to widget, widget only; a person's token may not ask.
	insts, _, err := appc.Apps.ListInstallations(ctx, &github.ListOptions{PerPage: 100})
	if err != nil || len(insts) != 1 || insts[0].GetID() != w.instID || insts[0].GetAccount().GetLogin() != "acme" {
		t.Fatalf("GET /app/installations: %v %+v", err, insts)
	}
	reached, _, err := gh.Apps.ListRepos(ctx, nil)
	if err != nil || reached.GetTotalCount() != 1 || len(reached.Repositories) != 1 || reached.Repositories[0].GetFullName() != "acme/widget" {
		t.Fatalf("GET /installation/repositories: %v %+v", err, reached)
	}
	if _, resp, err := alice.Apps.ListRepos(ctx, nil); err == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /installation/repositories with a person's token: %v, want 403", err)
	}

	me, _, err := alice.Users.Get(ctx, "")
	if err != nil || me.GetLogin() != "alice" {
		t.Fatalf("GET /user: %v %+v", err, me)
	}

	// Get a user: the public profile, which is where Harvest finds a
	// commenter's name (webhook senders carry none). The email shows only if
	// public, and only to an authenticated caller.
	for _, u := range []ghsim.UserSpec{
		{Login: "ada", Name: "Ada Lovelace", Email: "ada@example.com", PublicEmail: true},
		{Login: "grace", Name: "Grace Hopper", Email: "grace@example.com"},
	} {
		if _, err := w.srv.AddUser(u); err != nil {
			t.Fatal(err)
		}
	}
	ada, _, err := gh.Users.Get(ctx, "Ada")
	if err != nil || ada.GetLogin() != "ada" || ada.GetName() != "Ada Lovelace" || ada.GetEmail() != "ada@example.com" || ada.GetType() != "User" {
		t.Fatalf("GET /users/ada: %v %+v", err, ada)
	}
	grace, _, err := alice.Users.Get(ctx, "grace")
	if err != nil || grace.GetName() != "Grace Hopper" || grace.Email != nil {
		t.Fatalf("GET /users/grace: %v %+v, want a name and a null email", err, grace)
	}
	anon := client(t, w, v, "")
	if ada, _, err = anon.Users.Get(ctx, "ada"); err != nil || ada.GetName() != "Ada Lovelace" || ada.Email != nil {
		t.Fatalf("GET /users/ada anonymously: %v %+v, want a null email", err, ada)
	}
	if bob, _, err := gh.Users.Get(ctx, "bob"); err != nil || bob.Name != nil {
		t.Fatalf("GET /users/bob: %v %+v, want a null name", err, bob)
	}
	if _, resp, err := gh.Users.Get(ctx, "nobody"); err == nil || resp.StatusCode != 404 {
		t.Fatalf("GET /users/nobody: %v, want 404", err)
	}

	repo, _, err := gh.Repositories.Get(ctx, "acme", "widget")
	if err != nil || repo.GetDefaultBranch() != "main" || !repo.GetPrivate() || repo.GetCloneURL() != w.srv.URL()+"/acme/widget.git" {
		t.Fatalf("GET repo: %v %+v", err, repo)
	}
	if err := w.srv.ProtectBranch(ghsim.ProtectionSpec{Repo: "acme/widget", Branch: "main", Protected: true}); err != nil {
		t.Fatal(err)
	}
	br, _, err := gh.Repositories.GetBranch(ctx, "acme", "widget", "main", 0)
	if err != nil || !br.GetProtected() || br.GetCommit().GetCommit().GetMessage() != "first" {
		t.Fatalf("GET branch: %v %+v", err, br)
	}
	perm, _, err := gh.Repositories.GetPermissionLevel(ctx, "acme", "widget", "bob")
	if err != nil || perm.GetPermission() != "read" {
		t.Fatalf("GET permission: %v %+v", err, perm)
	}

	n, err := w.srv.OpenIssue(ghsim.IssueSpec{Login: "alice", Repo: "acme/widget", Title: "Fix it", Body: "please"})
	if err != nil {
		t.Fatal(err)
	}
	is, _, err := gh.Issues.Get(ctx, "acme", "widget", n)
	if err != nil || is.GetTitle() != "Fix it" || is.GetUser().GetLogin() != "alice" {
		t.Fatalf("GET issue: %v %+v", err, is)
	}
	c, resp, err := gh.Issues.CreateComment(ctx, "acme", "widget", n, &github.IssueComment{Body: github.Ptr("Working on it")})
	if err != nil || resp.StatusCode != 201 || c.GetUser().GetLogin() != "harvest-test[bot]" {
		t.Fatalf("POST comment: %v %+v", err, c)
	}
	// The app's bot, as GitHub writes it: its login escaped in its API
	// URLs, its page the app's.
	if u := c.GetUser(); u.GetType() != "Bot" || !strings.HasSuffix(u.GetURL(), "/users/harvest-test%5Bbot%5D") || u.GetHTMLURL() != w.srv.URL()+"/apps/harvest-test" {
		t.Errorf("the bot as a comment's author: %s %s %s", u.GetType(), u.GetURL(), u.GetHTMLURL())
	}
	bot, _, err := gh.Users.Get(ctx, "harvest-test%5Bbot%5D")
	if err != nil || bot.GetLogin() != "harvest-test[bot]" || bot.GetID() != c.GetUser().GetID() || bot.GetType() != "Bot" {
		t.Fatalf("GET /users/harvest-test%%5Bbot%%5D: %v %+v", err, bot)
	}
	c, _, err = gh.Issues.EditComment(ctx, "acme", "widget", c.GetID(), &github.IssueComment{Body: github.Ptr("Done")})
	if err != nil || c.GetBody() != "Done" {
		t.Fatalf("PATCH comment: %v %+v", err, c)
	}
	if got, _, err := gh.Issues.GetComment(ctx, "acme", "widget", c.GetID()); err != nil || got.GetBody() != "Done" {
		t.Fatalf("GET comment: %v %+v", err, got)
	}
	if _, resp, err := gh.Issues.GetComment(ctx, "acme", "widget", c.GetID()+999); err == nil || resp.StatusCode != 404 {
		t.Errorf("GET a missing comment: %v, want 404", err)
	}
	cs, _, err := gh.Issues.ListComments(ctx, "acme", "widget", n, nil)
	if err != nil || len(cs) != 1 || cs[0].GetBody() != "Done" {
		t.Fatalf("GET comments: %v %+v", err, cs)
	}
	_, resp, err = gh.Reactions.CreateIssueCommentReaction(ctx, "acme", "widget", c.GetID(), "eyes")
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("react comment: %v", err)
	}
	_, resp, err = gh.Reactions.CreateIssueCommentReaction(ctx, "acme", "widget", c.GetID(), "eyes")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("react again: %v %d, want 200", err, resp.StatusCode)
	}
	if _, resp, err = gh.Reactions.CreateIssueReaction(ctx, "acme", "widget", n, "rocket"); err != nil || resp.StatusCode != 201 {
		t.Fatalf("react issue: %v", err)
	}

	pr, resp, err := gh.PullRequests.Create(ctx, "acme", "widget", &github.NewPullRequest{
		Title: github.Ptr("Feature"), Head: github.Ptr("feature"), Base: github.Ptr("main"),
		Body: github.Ptr("Fixes #1"), Draft: github.Ptr(true)})
	if err != nil || resp.StatusCode != 201 || !pr.GetDraft() || pr.GetNumber() != n+1 || pr.GetAdditions() != 3 || pr.GetChangedFiles() != 1 {
		t.Fatalf("POST pulls: %v %+v", err, pr)
	}
	_, resp, err = gh.PullRequests.Create(ctx, "acme", "widget", &github.NewPullRequest{
		Title: github.Ptr("Again"), Head: github.Ptr("acme:feature"), Base: github.Ptr("main")})
	if err == nil || resp.StatusCode != 422 || !strings.Contains(err.Error(), "A pull request already exists for acme:feature.") {
		t.Errorf("second PR: %v", err)
	}
	_, resp, err = gh.PullRequests.Create(ctx, "acme", "widget", &github.NewPullRequest{
		Title: github.Ptr("Nope"), Head: github.Ptr("no-such"), Base: github.Ptr("main")})
	if err == nil || resp.StatusCode != 422 {
		t.Errorf("PR from a missing branch: %v", err)
	}
	prs, _, err := gh.PullRequests.List(ctx, "acme", "widget", &github.PullRequestListOptions{State: "open", Head: "acme:feature", Base: "main"})
	if err != nil || len(prs) != 1 || prs[0].GetNumber() != pr.GetNumber() {
		t.Fatalf("GET pulls: %v %+v", err, prs)
	}
	if prs, _, _ = gh.PullRequests.List(ctx, "acme", "widget", &github.PullRequestListOptions{Head: "acme:other"}); len(prs) != 0 {
		t.Errorf("head filter: %d PRs", len(prs))
	}
	got, _, err := gh.PullRequests.Get(ctx, "acme", "widget", pr.GetNumber())
	if err != nil || got.GetHead().GetRef() != "feature" || got.GetHead().GetSHA() == "" {
		t.Fatalf("GET pull: %v %+v", err, got)
	}
	got, _, err = gh.PullRequests.Edit(ctx, "acme", "widget", pr.GetNumber(), &github.PullRequest{Title: github.Ptr("Feature, ready"), Body: github.Ptr("Fixes #1\n\nprogress")})
	if err != nil || got.GetTitle() != "Feature, ready" {
		t.Fatalf("PATCH pull: %v %+v", err, got)
	}
	// Reviewers: a collaborator, not the author, not a stranger.
	rq, resp, err := gh.PullRequests.RequestReviewers(ctx, "acme", "widget", pr.GetNumber(), github.ReviewersRequest{Reviewers: []string{"bob"}})
	if err != nil || resp.StatusCode != 201 || len(rq.RequestedReviewers) != 1 || rq.RequestedReviewers[0].GetLogin() != "bob" {
		t.Fatalf("POST requested_reviewers: %v %+v", err, rq)
	}
	if got, _, _ := gh.PullRequests.Get(ctx, "acme", "widget", pr.GetNumber()); len(got.RequestedReviewers) != 1 {
		t.Errorf("the pull request's requested reviewers: %+v", got.RequestedReviewers)
	}
	if _, resp, err := gh.PullRequests.RequestReviewers(ctx, "acme", "widget", pr.GetNumber(), github.ReviewersRequest{Reviewers: []string{"harvest-test[bot]"}}); err == nil || resp.StatusCode != 422 || !strings.Contains(err.Error(), "pull request author") {
		t.Errorf("requesting the author: %v, want 422", err)
	}
	if _, resp, err := gh.PullRequests.RequestReviewers(ctx, "acme", "widget", pr.GetNumber(), github.ReviewersRequest{Reviewers: []string{"ada"}}); err == nil || resp.StatusCode != 422 || !strings.Contains(err.Error(), "collaborators") {
		t.Errorf("requesting a stranger: %v, want 422", err)
	}
	// Labels, made in the repository when first used. The description
	// wants {"labels": [...]}; go-github's AddLabelsToIssue sends a bare
	// array, which GitHub (and the stand-in) accept too, unvalidated here.
	req, _ := gh.NewRequest("POST", fmt.Sprintf("repos/acme/widget/issues/%d/labels", pr.GetNumber()), map[string][]string{"labels": {"harvest", "bot"}})
	var ls []*github.Label
	if _, err := gh.Do(ctx, req, &ls); err != nil || len(ls) != 2 || ls[0].GetName() != "harvest" {
		t.Fatalf("POST labels: %v %+v", err, ls)
	}
	plain, err := github.NewClient(&http.Client{Transport: &authTransport{"token " + tok.GetToken(), http.DefaultTransport}}).WithEnterpriseURLs(w.srv.URL(), w.srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	if ls, _, err = plain.Issues.AddLabelsToIssue(ctx, "acme", "widget", pr.GetNumber(), []string{"Harvest"}); err != nil || len(ls) != 2 {
		t.Errorf("adding a label again, as a bare array: %v %+v", err, ls)
	}
	// A PR is an issue: its comments are issue comments.
	if _, _, err := gh.Issues.CreateComment(ctx, "acme", "widget", pr.GetNumber(), &github.IssueComment{Body: github.Ptr("on the PR")}); err != nil {
		t.Fatalf("comment on PR: %v", err)
	}

	rcID, err := w.srv.ReviewComment(ctx, ghsim.ReviewCommentSpec{Login: "alice", Repo: "acme/widget", Number: pr.GetNumber(), Path: "app.go", Line: 4, Body: "why four?"})
	if err != nil {
		t.Fatal(err)
	}
	reply, resp, err := gh.PullRequests.CreateCommentInReplyTo(ctx, "acme", "widget", pr.GetNumber(), "because", rcID)
	if err != nil || resp.StatusCode != 201 || reply.GetInReplyTo() != rcID || reply.GetPath() != "app.go" {
		t.Fatalf("reply: %v %+v", err, reply)
	}
	if !strings.HasPrefix(reply.GetDiffHunk(), "@@ -1,") || !strings.HasSuffix(reply.GetDiffHunk(), "+line four") {
		t.Errorf("diff_hunk %q", reply.GetDiffHunk())
	}
	// The replies endpoint, which matches GitHub's description.
	req, _ = gh.NewRequest("POST", fmt.Sprintf("repos/acme/widget/pulls/%d/comments/%d/replies", pr.GetNumber(), rcID), map[string]string{"body": "again"})
	var reply2 github.PullRequestComment
	if resp, err := gh.Do(ctx, req, &reply2); err != nil || resp.StatusCode != 201 || reply2.GetInReplyTo() != rcID {
		t.Fatalf("replies: %v %+v", err, reply2)
	}
	if _, resp, err = gh.Reactions.CreatePullRequestCommentReaction(ctx, "acme", "widget", rcID, "+1"); err != nil || resp.StatusCode != 201 {
		t.Fatalf("react review comment: %v", err)
	}
	// Every review comment belongs to a review: a single one makes its
	// own; a submitted review holds its comments.
	rid, err := w.srv.SubmitReview(ctx, ghsim.ReviewSpec{Login: "alice", Repo: "acme/widget", Number: pr.GetNumber(), Body: "Two things.",
		Event: "REQUEST_CHANGES", Comments: []ghsim.ReviewCommentLine{{Path: "app.go", Line: 4, Body: "first"}, {Path: "app.go", Line: 4, Body: "second"}}})
	if err != nil {
		t.Fatal(err)
	}
	rv, _, err := gh.PullRequests.GetReview(ctx, "acme", "widget", pr.GetNumber(), rid)
	if err != nil || rv.GetState() != "CHANGES_REQUESTED" || rv.GetBody() != "Two things." || rv.GetUser().GetLogin() != "alice" {
		t.Fatalf("GET review: %v %+v", err, rv)
	}
	rcs, _, err := gh.PullRequests.ListReviewComments(ctx, "acme", "widget", pr.GetNumber(), rid, nil)
	if err != nil || len(rcs) != 2 || rcs[0].GetBody() != "first" || rcs[1].GetPullRequestReviewID() != rid {
		t.Fatalf("GET review comments: %v %+v", err, rcs)
	}
	if _, resp, err := gh.PullRequests.GetReview(ctx, "acme", "widget", pr.GetNumber(), rid+999); err == nil || resp.StatusCode != 404 {
		t.Errorf("GET a missing review: %v, want 404", err)
	}

	suite, err := w.srv.CompleteCheckSuite(ctx, ghsim.CheckSuiteSpec{Repo: "acme/widget", Number: pr.GetNumber(),
		Runs: []ghsim.CheckRunSpec{{Name: "test", Conclusion: "failure", Title: "2 failed", Summary: "TestA, TestB", Text: "--- FAIL: TestA"},
			{Name: "lint", Conclusion: "success"}}})
	if err != nil {
		t.Fatal(err)
	}
	runs, _, err := gh.Checks.ListCheckRunsCheckSuite(ctx, "acme", "widget", suite, nil)
	if err != nil || runs.GetTotal() != 2 || runs.CheckRuns[0].GetOutput().GetText() != "--- FAIL: TestA" || runs.CheckRuns[0].GetConclusion() != "failure" {
		t.Fatalf("check runs: %v %+v", err, runs)
	}
	if len(runs.CheckRuns[0].PullRequests) != 1 {
		t.Errorf("check run pull_requests: %+v", runs.CheckRuns[0].PullRequests)
	}

	// Check runs are an App's with checks: write (another App, "ci",
	// installed on acme with it): one in progress, then completed; its
	// suite completed is delivered to the Apps on the repository.
	ci, err := w.srv.CreateApp(ghsim.AppSpec{Slug: "ci", Permissions: map[string]string{"metadata": "read", "checks": "write"}})
	if err != nil {
		t.Fatal(err)
	}
	ciInst, err := w.srv.CreateInstallation(ghsim.InstallationSpec{AppID: ci.ID, Account: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	ciKey, err := ghsim.ParsePrivateKey([]byte(ci.PrivateKeyPEM))
	if err != nil {
		t.Fatal(err)
	}
	now := w.clock.Now()
	ciTok, _, err := client(t, w, v, "Bearer "+jwt(t, ciKey, ci.ID, now.Add(-time.Minute), now.Add(9*time.Minute))).Apps.CreateInstallationToken(ctx, ciInst,
		&github.InstallationTokenOptions{Repositories: []string{"widget"}, Permissions: &github.InstallationPermissions{Checks: github.Ptr("write")}})
	if err != nil {
		t.Fatal(err)
	}
	cigh := client(t, w, v, "token "+ciTok.GetToken())
	head := runs.CheckRuns[0].GetHeadSHA()
	hooksBefore := len(w.hooks.all())
	run, resp, err := cigh.Checks.CreateCheckRun(ctx, "acme", "widget", github.CreateCheckRunOptions{Name: "Harvest", HeadSHA: head,
		Status: github.Ptr("in_progress"), ExternalID: github.Ptr("s-1"), DetailsURL: github.Ptr("http://harvest.example/sessions/s-1"),
		Output: &github.CheckRunOutput{Title: github.Ptr("Turn 2 · working"), Summary: github.Ptr("Fix the failing test")}})
	if err != nil || resp.StatusCode != 201 || run.GetStatus() != "in_progress" || run.Conclusion != nil || run.GetApp().GetSlug() != "ci" ||
		run.GetExternalID() != "s-1" || run.GetDetailsURL() != "http://harvest.example/sessions/s-1" || run.GetHeadSHA() != head {
		t.Fatalf("POST check-runs: %v %+v", err, run)
	}
	run, _, err = cigh.Checks.UpdateCheckRun(ctx, "acme", "widget", run.GetID(), github.UpdateCheckRunOptions{Name: "Harvest",
		Conclusion: github.Ptr("success"), Output: &github.CheckRunOutput{Title: github.Ptr("Turn 2 · done"), Summary: github.Ptr("Fixed add")}})
	if err != nil || run.GetStatus() != "completed" || run.GetConclusion() != "success" || run.CompletedAt == nil || run.GetOutput().GetSummary() != "Fixed add" {
		t.Fatalf("PATCH check-runs: %v %+v", err, run)
	}
	// Deliveries go out in the background: wait for them (the receiver
	// records a delivery before it answers).
	if _, err := w.srv.WaitDeliveries(ctx); err != nil {
		t.Fatal(err)
	}
	var suiteDone bool
	for _, h := range w.hooks.all()[hooksBefore:] {
		var p struct {
			CheckSuite struct {
				Conclusion string `json:"conclusion"`
				App        struct{ Slug string }
			} `json:"check_suite"`
		}
		if h.Header.Get("X-GitHub-Event") == "check_suite" && json.Unmarshal(h.Body, &p) == nil && p.CheckSuite.App.Slug == "ci" && p.CheckSuite.Conclusion == "success" {
			suiteDone = true
		}
	}
	if !suiteDone {
		t.Error("no check_suite completed (success) of ci's suite delivered")
	}
	if l, err := w.srv.CheckRuns("acme/widget"); err != nil || len(l) != 3 || l[2].Name != "Harvest" || l[2].Conclusion != "success" || l[2].Title != "Turn 2 · done" {
		t.Errorf("CheckRuns: %v %+v", err, l)
	}
	for _, c := range []struct {
		what string
		gh   *github.Client
		opts github.CreateCheckRunOptions
		want int
	}{
		{"harvest-test's token (checks: read)", gh, github.CreateCheckRunOptions{Name: "x", HeadSHA: head}, 403},
		{"a person's token", alice, github.CreateCheckRunOptions{Name: "x", HeadSHA: head}, 403},
		{"an unknown commit", cigh, github.CreateCheckRunOptions{Name: "x", HeadSHA: strings.Repeat("0", 40)}, 422},
		{"completed without a conclusion", cigh, github.CreateCheckRunOptions{Name: "x", HeadSHA: head, Status: github.Ptr("completed")}, 422},
	} {
		if _, resp, err := c.gh.Checks.CreateCheckRun(ctx, "acme", "widget", c.opts); err == nil || resp.StatusCode != c.want {
			t.Errorf("POST check-runs with %s: %v; want %d", c.what, err, c.want)
		}
	}

	// Close it (pull_request closed).
	if got, _, err = gh.PullRequests.Edit(ctx, "acme", "widget", pr.GetNumber(), &github.PullRequest{State: github.Ptr("closed")}); err != nil || got.GetState() != "closed" {
		t.Fatalf("close: %v", err)
	}

	// Delete its branch (heads/NAME, slashes and all); again: 422.
	pushURL := strings.Replace(w.srv.URL(), "http://", "http://x-access-token:"+tok.GetToken()+"@", 1) + "/acme/widget.git"
	mustGit(t, w.srcDir, "push", "-q", pushURL, "feature:refs/heads/harvest/s-gone")
	if _, err := gh.Git.DeleteRef(ctx, "acme", "widget", "heads/harvest/s-gone"); err != nil {
		t.Fatalf("DELETE ref: %v", err)
	}
	if b, _ := w.srv.Branches("acme/widget"); b["harvest/s-gone"] != "" {
		t.Errorf("the deleted branch is still there: %v", b)
	}
	if resp, err := gh.Git.DeleteRef(ctx, "acme", "widget", "heads/harvest/s-gone"); err == nil || resp.StatusCode != 422 {
		t.Errorf("DELETE a missing ref: %v, want 422", err)
	}
	if resp, err := gh.Git.DeleteRef(ctx, "acme", "widget", "heads/main"); err == nil || resp.StatusCode != 422 {
		t.Errorf("DELETE the default branch: %v, want 422", err)
	}

	// bob forks it (202: go-github's AcceptedError, with the fork).
	bobc := client(t, w, v, "token "+w.bob.Token)
	fork, resp, err := bobc.Repositories.CreateFork(ctx, "acme", "widget", nil)
	var accepted *github.AcceptedError
	if !errors.As(err, &accepted) || resp.StatusCode != 202 || fork.GetFullName() != "bob/widget" || !fork.GetFork() || fork.GetParent().GetFullName() != "acme/widget" {
		t.Errorf("POST forks: %v %d %+v", err, resp.StatusCode, fork)
	}

	// REST is served at the root too.
	root := github.NewClient(&http.Client{Transport: &authTransport{"token " + tok.GetToken(), v}})
	root.BaseURL, _ = root.BaseURL.Parse(w.srv.URL() + "/")
	if r, _, err := root.Repositories.Get(ctx, "acme", "widget"); err != nil || r.GetName() != "widget" {
		t.Errorf("GET repo at the root: %v", err)
	}

	if m := v.missing(); len(m) > 0 {
		t.Errorf("operations not exercised: %v", m)
	}
}
