package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sim/ghsim"
)

// visibleScript: the fix and the review's commit (reviewScript), and a
// request the agent answers without changing anything.
var visibleScript = `
rules:
  - name: look
    when: {last_user: "just look"}
    reply: {text: "Nothing needs changing: add is right on this branch.", usage: {input_tokens: 100, output_tokens: 10}}
` + reviewScript[len("\nrules:\n"):]

// TestGitHubWhatPeopleSee: a review comment is answered in its own
// thread, mentioning its author and naming the commit that addressed it;
// the pull request's Harvest section is written again after that turn
// while what a person wrote outside it survives; a session whose agent
// commits nothing pushes nothing (no branch, no pull request) and says
// so, with the agent's reason, in a comment that mentions the requester.
func TestGitHubWhatPeopleSee(t *testing.T) {
	g := newGHEnv(t)
	e := newServeEnvWith(t, visibleScript)
	s := e.start(g.serveArgs()...)
	if err := g.gs.SetWebhookURL(g.app.ID, s.url+"/v1/github/webhook"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ada := g.client(t, g.ada)
	c := e.client(s)

	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "@harvest fix the failing test"}); err != nil {
		t.Fatal(err)
	}
	var pr *github.PullRequest
	waitHTTP(t, 2*time.Minute, "the pull request", func() bool {
		prs, _, err := ada.PullRequests.List(ctx, "acme", "calc", &github.PullRequestListOptions{State: "open"})
		if err == nil && len(prs) > 0 {
			pr = prs[0]
		}
		return pr != nil
	})
	id := mustSessions(t, c)[0].ID
	waitIdle := func(what string, turns int) {
		t.Helper()
		waitHTTP(t, 2*time.Minute, what, func() bool {
			v, err := c.GetSession(ctx, id)
			return err == nil && v.Turns >= turns && v.State == "idle"
		})
	}
	waitIdle("the first turn", 1)

	// A person edits the description around Harvest's section.
	section := func(body string) string {
		i, j := strings.Index(body, "<!-- harvest:begin"), strings.Index(body, "<!-- harvest:end -->")
		if i < 0 || j < i {
			t.Fatalf("no Harvest section in the body: %q", body)
		}
		return body[i:j]
	}
	first := section(pr.GetBody())
	edited := "Reviewer notes 7781: check the overflow case.\n\n" + pr.GetBody() + "\n\nSigned off 7782."
	if _, _, err := ada.PullRequests.Edit(ctx, "acme", "calc", pr.GetNumber(), &github.PullRequest{Body: github.Ptr(edited)}); err != nil {
		t.Fatal(err)
	}

	// A review comment: answered in its thread, naming the commit.
	rc, err := g.gs.ReviewComment(ctx, ghsim.ReviewCommentSpec{Login: "ada", Repo: "acme/calc", Number: pr.GetNumber(), Path: "calc.sh", Line: 1, Body: "Please document add."})
	if err != nil {
		t.Fatal(err)
	}
	waitIdle("the review's turn", 2)
	head := mustBranch(t, g, pr.GetHead().GetRef())
	bare := filepath.Join(g.gs.Dir(), "repos", "acme", "calc.git")
	if subj := testbin.Git(t, bare, "log", "-1", "--format=%s", head); subj != "Document add" {
		t.Fatalf("the branch's head is %q, not the review's commit", subj)
	}
	replies := fmt.Sprintf("/api/v3/repos/acme/calc/pulls/%d/comments/%d/replies", pr.GetNumber(), rc)
	var reply string
	waitHTTP(t, time.Minute, "the reply in the review comment's thread", func() bool {
		for _, r := range g.gs.Requests() {
			if r.Method == http.MethodPost && r.Path == replies && r.Status == http.StatusCreated {
				var b struct{ Body string }
				if json.Unmarshal(r.Body, &b) == nil {
					reply = b.Body
				}
			}
		}
		return reply != ""
	})
	if !strings.HasPrefix(reply, "@ada ✅ Done in "+head) || !strings.Contains(reply, "Documented add.") {
		t.Errorf("the thread's reply %q; want @ada, the commit %s and the summary", reply, head)
	}
	got, _, err := ada.PullRequests.Get(ctx, "acme", "calc", pr.GetNumber())
	if err != nil {
		t.Fatal(err)
	}
	body := got.GetBody()
	if !strings.HasPrefix(body, "Reviewer notes 7781") || !strings.HasSuffix(body, "Signed off 7782.") {
		t.Errorf("the person's words did not survive: %q", body)
	}
	if second := section(body); second == first || !strings.Contains(second, head[:7]+" Document add") {
		t.Errorf("the Harvest section after the second turn:\n%s\nafter the first:\n%s", second, first)
	}
	if strings.Count(body, "<!-- harvest:begin") != 1 {
		t.Errorf("the section is there more than once: %q", body)
	}

	// A request that needs no change: no push, no pull request, a comment
	// that says so.
	look, err := g.gs.OpenIssue(ghsim.IssueSpec{Login: "ada", Repo: "acme/calc", Title: "Is add right?"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: look, Body: "@harvest just look"}); err != nil {
		t.Fatal(err)
	}
	told := waitComment(t, ctx, ada, look, "@ada ✅ Done: I made no change")
	if !strings.Contains(told, "Nothing needs changing: add is right on this branch.") || !strings.Contains(told, "nothing was pushed and no pull request opened") {
		t.Errorf("the no-change comment: %q", told)
	}
	branches, err := g.gs.Branches("acme/calc")
	if err != nil {
		t.Fatal(err)
	}
	for b := range branches {
		if strings.HasPrefix(b, fmt.Sprintf("harvest/%d-", look)) {
			t.Errorf("branch %s was pushed for a session that committed nothing", b)
		}
	}
	prs, _, err := ada.PullRequests.List(ctx, "acme", "calc", &github.PullRequestListOptions{State: "all"})
	if err != nil {
		t.Fatal(err)
	}
	if len(prs) != 1 {
		t.Errorf("%d pull requests; want only the first session's", len(prs))
	}
}
