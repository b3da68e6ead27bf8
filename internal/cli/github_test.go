package cli

import (
	"context"
	"encoding/json"
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
rules:` + githubRules

const githubRules = `
  - name: pushes-report
    when: {last_user: "try pushing elsewhere", tool_result: "PUSHES-DONE"}
    reply: {text: "Those pushes were refused.", usage: {input_tokens: 300, output_tokens: 30}}
  - name: pushes
    when: {last_user: "try pushing elsewhere"}
    reply:
      tool_calls: [{name: bash, input: {command: "` + pushesAndScan + `"}}]
      usage: {input_tokens: 200, output_tokens: 20}
  - name: report
    when: {last_user: "fix the failing test", tool_result: "PASS"}
    reply: {text: "Fixed add in calc.sh: it subtracted. test.sh passes now.", usage: {input_tokens: 300, output_tokens: 30}}
  - name: fix
    when: {last_user: "fix the failing test"}
    reply:
      tool_calls: [{name: bash, input: {command: "sed -i 's/\\$1 - \\$2/$1 + $2/' calc.sh && sh test.sh && git commit -qam 'Fix add: it subtracted' && git push 2>&1"}}]
      usage: {input_tokens: 200, output_tokens: 20}
`

// pushesAndScan tries the pushes the policy refuses (the default branch,
// another branch, a delete, another repository), then dumps what the box
// could hold a credential in (its environment and every process's, the
// process table, git's configuration) and lists the files under the
// writable places that contain an installation token or a private key
// (the patterns are written so that they do not match themselves).
const pushesAndScan = `B=$(git branch --show-current); ` +
	`git push origin HEAD:main 2>&1; git push origin HEAD:feature 2>&1; git push origin :$B 2>&1; ` +
	`git push \"$(git remote get-url origin | sed s/calc/other/)\" HEAD:$B 2>&1; ` +
	`echo SCAN-START; env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\\\0' '\\\\n'; ps -eo args; git config --list --show-origin; ` +
	`echo FILES:; grep -rIl -e 'gh[s]_' -e 'PRIVAT[E] KEY' /workspace /home /tmp /run /etc /root 2>/dev/null; echo PUSHES-DONE`

// ghEnv is a GitHub stand-in with an app installed on acme, the repository
// acme/calc (a failing test), and people: ada (write), mallory (read).
type ghEnv struct {
	gs        *ghsim.Server
	inst      int64
	app       ghsim.App
	ada       ghsim.User
	mallory   ghsim.User
	keyFile   string
	secretFil string
	issue     int
}

// serve starts a harvest serve (githubScript as the model) for g's app,
// with args after g.serveArgs, and points the app's webhook at it.
func (g *ghEnv) serve(t testing.TB, args ...string) (*serveEnv, *serveProc) {
	t.Helper()
	e := newServeEnvWith(t, githubScript)
	s := e.start(append(g.serveArgs(), args...)...)
	if err := g.gs.SetWebhookURL(g.app.ID, s.url+"/v1/github/webhook"); err != nil {
		t.Fatal(err)
	}
	return e, s
}

func newGHEnv(t testing.TB) *ghEnv {
	t.Helper()
	return newGHEnvAsking(t, nil, nil)
}

// newGHEnvAsking is newGHEnv with an app asking for perms and an
// installation granted granted (nil: the stand-in's defaults, what
// Harvest asks for, all granted).
func newGHEnvAsking(t testing.TB, perms, granted map[string]string) *ghEnv {
	t.Helper()
	gs, err := ghsim.Start(ghsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gs.Close() })
	g := &ghEnv{gs: gs}
	// Everything the stand-in said in the test, every REST answer and
	// webhook, is checked against GitHub's whole published descriptions
	// at its end (before the stand-in closes).
	t.Cleanup(func() { checkExchanges(t, g) })
	const secret = "webhook-secret-0123"
	if g.app, err = gs.CreateApp(ghsim.AppSpec{Slug: "harvest", Name: "Harvest", WebhookSecret: secret, Permissions: perms}); err != nil {
		t.Fatal(err)
	}
	if g.inst, err = gs.CreateInstallation(ghsim.InstallationSpec{AppID: g.app.ID, Account: "acme", Permissions: granted}); err != nil {
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
func (g *ghEnv) client(t testing.TB, u ghsim.User) *github.Client {
	t.Helper()
	c, err := github.NewClient(nil).WithAuthToken(u.Token).WithEnterpriseURLs(g.gs.URL()+"/api/v3/", g.gs.URL()+"/api/v3/")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// count is how many times the stand-in served method path successfully
// (as received, /api/v3 included).
func (g *ghEnv) count(method, path string) int {
	n := 0
	for _, r := range g.gs.Requests() {
		if r.Method == method && r.Path == path && r.Status < 300 {
			n++
		}
	}
	return n
}

// reactions is how many reactions content the stand-in was asked to
// make at path (as received, /api/v3 included).
func (g *ghEnv) reactions(path, content string) int {
	n := 0
	for _, r := range g.gs.Requests() {
		var b struct{ Content string }
		if r.Method == http.MethodPost && r.Path == path && r.Status < 300 && json.Unmarshal(r.Body, &b) == nil && b.Content == content {
			n++
		}
	}
	return n
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
	e, s := g.serve(t, "--github-show-cost", "--github-pr-label", "harvest", "--github-pr-label", "bot work")
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
	if want := fmt.Sprintf("harvest/%d-add-is-wrong", g.issue); head != want || pr.GetBase().GetRef() != "main" || !pr.GetDraft() {
		t.Errorf("pull request %s → %s, draft %v; want %s → main, draft", head, pr.GetBase().GetRef(), pr.GetDraft(), want)
	}
	if !strings.Contains(pr.GetBody(), fmt.Sprintf("Fixes #%d", g.issue)) || !strings.Contains(pr.GetBody(), "Fixed add in calc.sh") {
		t.Errorf("pull request body: %q", pr.GetBody())
	}
	// Titled by the change (its one commit), not by the issue.
	if pr.GetTitle() != "Fix add: it subtracted" {
		t.Errorf("pull request title %q; want the commit's subject", pr.GetTitle())
	}
	// Ada is asked to review it; it carries the configured labels.
	var reviewers, labels []string
	waitHTTP(t, time.Minute, "the labels", func() bool {
		is, _, err := ada.Issues.Get(ctx, "acme", "calc", pr.GetNumber())
		labels = labels[:0]
		for _, l := range is.Labels {
			labels = append(labels, l.GetName())
		}
		return err == nil && len(labels) == 2
	})

	if got, _, err := ada.PullRequests.Get(ctx, "acme", "calc", pr.GetNumber()); err != nil {
		t.Fatal(err)
	} else {
		for _, u := range got.RequestedReviewers {
			reviewers = append(reviewers, u.GetLogin())
		}
	}
	if fmt.Sprint(reviewers) != "[ada]" {
		t.Errorf("requested reviewers %v; want ada", reviewers)
	}
	if fmt.Sprint(labels) != "[bot work harvest]" && fmt.Sprint(labels) != "[harvest bot work]" {
		t.Errorf("labels %v; want harvest and bot work", labels)
	}
	// The branch holds the agent's commit, authored and committed by the
	// app's bot (its bot user's id in the address), Ada credited as
	// co-author.
	branches, err := g.gs.Branches("acme/calc")
	if err != nil {
		t.Fatal(err)
	}
	sha := branches[head]
	bot, _, err := ada.Users.Get(ctx, "harvest%5Bbot%5D")
	if err != nil {
		t.Fatal(err)
	}
	bare := filepath.Join(g.gs.Dir(), "repos", "acme", "calc.git")
	got := testbin.Git(t, bare, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%s|%(trailers:key=Co-authored-by,valueonly,separator=;)", sha)
	botID := fmt.Sprintf("harvest[bot] <%d+harvest[bot]@users.noreply.127.0.0.1>", bot.GetID())
	if want := botID + "|" + botID + "|Fix add: it subtracted|Ada Lovelace <" + strconv.FormatInt(g.ada.ID, 10) + "+ada@users.noreply.127.0.0.1>"; got != want {
		t.Errorf("commit: %q\nwant     %q", got, want)
	}
	if b := testbin.Git(t, bare, "show", sha+":calc.sh"); !strings.Contains(b, "$1 + $2") {
		t.Errorf("the pushed calc.sh: %q", b)
	}

	// The turn's end: a new comment tells Ada (a mention notifies her),
	// with the summary, the pull request, the session's link and the
	// cost; her comment gets 🚀 after 👀.
	told := waitComment(t, ctx, ada, g.issue, "@ada ✅ Done")
	for _, want := range []string{"Fixed add in calc.sh", pr.GetHTMLURL(), "http://harvest.example/sessions/s-", "cost so far $"} {
		if !strings.Contains(told, want) {
			t.Errorf("the turn's comment lacks %q: %q", want, told)
		}
	}
	asked, _, err := ada.Issues.GetComment(ctx, "acme", "calc", cid)
	if err != nil {
		t.Fatal(err)
	}
	if r := asked.GetReactions(); r.GetEyes() != 1 || r.GetRocket() != 1 || r.GetTotalCount() != 2 {
		t.Errorf("reactions on Ada's comment: %+v; want 👀 and 🚀", r)
	}

	progress := waitComment(t, ctx, ada, g.issue, "<!-- harvest-session: ")
	if !strings.Contains(progress, "Cost so far: $") || !strings.Contains(progress, "### Turn 1 · ✅ Done") || !strings.Contains(progress, pr.GetHTMLURL()) {
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
	// Ada, who asked, is a Harvest user now (her GitHub account its
	// identity), and the session is hers; the log says who started it
	// from GitHub, and that mallory was refused.
	checkGitHubPeople(t, ctx, c, v, g.ada.ID)
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

	// A follow-up mention goes to the same session: pushes the policy
	// refuses, each with its reason in the agent's own output, and nothing
	// of them lands; the box holds no installation token or key.
	before, err := g.gs.Branches("acme/calc")
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1].Seq
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "@harvest try pushing elsewhere"}); err != nil {
		t.Fatal(err)
	}
	evs = follow(t, c, v.ID, last, "the pushes' turn", func(ev event.Event) bool {
		f, ok := ev.Data.(event.TurnFinished)
		return ok && strings.Contains(f.Result, "refused")
	})
	var out string
	refused := map[string]bool{}
	for _, ev := range evs {
		switch d := ev.Data.(type) {
		case event.ToolFinished:
			out += d.Output
		case event.GitPushed:
			if d.Refused != "" {
				refused[d.Branch] = true
			}
		}
	}
	for _, why := range []string{
		"pushing to the default branch main is not allowed",
		"may not push to branch feature",
		"deleting branches is not allowed",
		"has no access to acme/other",
	} {
		if !strings.Contains(out, why) {
			t.Errorf("the agent was not told %q:\n%s", why, out)
		}
	}
	if !refused["main"] || !refused["feature"] {
		t.Errorf("git.pushed events for the refused pushes: %v", refused)
	}
	after, _ := g.gs.Branches("acme/calc")
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a refused push changed the branches: %v → %v", before, after)
	}
	// That turn's end is told in a new comment too, the first one stays.
	waitHTTP(t, time.Minute, "the second turn's comment", func() bool {
		cs, _, err := ada.Issues.ListComments(ctx, "acme", "calc", g.issue, nil)
		n := 0
		for _, cm := range cs {
			if strings.HasPrefix(cm.GetBody(), "@ada ") && strings.Contains(cm.GetBody(), "<!-- harvest-turn-end: "+v.ID) {
				n++
			}
		}
		return err == nil && n == 2
	})
	scan, found := strings.CutPrefix(out[strings.Index(out, "SCAN-START"):], "SCAN-START")
	if !found || !strings.Contains(scan, "GIT_CONFIG_COUNT") {
		t.Fatalf("the scan did not run:\n%s", out)
	}
	// The last FILES: and PUSHES-DONE are the echoes (ps shows the command
	// line too).
	files := scan[strings.LastIndex(scan, "FILES:")+len("FILES:") : strings.LastIndex(scan, "PUSHES-DONE")]
	if strings.TrimSpace(files) != "" {
		t.Errorf("files in the box hold a token or a key: %s", files)
	}
	var all []event.Event
	for after := int64(0); ; {
		page, err := c.EventLog(ctx, v.ID, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Events...)
		if len(page.Events) == 0 || page.Events[len(page.Events)-1].Seq >= page.LastSeq {
			break
		}
		after = page.Events[len(page.Events)-1].Seq
	}
	keyLine := strings.Split(g.app.PrivateKeyPEM, "\n")[3]
	for _, ev := range all {
		b := fmt.Sprint(ev.Data)
		if strings.Contains(b, "ghs_") || strings.Contains(b, keyLine) {
			t.Errorf("event %d (%s) holds an installation token or the key", ev.Seq, ev.Data.EventType())
		}
	}
	if logs := s.stderr.String(); strings.Contains(logs, "ghs_") || strings.Contains(logs, keyLine) {
		t.Errorf("harvest serve's log holds an installation token or the key")
	}

	// Harvest's own comments (the progress comment) never start anything:
	// every delivery of them was answered and ignored.
	ds, err := g.gs.WaitDeliveries(ctx) // the last edits' deliveries may be on their way
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.StatusCode != http.StatusAccepted {
			t.Errorf("delivery %s (%s) answered %d", d.GUID, d.Event, d.StatusCode)
		}
	}
	if n := len(mustSessions(t, c)); n != 1 {
		t.Errorf("%d sessions; want only the one Ada asked for", n)
	}
}

