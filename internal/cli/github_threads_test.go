package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// threadScript: the fix, a follow-up answered in words, a whole review
// and a failed check each answered with a commit on the session's
// branch, and a long job to stop.
const threadScript = `
rules:
  - name: explain
    when: {last_user: "explain the fix too"}
    reply: {text: "add subtracted; it adds now.", usage: {input_tokens: 100, output_tokens: 10}}
  - name: review-done
    when: {last_user: "requested changes on your pull request", tool_result: "REVIEW-DONE"}
    reply: {text: "Addressed the review.", usage: {input_tokens: 100, output_tokens: 10}}
  - name: review
    when: {last_user: "requested changes on your pull request"}
    reply:
      tool_calls: [{name: bash, input: {command: "echo '# add A B prints A + B' >> calc.sh && git commit -qam 'Address the review' && git push 2>&1; echo REVIEW-DONE"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: check-done
    when: {last_user: "The checks on your pull request failed", tool_result: "CHECK-FIXED"}
    reply: {text: "Fixed the lint.", usage: {input_tokens: 100, output_tokens: 10}}
  - name: check
    when: {last_user: "The checks on your pull request failed"}
    reply:
      tool_calls: [{name: bash, input: {command: "echo >> README.md && git commit -qam 'Satisfy lint' && git push 2>&1; echo CHECK-FIXED"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: notes-done
    when: {last_user: "write the notes", tool_result: "NOTES-DONE"}
    reply: {text: "Wrote the notes.", usage: {input_tokens: 100, output_tokens: 10}}
  - name: notes
    when: {last_user: "write the notes"}
    reply:
      tool_calls: [{name: bash, input: {command: "echo notes > NOTES.md && git add NOTES.md && git commit -qm 'Add notes' && git push 2>&1; echo NOTES-DONE"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: long-done
    when: {last_user: "run the long job", tool_result: "LONG-DONE"}
    reply: {text: "The long job ended.", usage: {input_tokens: 100, output_tokens: 10}}
  - name: long
    when: {last_user: "run the long job"}
    reply:
      tool_calls: [{name: bash, input: {command: "sleep 271828; echo LONG-DONE"}}]
      usage: {input_tokens: 100, output_tokens: 10}
` + githubRules

// waitTurns waits until session id has had turns turns and rests (idle or
// suspended).
func waitTurns(t *testing.T, c *client.Client, id string, turns int, what string) *wire.View {
	t.Helper()
	var v *wire.View
	waitHTTP(t, 2*time.Minute, what, func() bool {
		var err error
		v, err = c.GetSession(context.Background(), id)
		return err == nil && v.Turns >= turns && (v.State == "idle" || v.State == "suspended") && len(v.Queue) == 0
	})
	return v
}

// allPulls lists the repository's pull requests, open and closed.
func allPulls(t *testing.T, ctx context.Context, c *github.Client) []*github.PullRequest {
	t.Helper()
	prs, _, err := c.PullRequests.List(ctx, "acme", "calc", &github.PullRequestListOptions{State: "all"})
	if err != nil {
		t.Fatal(err)
	}
	return prs
}

