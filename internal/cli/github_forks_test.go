package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sim/ghsim"
)

// TestGitHubForkPullRequest: bob (read access) forks acme/calc, commits
// NOTES.md on branch fix-docs of his fork and opens a pull request from
// it; acme/calc has a branch of that name too, someone else's. ada's
// mention on bob's pull request starts one session on a new branch of
// acme/calc that starts from the pull request's head (refs/pull/N/head):
// its agent's commit is pushed there and a pull request in acme/calc
// builds on bob's (it has bob's commit and the fix after it, and says
// so). Nothing is pushed to bob's fork, nor to acme's fix-docs, and no
// request of Harvest's goes to the fork. ada is told on bob's pull
// request, mentioned, with the new pull request's link. A second mention
// there goes to the same session (the thread is the session's); its turn
// commits nothing, so nothing more is pushed and no other pull request
// is opened.
func TestGitHubForkPullRequest(t *testing.T) {
	g := newGHEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bob, err := g.gs.AddUser(ghsim.UserSpec{Login: "bob", Name: "Bob"})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.gs.SetPermission(ghsim.PermissionSpec{Repo: "acme/calc", Login: "bob", Permission: "read"}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.gs.Fork(ctx, ghsim.ForkSpec{Login: "bob", Repo: "acme/calc"}); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	push := func(who ghsim.User, repo, file string) string {
		dir := filepath.Join(work, strings.ReplaceAll(repo, "/", "-"))
		u := strings.Replace(g.gs.URL(), "http://", "http://"+who.Login+":"+who.Token+"@", 1) + "/" + repo + ".git"
		testbin.Git(t, work, "clone", "-q", u, dir)
		testbin.Git(t, dir, "checkout", "-q", "-b", "fix-docs")
		os.WriteFile(filepath.Join(dir, file), []byte(file+" by "+who.Login+"\n"), 0o644)
		testbin.Git(t, dir, "add", file)
		testbin.Git(t, dir, "commit", "-q", "-m", "Add "+file)
		testbin.Git(t, dir, "push", "-q", "origin", "fix-docs")
		return testbin.Git(t, dir, "rev-parse", "HEAD")
	}
	bobSHA := push(bob, "bob/calc", "NOTES.md")
	acmeSHA := push(g.ada, "acme/calc", "OTHER.md") // a branch of the same name in the base: not bob's
	prNum, err := g.gs.OpenPull(ctx, ghsim.PullSpec{Login: "bob", Repo: "acme/calc", Title: "Add notes", Body: "Some notes.", Head: "bob:fix-docs"})
	if err != nil {
		t.Fatal(err)
	}

	e := newServeEnvWith(t, threadScript)
	s := e.start(g.serveArgs()...)
	if err := g.gs.SetWebhookURL(g.app.ID, s.url+"/v1/github/webhook"); err != nil {
		t.Fatal(err)
	}
	since := len(g.gs.Requests())
	c := e.client(s)
	ada := g.client(t, g.ada)
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: prNum, Body: "@harvest fix the failing test"}); err != nil {
		t.Fatal(err)
	}
	var pr *github.PullRequest
	waitHTTP(t, 2*time.Minute, "Harvest's pull request", func() bool {
		for _, p := range allPulls(t, ctx, ada) {
			if p.GetNumber() != prNum {
				pr = p
			}
		}
		return pr != nil
	})
	ss := mustSessions(t, c)
	if len(ss) != 1 {
		t.Fatalf("%d sessions; want 1", len(ss))
	}
	id := ss[0].ID
	v := waitTurns(t, c, id, 1, "the first turn")
	if l := v.GitHub; l == nil || l.Fork != "bob/calc" || l.ForkBranch != "fix-docs" || l.Number != prNum {
		t.Errorf("the session's GitHub link: %+v", v.GitHub)
	}
	head := pr.GetHead().GetRef()
	if pr.GetHead().GetRepo().GetFullName() != "acme/calc" || !strings.HasPrefix(head, fmt.Sprintf("harvest/%d-", prNum)) || pr.GetBase().GetRef() != "main" {
		t.Errorf("Harvest's pull request: head %s:%s, base %s", pr.GetHead().GetRepo().GetFullName(), head, pr.GetBase().GetRef())
	}
	for _, want := range []string{fmt.Sprintf("Builds on #%d", prNum), "bob/calc", "`fix-docs`", bobSHA[:12]} {
		if !strings.Contains(pr.GetBody(), want) {
			t.Errorf("Harvest's pull request's body lacks %q:\n%s", want, pr.GetBody())
		}
	}
	if strings.Contains(pr.GetBody(), "Fixes #") {
		t.Errorf("Harvest's pull request says it fixes something:\n%s", pr.GetBody())
	}
	// Its branch: bob's commit, then the agent's fix.
	bare := filepath.Join(g.gs.Dir(), "repos", "acme", "calc.git")
	tip := mustBranch(t, g, head)
	if got := testbin.Git(t, bare, "log", "--format=%s", "main.."+tip); got != "Fix add: it subtracted\nAdd NOTES.md" {
		t.Errorf("Harvest's branch over main:\n%s", got)
	}
	if testbin.Git(t, bare, "rev-parse", tip+"^") != bobSHA {
		t.Errorf("Harvest's branch does not start from bob's head %s", bobSHA)
	}
	// Nothing reached bob's fork or acme's fix-docs; Harvest asked the
	// fork nothing.
	if b, _ := g.gs.Branches("bob/calc"); b["fix-docs"] != bobSHA || len(b) != 2 {
		t.Errorf("bob's fork: %v; want main and fix-docs at %s", b, bobSHA)
	}
	if b, _ := g.gs.Branches("acme/calc"); b["fix-docs"] != acmeSHA {
		t.Errorf("acme's fix-docs moved: %s, was %s", b["fix-docs"], acmeSHA)
	}
	for _, r := range g.gs.Requests()[since:] {
		if strings.Contains(r.Path, "bob/calc") {
			t.Errorf("a request to the fork: %s %s (%d)", r.Method, r.Path, r.Status)
		}
	}
	// ada is told on bob's pull request, with the new one's link.
	told := waitComment(t, ctx, ada, prNum, "@ada ✅ Done")
	for _, want := range []string{pr.GetHTMLURL(), "in a fork, where Harvest cannot push"} {
		if !strings.Contains(told, want) {
			t.Errorf("the answer on #%d lacks %q:\n%s", prNum, want, told)
		}
	}

	// The thread is the session's: a second mention goes to it, and its
	// turn (words, no commit) pushes nothing.
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: prNum, Body: "@harvest explain the fix too"}); err != nil {
		t.Fatal(err)
	}
	waitTurns(t, c, id, 2, "the second mention's turn")
	if ss := mustSessions(t, c); len(ss) != 1 {
		t.Errorf("%d sessions after the second mention; want 1", len(ss))
	}
	if prs := allPulls(t, ctx, ada); len(prs) != 2 {
		t.Errorf("%d pull requests; want bob's and Harvest's", len(prs))
	}
	if got := mustBranch(t, g, head); got != tip {
		t.Errorf("Harvest's branch moved to %s after a turn without commits", got)
	}
	if t.Failed() {
		t.Logf("harvest serve:\n%s", s.stderr)
	}
}