func mustSessions(t testing.TB, c *client.Client) []*wire.Session {
	t.Helper()
	ss, err := c.ListSessions(context.Background(), client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

// waitComment waits for a comment on the issue containing s and returns
// its body.
func waitComment(t testing.TB, ctx context.Context, c *github.Client, issue int, s string) string {
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
func waitHTTP(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestGitHubWebhookDeliveries: a delivery with a bad signature is a 401
// and does nothing; a delivery acknowledged and then interrupted by kill
// -9 is processed once after the restart; a redelivery of it is
// acknowledged and not processed again, which is checked once a comment
// made after it has been processed (deliveries go one at a time, in
// order): no second 👀, session, message, progress comment or pull
// request.
func TestGitHubWebhookDeliveries(t *testing.T) {
	g := newGHEnv(t)
	e, s1 := g.serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	comment := func(body string) (cid int64, guid string, status int) {
		t.Helper()
		cid, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		d, err := g.gs.WaitDelivery(ctx, func(d ghsim.Delivery) bool {
			return d.Event == "issue_comment" && strings.Contains(string(d.Payload), fmt.Sprintf(`"id":%d`, cid))
		})
		if err != nil {
			t.Fatal(err)
		}
		return cid, d.GUID, d.StatusCode
	}

	if err := g.gs.SetBadSignature(g.app.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, _, status := comment("@harvest fix the failing test (forged)"); status != http.StatusUnauthorized {
		t.Fatalf("a delivery with a bad signature was answered %d, want 401", status)
	}
	if err := g.gs.SetBadSignature(g.app.ID, false); err != nil {
		t.Fatal(err)
	}
	c1 := e.client(s1)
	if ss := mustSessions(t, c1); len(ss) != 0 {
		t.Fatalf("a forged delivery started %d sessions", len(ss))
	}

	// Acknowledged, then the server dies at once: wherever processing was,
	// the restart finishes it, once.
	cid, guid, status := comment("@harvest fix the failing test")
	if status != http.StatusAccepted {
		t.Fatalf("the delivery was answered %d, want 202", status)
	}
	s1.cmd.Process.Kill()
	s1.wait()
	s2 := e.start(g.serveArgs()...)
	if err := g.gs.SetWebhookURL(g.app.ID, s2.url+"/v1/github/webhook"); err != nil {
		t.Fatal(err)
	}
	c2 := e.client(s2)
	waitHTTP(t, 2*time.Minute, "the session of the delivery", func() bool { return len(mustSessions(t, c2)) > 0 })
	ada := g.client(t, g.ada)
	waitComment(t, ctx, ada, g.issue, "<!-- harvest-turn-end: ")

	// GitHub's "Redeliver": the same delivery again. Harvest acknowledges
	// and processes deliveries one at a time, oldest first: the
	// redelivery, if it were taken for a new one, would be acknowledged
	// (👀) before Ada's comment that follows it, so the 👀 on that comment
	// proves the redelivery was dealt with. Between the two, nothing of the
	// first delivery's may happen again (its 👀 would).
	eyes := fmt.Sprintf("/api/v3/repos/acme/calc/issues/comments/%d/reactions", cid)
	reacted := g.reactions(eyes, "eyes")
	if reacted == 0 {
		t.Fatalf("the first delivery's comment got no 👀")
	}
	var first int64
	for _, d := range g.gs.Deliveries() {
		if d.GUID == guid {
			first = d.ID
		}
	}
	again, err := g.gs.Redeliver(first)
	if err != nil {
		t.Fatal(err)
	}
	d, err := g.gs.WaitDelivery(ctx, func(d ghsim.Delivery) bool { return d.ID == again })
	if err != nil || d.StatusCode != http.StatusAccepted {
		t.Fatalf("the redelivery: %d, %v; want 202", d.StatusCode, err)
	}
	after, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "@harvest msg after the redelivery"})
	if err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, time.Minute, "the 👀 on Ada's comment after the redelivery", func() bool {
		return g.requested(http.MethodPost, fmt.Sprintf("/api/v3/repos/acme/calc/issues/comments/%d/reactions", after))
	})
	if n := g.reactions(eyes, "eyes"); n != reacted {
		t.Errorf("the redelivery was processed again: the first comment's 👀 was made %d times before it, %d after", reacted, n)
	}

	ss := mustSessions(t, c2)
	if len(ss) != 1 {
		t.Fatalf("%d sessions for one delivery", len(ss))
	}
	v, err := c2.GetSession(ctx, ss[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	// The delivery's message once, then the later comment's.
	follow(t, c2, v.ID, 0, "the later comment's message", func(ev event.Event) bool {
		q, ok := ev.Data.(event.MessageQueued)
		return ok && strings.Contains(q.Text, "msg after the redelivery")
	})
	var texts []string
	for _, ev := range storedLog(t, ctx, c2, v.ID) {
		if q, ok := ev.Data.(event.MessageQueued); ok {
			texts = append(texts, q.Text)
		}
	}
	if len(texts) != 2 || !strings.Contains(texts[0], "fix the failing test") || !strings.Contains(texts[1], "msg after the redelivery") {
		t.Errorf("session %s: messages %q; want the delivery's once, then the later comment's", v.ID, texts)
	}
	cs, _, err := ada.Issues.ListComments(ctx, "acme", "calc", g.issue, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cm := range cs {
		if strings.Contains(cm.GetBody(), "harvest-session: "+v.ID) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d progress comments, want 1", n)
	}
	prs, _, err := ada.PullRequests.List(ctx, "acme", "calc", nil)
	if err != nil || len(prs) != 1 {
		t.Errorf("pull requests: %d, %v; want 1", len(prs), err)
	}

	// The bot's own comment, even one that mentions it, is ignored. Ada's
	// comment after it is processed after it (one at a time, in order):
	// once it has its 👀, the bot's comment has been dealt with.
	tok, err := g.gs.Token(g.inst)
	if err != nil {
		t.Fatal(err)
	}
	bot, err := github.NewClient(nil).WithAuthToken(tok).WithEnterpriseURLs(g.gs.URL()+"/api/v3/", g.gs.URL()+"/api/v3/")
	if err != nil {
		t.Fatal(err)
	}
	own, _, err := bot.Issues.CreateComment(ctx, "acme", "calc", g.issue, &github.IssueComment{Body: github.Ptr("@harvest fix the failing test")})
	if err != nil {
		t.Fatal(err)
	}
	later, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "@harvest msg after the bot"})
	if err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, time.Minute, "the 👀 on Ada's later comment", func() bool {
		return g.requested(http.MethodPost, fmt.Sprintf("/api/v3/repos/acme/calc/issues/comments/%d/reactions", later))
	})
	if g.requested(http.MethodPost, fmt.Sprintf("/api/v3/repos/acme/calc/issues/comments/%d/reactions", own.GetID())) {
		t.Error("Harvest reacted to its own comment")
	}
	if ss := mustSessions(t, c2); len(ss) != 1 {
		t.Errorf("%d sessions after the bot's comment", len(ss))
	}
}

// claudeGitHubScript: the real Claude Code, asked on GitHub, runs the
// fix, the test, git commit and git push with its Bash tool.
const claudeGitHubScript = `
rules:
  - name: title
    when: {api: anthropic, system: "Generate a concise, sentence-case title"}
    reply: {text: '{"title": "Fix add"}', usage: {input_tokens: 100, output_tokens: 8}}
  - name: report
    when: {api: anthropic, tool_result: "PASS", tools: [Bash]}
    reply: {text: "Fixed add in calc.sh with Claude Code; test.sh passes.", usage: {input_tokens: 300, output_tokens: 30}}
  - name: fix
    when: {api: anthropic, last_user: "fix the failing test", tools: [Bash]}
    reply:
      tool_calls:
        - name: Bash
          input:
            command: "sed -i 's/\\$1 - \\$2/$1 + $2/' calc.sh && sh test.sh && git commit -qam 'Fix add (Claude Code)' && git push 2>&1"
            description: "Fix, test, commit and push"
      usage: {input_tokens: 200, output_tokens: 20}
`

// TestGitHubClaudeCode: the same flow with agent:claudecode in the comment:
// the real Claude Code commits and pushes from the box, and the pull
// request comes back.
func TestGitHubClaudeCode(t *testing.T) {
	testbin.Claude(t)
	g := newGHEnv(t)
	e := newServeEnvWith(t, claudeGitHubScript)
	s := e.start(g.serveArgs()...)
	if err := g.gs.SetWebhookURL(g.app.ID, s.url+"/v1/github/webhook"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "@harvest agent:claudecode fix the failing test"}); err != nil {
		t.Fatal(err)
	}
	ada := g.client(t, g.ada)
	var pr *github.PullRequest
	waitHTTP(t, 2*time.Minute, "the pull request", func() bool {
		prs, _, err := ada.PullRequests.List(ctx, "acme", "calc", &github.PullRequestListOptions{State: "open"})
		if err == nil && len(prs) > 0 {
			pr = prs[0]
		}
		if pr == nil {
			if ss, err := e.client(s).ListSessions(ctx, client.ListOptions{}); err == nil && len(ss) > 0 && ss[0].State == "failed" {
				t.Fatalf("the session failed: %s", ss[0].Error)
			}
		}
		return pr != nil
	})
	if !strings.Contains(pr.GetBody(), "Fixed add in calc.sh with Claude Code") || !strings.Contains(pr.GetBody(), fmt.Sprintf("Fixes #%d", g.issue)) {
		t.Errorf("pull request body: %q", pr.GetBody())
	}
	sha := mustBranch(t, g, pr.GetHead().GetRef())
	bare := filepath.Join(g.gs.Dir(), "repos", "acme", "calc.git")
	if got := testbin.Git(t, bare, "log", "-1", "--format=%s|%cn", sha); got != "Fix add (Claude Code)|harvest[bot]" {
		t.Errorf("the pushed commit: %q", got)
	}
	ss := mustSessions(t, e.client(s))
	if len(ss) != 1 || ss[0].Agent != "claudecode" {
		t.Fatalf("sessions: %+v", ss)
	}
	waitComment(t, ctx, ada, g.issue, pr.GetHTMLURL())
}

func mustBranch(t testing.TB, g *ghEnv, name string) string {
	t.Helper()
	b, err := g.gs.Branches("acme/calc")
	if err != nil {
		t.Fatal(err)
	}
	if b[name] == "" {
		t.Fatalf("no branch %s on GitHub: %v", name, b)
	}
	return b[name]
}

// reviewScript answers a review comment and a failed check with a commit
// pushed on the session's branch each.
const reviewScript = `
rules:
  - name: review-done
    when: {last_user: "commented on your pull request", tool_result: "REVIEW-DONE"}
    reply: {text: "Documented add.", usage: {input_tokens: 100, output_tokens: 10}}
  - name: check-done
    when: {last_user: "The checks on your pull request failed", tool_result: "CHECK-FIXED"}
    reply: {text: "Fixed the lint.", usage: {input_tokens: 100, output_tokens: 10}}
  - name: review
    when: {last_user: "commented on your pull request"}
    reply:
      tool_calls: [{name: bash, input: {command: "echo '# add A B prints A + B' >> calc.sh && git commit -qam 'Document add' && git push 2>&1; echo REVIEW-DONE"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: check
    when: {last_user: "The checks on your pull request failed"}
    reply:
      tool_calls: [{name: bash, input: {command: "echo >> README.md && git commit -qam 'Satisfy lint' && git push 2>&1; echo CHECK-FIXED"}}]
      usage: {input_tokens: 100, output_tokens: 10}
` + githubRules

// TestGitHubReviewAndChecks: a review comment on the session's pull
// request reaches the session with where it was made, and its commit lands
// on the same branch; a failed check suite is sent once and fixed; past
// --github-fix-attempts, a failed suite is not sent.
func TestGitHubReviewAndChecks(t *testing.T) {
	g := newGHEnv(t)
	e := newServeEnvWith(t, reviewScript)
	s := e.start(append(g.serveArgs(), "--github-fix-attempts", "1")...)
	if err := g.gs.SetWebhookURL(g.app.ID, s.url+"/v1/github/webhook"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "@harvest fix the failing test"}); err != nil {
		t.Fatal(err)
	}
	ada := g.client(t, g.ada)
	var pr *github.PullRequest
	waitHTTP(t, 2*time.Minute, "the pull request", func() bool {
		prs, _, err := ada.PullRequests.List(ctx, "acme", "calc", &github.PullRequestListOptions{State: "open"})
		if err == nil && len(prs) > 0 {
			pr = prs[0]
		}
		return pr != nil
	})
	head := pr.GetHead().GetRef()
	first := mustBranch(t, g, head)
	c := e.client(s)
	id := mustSessions(t, c)[0].ID
	waitIdle := func(what string, turns int) {
		t.Helper()
		waitHTTP(t, 2*time.Minute, what, func() bool {
			v, err := c.GetSession(ctx, id)
			return err == nil && v.Turns >= turns && v.State == "idle"
		})
	}
	waitIdle("the first turn", 1)

	if _, err := g.gs.ReviewComment(ctx, ghsim.ReviewCommentSpec{Login: "ada", Repo: "acme/calc", Number: pr.GetNumber(), Path: "calc.sh", Line: 1, Body: "Please document add."}); err != nil {
		t.Fatal(err)
	}
	waitIdle("the review's turn", 2)
	v, err := c.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	second := mustBranch(t, g, head)
	bare := filepath.Join(g.gs.Dir(), "repos", "acme", "calc.git")
	if second == first || testbin.Git(t, bare, "log", "-1", "--format=%s", second) != "Document add" || testbin.Git(t, bare, "rev-parse", second+"^") != first {
		t.Errorf("after the review the branch is at %s (was %s)", second, first)
	}
	evs := follow(t, c, id, 0, "the review's message", func(ev event.Event) bool {
		d, ok := ev.Data.(event.MessageQueued)
		return ok && strings.Contains(d.Text, "commented on your pull request")
	})
	msg := evs[len(evs)-1].Data.(event.MessageQueued).Text
	for _, want := range []string{"calc.sh line 1", "Please document add.", "@@"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the review's message lacks %q:\n%s", want, msg)
		}
	}

	fail := ghsim.CheckSuiteSpec{Repo: "acme/calc", Number: pr.GetNumber(), Runs: []ghsim.CheckRunSpec{
		{Name: "lint", Conclusion: "failure", Title: "1 problem", Summary: "README.md: missing final blank line"},
		{Name: "test", Conclusion: "success"},
	}}
	if _, err := g.gs.CompleteCheckSuite(ctx, fail); err != nil {
		t.Fatal(err)
	}
	waitIdle("the check's turn", 3)
	third := mustBranch(t, g, head)
	if testbin.Git(t, bare, "log", "-1", "--format=%s", third) != "Satisfy lint" {
		t.Errorf("after the failed check the branch is at %s", third)
	}
	// The attempt cap (1) is reached: another failed suite is not sent.
	if _, err := g.gs.CompleteCheckSuite(ctx, fail); err != nil {
		t.Fatal(err)
	}
	if _, err := g.gs.WaitDeliveries(ctx); err != nil {
		t.Fatal(err)
	}
	// Processed once the delivery is stored; wait until the server says so
	// (the comment below is processed after it, in order).
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "thanks (no mention)"}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.gs.WaitDeliveries(ctx); err != nil {
		t.Fatal(err)
	}
	v, err = c.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if v.GitHub == nil || v.GitHub.FixAttempts != 1 || v.Turns != 3 || len(v.Queue) != 0 {
		t.Errorf("after a second failed suite: fix attempts %+v, %d turns, %d queued; want 1, 3, 0", v.GitHub, v.Turns, len(v.Queue))
	}

	// The review comment went to the session as Ada's, in the audit log;
	// once her user is disabled, what she asks on GitHub is refused.
	// (Newest first: the failed checks', sent by no one, then the review
	// comment's.)
	sends, err := c.Audit(ctx, client.AuditOptions{Action: "session.send"})
	if err != nil || len(sends.Entries) != 2 {
		t.Fatalf("the audit log's session.send: %+v, %v; want the review comment's and the checks'", sends, err)
	}
	if en := sends.Entries[1]; en.User != v.User || en.User == "" || en.Channel != "github" || en.Target != id {
		t.Errorf("the review comment's audit entry: %+v; want Ada's user %s, channel github, target %s", en, v.User, id)
	}
	if en := sends.Entries[0]; en.User != "" || en.Channel != "github" || en.Target != id || !strings.Contains(string(en.Detail), "failed checks") {
		t.Errorf("the failed checks' audit entry: %+v (%s); want no user, channel github, target %s", en, en.Detail, id)
	}
	if _, err := c.UpdateUser(ctx, v.User, wire.UserPatch{Disabled: github.Ptr(true)}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: pr.GetNumber(), Body: "@harvest stop"}); err != nil {
		t.Fatal(err)
	}
	waitComment(t, ctx, ada, pr.GetNumber(), "Sorry @ada, I can't do that: your Harvest user is disabled")
	if cancels, err := c.Audit(ctx, client.AuditOptions{Action: "session.cancel"}); err != nil || len(cancels.Entries) != 0 {
		t.Errorf("a disabled user's stop was carried out: %+v, %v", cancels, err)
	}
}