// TestGitHubPullRequestThreadIsTheSession: on the pull request Harvest
// opened, a mention (which resumes the suspended session), a review with
// two comments (one message, not three) and a failed check suite each
// reach the session that opened it, in turns 2, 3 and 4 on its branch:
// one session and one pull request at the end. Merging the pull request
// ends the session (pr.merged, its box destroyed); closing another
// session's pull request ends that one (pr.closed) and deletes the branch
// it made.
func TestGitHubPullRequestThreadIsTheSession(t *testing.T) {
	g := newGHEnv(t)
	e := newServeEnvWith(t, threadScript)
	s := e.start(append(g.serveArgs(), "--github-idle-timeout", "2s")...)
	if err := g.gs.SetWebhookURL(g.app.ID, s.url+"/v1/github/webhook"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c := e.client(s)
	ada := g.client(t, g.ada)
	bare := filepath.Join(g.gs.Dir(), "repos", "acme", "calc.git")

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
	head := pr.GetHead().GetRef()
	id := mustSessions(t, c)[0].ID
	waitHTTP(t, time.Minute, "the session to be suspended (idle 2s)", func() bool {
		v, err := c.GetSession(ctx, id)
		return err == nil && v.State == "suspended"
	})

	// A mention on the pull request: the suspended session resumes and
	// takes it.
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: pr.GetNumber(), Body: "@harvest explain the fix too"}); err != nil {
		t.Fatal(err)
	}
	waitTurns(t, c, id, 2, "the mention's turn")
	var resumed, suspendedBefore bool
	for _, ev := range storedLog(t, ctx, c, id) {
		switch p := ev.Data.(type) {
		case event.SessionState:
			if p.State == "suspended" && !resumed {
				suspendedBefore = true
			}
			if p.State == "provisioning" && suspendedBefore {
				resumed = true
			}
		}
	}
	if !resumed {
		t.Errorf("the mention on the pull request did not resume the suspended session %s", id)
	}

	// A review of two comments and a body: one message, one turn, one
	// commit on the same branch.
	before := mustBranch(t, g, head)
	if _, err := g.gs.SubmitReview(ctx, ghsim.ReviewSpec{Login: "ada", Repo: "acme/calc", Number: pr.GetNumber(), Event: "REQUEST_CHANGES",
		Body: "Two things before this goes in.", Comments: []ghsim.ReviewCommentLine{
			{Path: "calc.sh", Line: 1, Body: "Document add."}, {Path: "calc.sh", Line: 1, Body: "And say what it returns."}}}); err != nil {
		t.Fatal(err)
	}
	waitTurns(t, c, id, 3, "the review's turn")
	after := mustBranch(t, g, head)
	if got := testbin.Git(t, bare, "log", "-1", "--format=%s", after); got != "Address the review" || testbin.Git(t, bare, "rev-parse", after+"^") != before {
		t.Errorf("after the review the branch is at %q on %s (was %s)", got, after, before)
	}
	// The review is answered once, on the pull request, mentioning its
	// author, with what changed.
	var answers []string
	waitHTTP(t, time.Minute, "the review's answer", func() bool {
		cs, _, err := g.client(t, g.ada).Issues.ListComments(ctx, "acme", "calc", pr.GetNumber(), nil)
		answers = answers[:0]
		for _, cm := range cs {
			if strings.HasPrefix(cm.GetBody(), "@ada ✅ Done") && strings.Contains(cm.GetBody(), "Addressed the review.") {
				answers = append(answers, cm.GetBody())
			}
		}
		return err == nil && len(answers) > 0
	})
	if len(answers) != 1 || !strings.Contains(answers[0], after[:7]) {
		t.Errorf("the review's answers: %q; want one naming %s", answers, after[:7])
	}

	// A failed check suite.
	if _, err := g.gs.CompleteCheckSuite(ctx, ghsim.CheckSuiteSpec{Repo: "acme/calc", Number: pr.GetNumber(), Runs: []ghsim.CheckRunSpec{
		{Name: "lint", Conclusion: "failure", Title: "1 problem", Summary: "README.md: missing final blank line"}}}); err != nil {
		t.Fatal(err)
	}
	v := waitTurns(t, c, id, 4, "the check's turn")
	if got := testbin.Git(t, bare, "log", "-1", "--format=%s", mustBranch(t, g, head)); got != "Satisfy lint" {
		t.Errorf("after the failed check the branch's last commit is %q", got)
	}

	// One session, one pull request; each trigger one message.
	if ss := mustSessions(t, c); len(ss) != 1 {
		t.Fatalf("%d sessions; want the one that opened the pull request", len(ss))
	}
	if prs := allPulls(t, ctx, ada); len(prs) != 1 {
		t.Fatalf("%d pull requests; want 1", len(prs))
	}
	if v.Turns != 4 {
		t.Errorf("session %s: %d turns; want 4 (the fix, the mention, the review, the check)", id, v.Turns)
	}
	var msgs []string
	for _, ev := range storedLog(t, ctx, c, id) {
		if q, ok := ev.Data.(event.MessageQueued); ok {
			msgs = append(msgs, q.Text)
		}
	}
	if len(msgs) != 4 {
		t.Fatalf("session %s: %d messages; want 4:\n%s", id, len(msgs), strings.Join(msgs, "\n---\n"))
	}
	for _, want := range []string{"Two things before this goes in.", "Document add.", "And say what it returns.", "calc.sh line 1", "@@"} {
		if !strings.Contains(msgs[2], want) {
			t.Errorf("the review's message lacks %q:\n%s", want, msgs[2])
		}
	}

	// Merged: the session ends, its box with it.
	if _, err := g.gs.MergePull(ctx, ghsim.PullActionSpec{Login: "ada", Repo: "acme/calc", Number: pr.GetNumber()}); err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, 2*time.Minute, "the merged pull request's session to stop", func() bool {
		v, err := c.GetSession(ctx, id)
		return err == nil && v.State == "stopped"
	})
	evs := follow(t, c, id, 0, "pr.merged", func(ev event.Event) bool { return ev.Data.EventType() == event.TypePRMerged })
	if m := evs[len(evs)-1].Data.(event.PRMerged); m.Number != pr.GetNumber() || m.By != "ada" || m.SHA == "" {
		t.Errorf("pr.merged: %+v", m)
	}
	if v, _ := c.GetSession(ctx, id); len(v.Sandbox) != 0 {
		t.Errorf("the stopped session still has a box: %s", v.Sandbox)
	}
	if boxes := e.boxes(); len(boxes) != 0 {
		t.Errorf("boxes after the merge: %v", boxes)
	}
	if mustBranch(t, g, head) == "" {
		t.Errorf("the merged branch was deleted")
	}

	// Another issue, another session and pull request, closed unmerged:
	// the session ends and the branch it made is deleted.
	other, err := g.gs.OpenIssue(ghsim.IssueSpec{Login: "ada", Repo: "acme/calc", Title: "notes", Body: "We need notes."})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: other, Body: "@harvest write the notes"}); err != nil {
		t.Fatal(err)
	}
	var pr2 *github.PullRequest
	waitHTTP(t, 2*time.Minute, "the second pull request", func() bool {
		for _, p := range allPulls(t, ctx, ada) {
			if strings.Contains(p.GetBody(), fmt.Sprintf("Fixes #%d", other)) {
				pr2 = p
			}
		}
		return pr2 != nil
	})
	var id2 string
	for _, ss := range mustSessions(t, c) {
		if ss.ID != id {
			id2 = ss.ID
		}
	}
	if err := g.gs.ClosePull(ghsim.PullActionSpec{Login: "ada", Repo: "acme/calc", Number: pr2.GetNumber()}); err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, 2*time.Minute, "the closed pull request's branch to be deleted", func() bool {
		b, err := g.gs.Branches("acme/calc")
		return err == nil && b[pr2.GetHead().GetRef()] == ""
	})
	if v, err := c.GetSession(ctx, id2); err != nil || v.State != "stopped" {
		t.Errorf("the closed pull request's session: %v, %v; want stopped", v, err)
	}
	evs = follow(t, c, id2, 0, "pr.closed", func(ev event.Event) bool { return ev.Data.EventType() == event.TypePRClosed })
	if p := evs[len(evs)-1].Data.(event.PRClosed); p.Number != pr2.GetNumber() || p.By != "ada" {
		t.Errorf("pr.closed: %+v", p)
	}
	if t.Failed() {
		t.Logf("harvest serve:\n%s", s.stderr)
	}
}

