package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// githubScript: asked to fix the failing test, the builtin agent fixes
// calc.sh, runs the test, commits and pushes from the box, then reports.
const githubScript = `
rules:
  - name: report
    when: {tool_result: "PASS"}
    reply: {text: "Fixed add in calc.sh: it subtracted. test.sh passes now.", usage: {input_tokens: 300, output_tokens: 30}}
  - name: fix
    when: {last_user: "fix the failing test"}
    reply:
      tool_calls: [{name: bash, input: {command: "sed -i 's/\\$1 - \\$2/$1 + $2/' calc.sh && sh test.sh && git commit -qam 'Fix add: it subtracted' && git push 2>&1"}}]
      usage: {input_tokens: 200, output_tokens: 20}
`

// ghEnv is a GitHub stand-in with an app installed on acme, the repository
// acme/calc (a failing test), and people: ada (write), mallory (read).
type ghEnv struct {
	gs        *ghsim.Server
	app       ghsim.App
	ada       ghsim.User
	mallory   ghsim.User
	keyFile   string
	secretFil string
	issue     int
}

func newGHEnv(t *testing.T) *ghEnv {
	t.Helper()
	gs, err := ghsim.Start(ghsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gs.Close() })
	g := &ghEnv{gs: gs}
	const secret = "webhook-secret-0123"
	if g.app, err = gs.CreateApp(ghsim.AppSpec{Slug: "harvest", Name: "Harvest", WebhookSecret: secret}); err != nil {
		t.Fatal(err)
	}
	if _, err := gs.CreateInstallation(ghsim.InstallationSpec{AppID: g.app.ID, Account: "acme"}); err != nil {
		t.Fatal(err)
	}
	if g.ada, err = gs.AddUser(ghsim.UserSpec{Login: "ada", Name: "Ada Lovelace"}); err != nil {
		t.Fatal(err)
	}
	if g.mallory, err = gs.AddUser(ghsim.UserSpec{Login: "mallory"}); err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	for name, body := range map[string]string{
		"calc.sh":   "add() { echo $(($1 - $2)); }\n",
		"test.sh":   ". ./calc.sh\nif [ \"$(add 2 3)\" = 5 ]; then echo PASS; else echo FAIL; exit 1; fi\n",
		"README.md": "# calc\n",
	} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := gs.CreateRepo(context.Background(), ghsim.RepoSpec{Owner: "acme", Name: "calc", Dir: src, DefaultBranch: "main", Private: true}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []ghsim.PermissionSpec{{Repo: "acme/calc", Login: "ada", Permission: "write"}, {Repo: "acme/calc", Login: "mallory", Permission: "read"}} {
		if err := gs.SetPermission(p); err != nil {
			t.Fatal(err)
		}
	}
	if g.issue, err = gs.OpenIssue(ghsim.IssueSpec{Login: "ada", Repo: "acme/calc", Title: "add is wrong", Body: "test.sh fails: add 2 3 is -1."}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	g.keyFile, g.secretFil = filepath.Join(dir, "app.pem"), filepath.Join(dir, "secret")
	if err := os.WriteFile(g.keyFile, []byte(g.app.PrivateKeyPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(g.secretFil, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	return g
}

// serveArgs are harvest serve's flags for this GitHub.
func (g *ghEnv) serveArgs() []string {
	return []string{"--github-app-id", strconv.FormatInt(g.app.ID, 10), "--github-app-key", g.keyFile,
		"--github-webhook-secret-file", g.secretFil, "--github-api-url", g.gs.URL() + "/api/v3/",
		"--github-url", g.gs.URL() + "/", "--public-url", "http://harvest.example"}
}

// client is a person's go-github client on the stand-in.
func (g *ghEnv) client(t *testing.T, u ghsim.User) *github.Client {
	t.Helper()
	c, err := github.NewClient(nil).WithAuthToken(u.Token).WithEnterpriseURLs(g.gs.URL()+"/api/v3/", g.gs.URL()+"/api/v3/")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// requested reports whether the stand-in served method path (as received,
// /api/v3 included).
func (g *ghEnv) requested(method, path string) bool {
	for _, r := range g.gs.Requests() {
		if r.Method == method && r.Path == path && r.Status < 300 {
			return true
		}
	}
	return false
}

// TestGitHubIssueCommentToPullRequest: a comment mentioning the app on an
// issue is acknowledged with 👀, starts a session whose builtin agent
// fixes the bug and commits and pushes harvest/{session} from its box
// through Harvest's git endpoint; a draft pull request that fixes the
// issue comes back, and the progress comment ends with its link and the
// cost. A person without write access is refused with a reply, and the
// bot's own comments are ignored.
func TestGitHubIssueCommentToPullRequest(t *testing.T) {
	g := newGHEnv(t)
	e := newServeEnvWith(t, githubScript)
	s := e.start(g.serveArgs()...)
	if err := g.gs.SetWebhookURL(g.app.ID, s.url+"/v1/github/webhook"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Someone with read access only: refused, politely, nothing started.
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "mallory", Repo: "acme/calc", Number: g.issue, Body: "@harvest delete everything"}); err != nil {
		t.Fatal(err)
	}
	ada := g.client(t, g.ada)
	refusal := waitComment(t, ctx, ada, g.issue, "Sorry @mallory")
	if !strings.Contains(refusal, "write access") {
		t.Errorf("the refusal does not say why: %q", refusal)
	}

	cid, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "@harvest fix the failing test"})
	if err != nil {
		t.Fatal(err)
	}
	reaction := fmt.Sprintf("/api/v3/repos/acme/calc/issues/comments/%d/reactions", cid)
	testbin.WaitFor(t, time.Minute, "the 👀 reaction on the comment", func() bool { return g.requested(http.MethodPost, reaction) })

	var pr *github.PullRequest
	waitHTTP(t, 2*time.Minute, "the pull request", func() bool {
		prs, _, err := ada.PullRequests.List(ctx, "acme", "calc", &github.PullRequestListOptions{State: "open"})
		if err == nil && len(prs) > 0 {
			pr = prs[0]
		}
		return pr != nil
	})
	head := pr.GetHead().GetRef()
	if !strings.HasPrefix(head, "harvest/s-") || pr.GetBase().GetRef() != "main" || !pr.GetDraft() {
		t.Errorf("pull request %s → %s, draft %v; want harvest/s-… → main, draft", head, pr.GetBase().GetRef(), pr.GetDraft())
	}
	if !strings.Contains(pr.GetBody(), fmt.Sprintf("Fixes #%d", g.issue)) || !strings.Contains(pr.GetBody(), "Fixed add in calc.sh") {
		t.Errorf("pull request body: %q", pr.GetBody())
	}
	// The branch holds the agent's commit, authored by Ada through
	// Harvest, committed by the app's bot.
	branches, err := g.gs.Branches("acme/calc")
	if err != nil {
		t.Fatal(err)
	}
	sha := branches[head]
	bare := filepath.Join(g.gs.Dir(), "repos", "acme", "calc.git")
	got := testbin.Git(t, bare, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%s", sha)
	if want := "Ada Lovelace (Harvest) <" + strconv.FormatInt(g.ada.ID, 10) + "+ada@users.noreply.127.0.0.1>|Harvest <harvest[bot]@users.noreply.127.0.0.1>|Fix add: it subtracted"; got != want {
		t.Errorf("commit: %q\nwant     %q", got, want)
	}
	if b := testbin.Git(t, bare, "show", sha+":calc.sh"); !strings.Contains(b, "$1 + $2") {
		t.Errorf("the pushed calc.sh: %q", b)
	}

	progress := waitComment(t, ctx, ada, g.issue, pr.GetHTMLURL())
	if !strings.Contains(progress, "Cost so far: $") || !strings.Contains(progress, "Done") {
		t.Errorf("progress comment: %q", progress)
	}

	// The session: its repository's branch and pull request, and the
	// events of what happened.
	c := e.client(s)
	sessions, err := c.ListSessions(ctx, client.ListOptions{})
	if err != nil || len(sessions) != 1 {
		t.Fatalf("sessions: %v, %v", sessions, err)
	}
	v := sessions[0]
	if v.GitHub == nil || v.GitHub.Number != g.issue || v.GitHub.Requester != "ada" || v.PR != store.PRDraft {
		t.Errorf("session's GitHub link %+v, pr %q", v.GitHub, v.PR)
	}
	if r := v.Repos[0]; r.Branch != head || r.PRNumber != pr.GetNumber() || r.PRURL != pr.GetHTMLURL() || r.Pushed != sha {
		t.Errorf("session repo %+v; want branch %s, PR #%d %s, pushed %s", r, head, pr.GetNumber(), pr.GetHTMLURL(), sha)
	}
	evs := follow(t, c, v.ID, 0, "pr.opened", func(ev event.Event) bool { return ev.Data.EventType() == event.TypePROpened })
	var committed, pushed bool
	for _, ev := range evs {
		switch d := ev.Data.(type) {
		case event.GitCommitted:
			committed = committed || (d.SHA == sha && d.Branch == head)
		case event.GitPushed:
			pushed = pushed || (d.To == sha && d.Branch == head && d.Refused == "")
		}
	}
	if !committed || !pushed {
		t.Errorf("git.committed %v, git.pushed %v for %s", committed, pushed, sha)
	}

	// Harvest's own comments (the progress comment) never start anything:
	// every delivery of them was answered and ignored.
	for _, d := range g.gs.Deliveries() {
		if d.StatusCode != http.StatusAccepted {
			t.Errorf("delivery %s (%s) answered %d", d.GUID, d.Event, d.StatusCode)
		}
	}
	if n := len(mustSessions(t, c)); n != 1 {
		t.Errorf("%d sessions; want only the one Ada asked for", n)
	}
}

func mustSessions(t *testing.T, c *client.Client) []*wire.Session {
	t.Helper()
	ss, err := c.ListSessions(context.Background(), client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

// waitComment waits for a comment on the issue containing s and returns
// its body.
func waitComment(t *testing.T, ctx context.Context, c *github.Client, issue int, s string) string {
	t.Helper()
	var body string
	waitHTTP(t, 2*time.Minute, "a comment with "+s, func() bool {
		cs, _, err := c.Issues.ListComments(ctx, "acme", "calc", issue, nil)
		if err != nil {
			return false
		}
		for _, cm := range cs {
			if strings.Contains(cm.GetBody(), s) {
				body = cm.GetBody()
				return true
			}
		}
		return false
	})
	return body
}

// waitHTTP waits for cond, which asks a server, every 50 ms for d at most.
func waitHTTP(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