// TestGitHubPullRequestLabelAndAPI: a mention on an open pull request
// starts a session on its head branch, whose push updates that pull
// request (no second one); an issue given --github-label starts a session;
// a session created through the API on repos[].github gets the same
// branch, endpoint and pull request, authored by the bot; one on a
// repository the app is not installed on is refused (400).
func TestGitHubPullRequestLabelAndAPI(t *testing.T) {
	g := newGHEnv(t)
	e, s := g.serve(t, "--github-label", "harvest")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ada := g.client(t, g.ada)
	c := e.client(s)

	// Ada's own branch and pull request.
	work := t.TempDir()
	u := strings.Replace(g.gs.URL(), "http://", "http://ada:"+g.ada.Token+"@", 1) + "/acme/calc.git"
	testbin.Git(t, work, "clone", "-q", u, "w")
	w := filepath.Join(work, "w")
	testbin.Git(t, w, "checkout", "-q", "-b", "feature/docs")
	os.WriteFile(filepath.Join(w, "NOTES.md"), []byte("notes\n"), 0o644)
	testbin.Git(t, w, "add", "NOTES.md")
	testbin.Git(t, w, "commit", "-q", "-m", "Add notes")
	testbin.Git(t, w, "push", "-q", "origin", "feature/docs")
	prNum, err := g.gs.OpenPull(ctx, ghsim.PullSpec{Login: "ada", Repo: "acme/calc", Title: "Notes", Head: "feature/docs"})
	if err != nil {
		t.Fatal(err)
	}
	before := mustBranch(t, g, "feature/docs")
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: prNum, Body: "@harvest fix the failing test here too"}); err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, 2*time.Minute, "the agent's push to the pull request's branch", func() bool {
		b, _ := g.gs.Branches("acme/calc")
		return b["feature/docs"] != before
	})
	bare := filepath.Join(g.gs.Dir(), "repos", "acme", "calc.git")
	after := mustBranch(t, g, "feature/docs")
	if got := testbin.Git(t, bare, "log", "-1", "--format=%s", after); got != "Fix add: it subtracted" || testbin.Git(t, bare, "rev-parse", after+"^") != before {
		t.Errorf("feature/docs: %q on top of %s", got, testbin.Git(t, bare, "rev-parse", after+"^"))
	}
	var prSession *wire.Session
	waitHTTP(t, time.Minute, "the session to record the pull request", func() bool {
		for _, ss := range mustSessions(t, c) {
			if ss.GitHub != nil && ss.GitHub.Number == prNum && ss.Repos[0].PRNumber == prNum {
				prSession = ss
			}
		}
		return prSession != nil
	})
	if r := prSession.Repos[0]; r.Branch != "feature/docs" || !prSession.GitHub.IsPR {
		t.Errorf("the pull request's session: branch %s, link %+v", r.Branch, prSession.GitHub)
	}
	if prs, _, _ := ada.PullRequests.List(ctx, "acme", "calc", nil); len(prs) != 1 {
		t.Errorf("%d pull requests; the session should have used #%d", len(prs), prNum)
	}

	// A label starts a session on the issue.
	issue, err := g.gs.OpenIssue(ghsim.IssueSpec{Login: "ada", Repo: "acme/calc", Title: "labelled", Body: "Please fix the failing test."})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.gs.AddLabel(ghsim.LabelSpec{Login: "ada", Repo: "acme/calc", Number: issue, Label: "harvest"}); err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, 2*time.Minute, "the labelled issue's pull request", func() bool {
		prs, _, _ := ada.PullRequests.List(ctx, "acme", "calc", nil)
		for _, p := range prs {
			if strings.Contains(p.GetBody(), fmt.Sprintf("Fixes #%d", issue)) {
				return true
			}
		}
		return false
	})

	// Assigning the issue to the bot starts a session too.
	assigned, err := g.gs.OpenIssue(ghsim.IssueSpec{Login: "ada", Repo: "acme/calc", Title: "assigned", Body: "Please fix the failing test."})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.gs.Assign(ghsim.AssignSpec{Login: "ada", Repo: "acme/calc", Number: assigned, Assignee: g.app.BotLogin}); err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, 2*time.Minute, "the assigned issue's session", func() bool {
		for _, ss := range mustSessions(t, c) {
			if ss.GitHub != nil && ss.GitHub.Number == assigned {
				return true
			}
		}
		return false
	})

	// Through the API.
	v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{GitHub: "acme/calc"}}, Prompt: "fix the failing test", PR: "ready"})
	if err != nil {
		t.Fatal(err)
	}
	var head string
	waitHTTP(t, 2*time.Minute, "the API session's pull request", func() bool {
		got, err := c.GetSession(ctx, v.ID)
		if err == nil && got.Repos[0].PRNumber != 0 {
			head = got.Repos[0].Branch
			return true
		}
		return false
	})
	pr, _, err := ada.PullRequests.List(ctx, "acme", "calc", &github.PullRequestListOptions{Head: "acme:" + head})
	if err != nil || len(pr) != 1 || pr[0].GetDraft() {
		t.Fatalf("the API session's pull request: %+v, %v; want one, ready", pr, err)
	}
	if got := testbin.Git(t, bare, "log", "-1", "--format=%an|%cn", mustBranch(t, g, head)); got != "harvest[bot]|harvest[bot]" {
		t.Errorf("the API session's commit: %q; want the bot as author and committer", got)
	}

	// A repository the app is not installed on (GitHub has it, another
	// owner's), and one that does not exist: refused at once, saying so,
	// and no session is stored.
	if _, err := g.gs.CreateRepo(ctx, ghsim.RepoSpec{Owner: "nobody", Name: "none", Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	stored := len(mustSessions(t, c))
	for _, repo := range []string{"nobody/none", "acme/nothere"} {
		_, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{GitHub: repo}}, Prompt: "fix the failing test"})
		if client.StatusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "repos[0].github "+repo) || !strings.Contains(err.Error(), "not installed") {
			t.Errorf("a session on %s: %v; want a 400 saying the app is not installed on it", repo, err)
		}
	}
	if n := len(mustSessions(t, c)); n != stored {
		t.Errorf("%d sessions after the refused ones, want %d", n, stored)
	}
}