// TestGitHubMentionsReadLikeAPerson: mentions in a fenced code block, an
// inline code span, a quote and an HTML comment start nothing (no 👀, no
// session); a comment edited to add a mention starts one session, and a
// further edit does not start another; stop cancels the running turn,
// status says what the session does and links it, help says what Harvest
// does; a person with read access only is refused, once.
func TestGitHubMentionsReadLikeAPerson(t *testing.T) {
	g := newGHEnv(t)
	e := newServeEnvWith(t, threadScript)
	s := e.start(g.serveArgs()...)
	if err := g.gs.SetWebhookURL(g.app.ID, s.url+"/v1/github/webhook"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := e.client(s)
	ada := g.client(t, g.ada)
	comment := func(login, body string) int64 {
		t.Helper()
		id, err := g.gs.Comment(ghsim.CommentSpec{Login: login, Repo: "acme/calc", Number: g.issue, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	eyes := func(cid int64) bool {
		return g.requested(http.MethodPost, fmt.Sprintf("/api/v3/repos/acme/calc/issues/comments/%d/reactions", cid))
	}

	var quiet []int64
	for _, body := range []string{
		"```\n@harvest fix the failing test\n```",
		"Try `@harvest fix the failing test` to ask it.",
		"> @harvest fix the failing test\n\nThat was last week's request.",
		"<!-- @harvest fix the failing test -->\nNothing to see.",
	} {
		quiet = append(quiet, comment("ada", body))
	}
	// A comment edited to add a mention: one session. Deliveries are
	// processed in order, so once it has its 👀 the ones above were
	// dealt with.
	edited := comment("ada", "please fix the failing test")
	if err := g.gs.EditComment(ghsim.EditCommentSpec{Login: "ada", Repo: "acme/calc", CommentID: edited, Body: "@harvest fix the failing test"}); err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, time.Minute, "the 👀 on the edited comment", func() bool { return eyes(edited) })
	for i, cid := range quiet {
		if eyes(cid) {
			t.Errorf("quiet comment %d got a 👀", i)
		}
	}
	waitHTTP(t, time.Minute, "the edit's session", func() bool { return len(mustSessions(t, c)) > 0 })
	ss := mustSessions(t, c)
	if len(ss) != 1 {
		t.Fatalf("%d sessions after four quoted mentions and one edit that added one; want 1", len(ss))
	}
	id := ss[0].ID
	waitTurns(t, c, id, 1, "the edit's turn")
	// A further edit (it mentioned Harvest before): nothing new.
	if err := g.gs.EditComment(ghsim.EditCommentSpec{Login: "ada", Repo: "acme/calc", CommentID: edited, Body: "@harvest fix the failing test, thanks"}); err != nil {
		t.Fatal(err)
	}

	// help, then status; replies mention who asked.
	comment("ada", "@harvest help")
	help := waitComment(t, ctx, ada, g.issue, "@harvest stop")
	if !strings.Contains(help, "@harvest status") || !strings.Contains(help, "write access") {
		t.Errorf("help: %q", help)
	}
	comment("ada", "@harvest status")
	status := waitComment(t, ctx, ada, g.issue, "Turns: ")
	if !strings.Contains(status, "http://harvest.example/sessions/"+id) || !strings.Contains(status, "**idle**") {
		t.Errorf("status: %q", status)
	}
	if n := len(mustSessions(t, c)); n != 1 {
		t.Errorf("%d sessions after the second edit and the commands; want 1", n)
	}

	// stop cancels the running turn.
	comment("ada", "@harvest run the long job")
	waitHTTP(t, time.Minute, "the long job to run", func() bool { return len(testbin.ProcsWithArgs("sleep", "271828")) > 0 })
	comment("ada", "@harvest status")
	working := waitComment(t, ctx, ada, g.issue, "**working**")
	if !strings.Contains(working, "Current step: running") {
		t.Errorf("status during a turn: %q", working)
	}
	comment("ada", "@harvest stop")
	waitComment(t, ctx, ada, g.issue, "Stopped the current turn")
	follow(t, c, id, 0, "turn.cancelled", func(ev event.Event) bool { return ev.Data.EventType() == event.TypeTurnCancelled })
	waitHTTP(t, time.Minute, "the long job to be gone", func() bool { return len(testbin.ProcsWithArgs("sleep", "271828")) == 0 })

	// Read access only: refused once, whatever they ask.
	for _, body := range []string{"@harvest status", "@harvest stop", "@harvest fix the failing test"} {
		comment("mallory", body)
	}
	last := comment("ada", "@harvest help")
	testbin.WaitFor(t, time.Minute, "the 👀 on Ada's last comment", func() bool { return eyes(last) })
	waitHTTP(t, time.Minute, "the second help", func() bool {
		cs, _, _ := ada.Issues.ListComments(ctx, "acme", "calc", g.issue, &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100}})
		n := 0
		for _, cm := range cs {
			if strings.Contains(cm.GetBody(), "@harvest status** says") {
				n++
			}
		}
		return n == 2
	})
	cs, _, err := ada.Issues.ListComments(ctx, "acme", "calc", g.issue, &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100}})
	if err != nil {
		t.Fatal(err)
	}
	refusals, stops := 0, 0
	for _, cm := range cs {
		if strings.Contains(cm.GetBody(), "Sorry @mallory") {
			refusals++
			if !strings.Contains(cm.GetBody(), "write access") {
				t.Errorf("the refusal does not say why: %q", cm.GetBody())
			}
		}
		if strings.Contains(cm.GetBody(), "Stopped the current turn") {
			stops++
		}
	}
	if refusals != 1 || stops != 1 {
		t.Errorf("%d refusals of mallory (want 1), %d stops (want Ada's only)", refusals, stops)
	}
	if v, err := c.GetSession(ctx, id); err != nil || v.Turns != 2 {
		t.Errorf("session %s: %+v, %v; want 2 turns (mallory's request started none)", id, v, err)
	}
	if t.Failed() {
		t.Logf("harvest serve:\n%s", s.stderr)
	}
}