// TestGitHubSessionFailsVisibly: a mention on a pull request whose branch
// was deleted starts a session that cannot check it out: it fails (no
// retrying forever), and the progress comment says why.
func TestGitHubSessionFailsVisibly(t *testing.T) {
	g := newGHEnv(t)
	e, s := g.serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	work := t.TempDir()
	u := strings.Replace(g.gs.URL(), "http://", "http://ada:"+g.ada.Token+"@", 1) + "/acme/calc.git"
	testbin.Git(t, work, "clone", "-q", u, "w")
	w := filepath.Join(work, "w")
	testbin.Git(t, w, "checkout", "-q", "-b", "gone")
	os.WriteFile(filepath.Join(w, "x.txt"), []byte("x\n"), 0o644)
	testbin.Git(t, w, "add", "x.txt")
	testbin.Git(t, w, "commit", "-q", "-m", "x")
	testbin.Git(t, w, "push", "-q", "origin", "gone")
	pr, err := g.gs.OpenPull(ctx, ghsim.PullSpec{Login: "ada", Repo: "acme/calc", Title: "Gone", Head: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	testbin.Git(t, w, "push", "-q", "origin", ":gone")
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: pr, Body: "@harvest fix the failing test"}); err != nil {
		t.Fatal(err)
	}
	c := e.client(s)
	waitHTTP(t, 2*time.Minute, "the session to fail", func() bool {
		ss := mustSessions(t, c)
		return len(ss) == 1 && ss[0].State == "failed"
	})
	body := waitComment(t, ctx, g.client(t, g.ada), pr, "The session failed")
	if !strings.Contains(body, "gone") {
		t.Errorf("the progress comment does not say why: %q", body)
	}
}

// describeScript: the agent writes its pull request's description file.
const describeScript = `
rules:
  - name: describe-report
    when: {last_user: "describe the fix", tool_result: "PASS"}
    reply: {text: "Done, with a description.", usage: {input_tokens: 100, output_tokens: 10}}
  - name: describe
    when: {last_user: "describe the fix"}
    reply:
      tool_calls: [{name: bash, input: {command: "sed -i 's/\\$1 - \\$2/$1 + $2/' calc.sh && sh test.sh && git commit -qam 'Fix add' && printf '# Make add add\\n\\nThe body from the agent.\\n' > .git/HARVEST_PR.md && git push 2>&1"}}]
      usage: {input_tokens: 100, output_tokens: 10}
` + githubRules

// TestGitHubPullRequestDescription: a pull request takes its title and body
// from the description file the agent wrote; without one, the body is the
// agent's summary followed by the repository's pull request template.
func TestGitHubPullRequestDescription(t *testing.T) {
	g := newGHEnv(t)
	e := newServeEnvWith(t, describeScript)
	s := e.start(g.serveArgs()...)
	if err := g.gs.SetWebhookURL(g.app.ID, s.url+"/v1/github/webhook"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The repository's template, on main.
	work := t.TempDir()
	u := strings.Replace(g.gs.URL(), "http://", "http://ada:"+g.ada.Token+"@", 1) + "/acme/calc.git"
	testbin.Git(t, work, "clone", "-q", u, "w")
	w := filepath.Join(work, "w")
	os.MkdirAll(filepath.Join(w, ".github"), 0o755)
	os.WriteFile(filepath.Join(w, ".github/pull_request_template.md"), []byte("## Checklist\n- [ ] template-canary-3301\n"), 0o644)
	testbin.Git(t, w, "add", ".github")
	testbin.Git(t, w, "commit", "-q", "-m", "Add a PR template")
	testbin.Git(t, w, "push", "-q", "origin", "main")

	ada := g.client(t, g.ada)
	prFor := func(issue int) *github.PullRequest {
		var pr *github.PullRequest
		waitHTTP(t, 2*time.Minute, fmt.Sprintf("the pull request fixing #%d", issue), func() bool {
			prs, _, _ := ada.PullRequests.List(ctx, "acme", "calc", &github.PullRequestListOptions{State: "open"})
			for _, p := range prs {
				if strings.Contains(p.GetBody(), fmt.Sprintf("Fixes #%d", issue)) {
					pr = p
				}
			}
			return pr != nil
		})
		return pr
	}

	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "@harvest describe the fix"}); err != nil {
		t.Fatal(err)
	}
	pr := prFor(g.issue)
	if pr.GetTitle() != "Make add add" || !strings.Contains(pr.GetBody(), "The body from the agent.") || strings.Contains(pr.GetBody(), "template-canary-3301") {
		t.Errorf("from the description file: title %q, body %q", pr.GetTitle(), pr.GetBody())
	}

	other, err := g.gs.OpenIssue(ghsim.IssueSpec{Login: "ada", Repo: "acme/calc", Title: "add again"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: other, Body: "@harvest fix the failing test"}); err != nil {
		t.Fatal(err)
	}
	pr = prFor(other)
	body := pr.GetBody()
	if !strings.Contains(body, "Fixed add in calc.sh") || !strings.Contains(body, "template-canary-3301") ||
		strings.Index(body, "Fixed add") > strings.Index(body, "template-canary-3301") {
		t.Errorf("without a description file: body %q; want the summary, then the template", body)
	}
}