// TestGitHubBranchRaceNodes: two deliveries of a mention on one pull
// request (its branch held by no session yet) sent at the same instant to
// two nodes on one PostgreSQL store: one session is started on the
// branch; the other delivery's request goes to it as a follow-up.
func TestGitHubBranchRaceNodes(t *testing.T) {
	g := newGHEnv(t)
	e := newServeEnvWith(t, githubScript)
	e.onPostgres()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	st := e.openStore(ctx)
	args := append(g.serveArgs(), "--pool", "0")
	a := e.start(append(args, "--node-id", "a")...)
	b := e.start(append(args, "--node-id", "b")...)

	// Ada's branch and pull request.
	work := t.TempDir()
	u := strings.Replace(g.gs.URL(), "http://", "http://ada:"+g.ada.Token+"@", 1) + "/acme/calc.git"
	testbin.Git(t, work, "clone", "-q", u, "w")
	w := filepath.Join(work, "w")
	testbin.Git(t, w, "checkout", "-q", "-b", "feature/race")
	os.WriteFile(filepath.Join(w, "NOTES.md"), []byte("notes\n"), 0o644)
	testbin.Git(t, w, "add", "NOTES.md")
	testbin.Git(t, w, "commit", "-q", "-m", "Add notes")
	testbin.Git(t, w, "push", "-q", "origin", "feature/race")
	prNum, err := g.gs.OpenPull(ctx, ghsim.PullSpec{Login: "ada", Repo: "acme/calc", Title: "Notes", Head: "feature/race"})
	if err != nil {
		t.Fatal(err)
	}

	// The mention's delivery, caught, then sent as two deliveries (two
	// ids: GitHub's two attempts, or two events of one comment) to A and
	// B at once.
	var mu sync.Mutex
	var payload []byte
	catch := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		buf.ReadFrom(r.Body)
		if r.Header.Get("X-GitHub-Event") == "issue_comment" {
			mu.Lock()
			payload = buf.Bytes()
			mu.Unlock()
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer catch.Close()
	if err := g.gs.SetWebhookURL(g.app.ID, catch.URL); err != nil {
		t.Fatal(err)
	}
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: prNum, Body: "@harvest fix the failing test here too"}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.gs.WaitDeliveries(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	body := payload
	mu.Unlock()
	if body == nil {
		t.Fatal("no issue_comment delivery was caught")
	}
	secret, err := os.ReadFile(g.secretFil)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"race-0000-0000-0000-00000000000a", "race-0000-0000-0000-00000000000b"}
	var wg sync.WaitGroup
	for i, node := range []*serveProc{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, node.url+"/v1/github/webhook", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-GitHub-Event", "issue_comment")
			req.Header.Set("X-GitHub-Delivery", ids[i])
			req.Header.Set("X-Hub-Signature-256", gh.Sign(body, bytes.TrimSpace(secret)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Errorf("delivery %s to %s: %d", ids[i], node.url, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	var results []string
	waitHTTP(t, 2*time.Minute, "both deliveries to be processed", func() bool {
		results = results[:0]
		for _, id := range ids {
			d, err := st.GetDelivery(ctx, id)
			if err != nil || d.State == store.DeliveryPending {
				return false
			}
			results = append(results, d.State+": "+d.Result)
		}
		return true
	})
	t.Logf("deliveries: %q", results)
	ss, err := st.ListSessions(ctx, store.SessionFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, s := range ss {
		if !s.State.Ended() {
			live = append(live, s.ID)
		}
	}
	if len(live) != 1 {
		t.Fatalf("%d live sessions after two deliveries for one branch (%v); want 1; deliveries: %q", len(live), live, results)
	}
	holder, err := st.BranchSession(ctx, "acme/calc", "feature/race")
	if err != nil || holder != live[0] {
		t.Errorf("branch feature/race held by %q (%v); want %s", holder, err, live[0])
	}
	started, sent := 0, 0
	for _, r := range results {
		switch {
		case strings.HasPrefix(r, "done: started session "+live[0]):
			started++
		case r == "done: sent to session "+live[0]:
			sent++
		}
	}
	if started != 1 || sent != 1 {
		t.Errorf("deliveries: %q; want one that started session %s and one sent to it", results, live[0])
	}
	if t.Failed() {
		t.Logf("node A:\n%s\nnode B:\n%s", a.stderr, b.stderr)
	}
}