// checkGitHubPeople: the session GitHub started for the account adaID is
// owned by that account's user (made at first sight, a member, with a
// github identity), the audit log has the session's start on channel
// github by that user, and mallory's refusal, mallory being no user.
func checkGitHubPeople(t *testing.T, ctx context.Context, c *client.Client, v *wire.Session, adaID int64) {
	t.Helper()
	if v.User == "" || v.Owner != "github" {
		t.Fatalf("the session GitHub started: owner %q, user %q; want owner github and Ada's user", v.Owner, v.User)
	}
	u, err := c.GetUser(ctx, v.User)
	if err != nil || u.Role != wire.RoleMember || len(u.Identities) != 1 {
		t.Fatalf("the user of the session: %+v, %v", u, err)
	}
	if id := u.Identities[0]; id.Kind != "github" || id.Subject != strconv.FormatInt(adaID, 10) || id.Login != "ada" {
		t.Errorf("the user's identity: %+v; want github %d ada", id, adaID)
	}
	started, err := c.Audit(ctx, client.AuditOptions{Action: "session.create"})
	if err != nil || len(started.Entries) != 1 {
		t.Fatalf("the audit log's session.create: %+v, %v", started, err)
	}
	if en := started.Entries[0]; en.User != v.User || en.Channel != "github" || en.Target != v.ID || en.Result != "ok" {
		t.Errorf("the start's audit entry: %+v; want user %s, channel github, target %s, ok", en, v.User, v.ID)
	}
	refused, err := c.Audit(ctx, client.AuditOptions{Action: "github.refuse"})
	if err != nil || len(refused.Entries) != 1 {
		t.Fatalf("the audit log's github.refuse: %+v, %v", refused, err)
	}
	if en := refused.Entries[0]; en.User != "" || en.Channel != "github" || !strings.Contains(string(en.Detail), `"login":"mallory"`) {
		t.Errorf("the refusal's audit entry: %+v (%s); want mallory, no user, channel github", en, en.Detail)
	}
}
