package ghbot

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/workspace"
)

// TestLiveProgress: while a turn runs, its section of the progress
// comment shows the agent's todo list as a checklist and its current
// step; a burst of steps is coalesced (no more edits than one per
// ProgressEvery, the latest state shown); the next turn adds its own
// section and the first one stays.
func TestLiveProgress(t *testing.T) {
	gs, err := ghsim.Start(ghsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	app, err := gs.CreateApp(ghsim.AppSpec{Slug: "harvest", Name: "Harvest"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gs.CreateInstallation(ghsim.InstallationSpec{AppID: app.ID, Account: "acme"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := gs.CreateRepo(ctx, ghsim.RepoSpec{Owner: "acme", Name: "calc", Dir: t.TempDir(), Private: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := gs.AddUser(ghsim.UserSpec{Login: "ada"}); err != nil {
		t.Fatal(err)
	}
	if err := gs.SetPermission(ghsim.PermissionSpec{Repo: "acme/calc", Login: "ada", Permission: "write"}); err != nil {
		t.Fatal(err)
	}
	num, err := gs.OpenIssue(ghsim.IssueSpec{Login: "ada", Repo: "acme/calc", Title: "add is wrong"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gh.New(gh.Config{APIURL: gs.URL() + "/api/v3/", WebURL: gs.URL() + "/", AppID: app.ID, PrivateKey: []byte(app.PrivateKeyPEM)})
	if err != nil {
		t.Fatal(err)
	}
	const every = 300 * time.Millisecond
	svc, err := New(Config{GitHub: g, Mirrors: &workspace.Mirrors{Dir: t.TempDir()}, ProgressEvery: every})
	if err != nil {
		t.Fatal(err)
	}
	c, err := g.Client(gh.SessionScope("acme/calc"))
	if err != nil {
		t.Fatal(err)
	}
	const sid = "s-live"
	cm, _, err := c.Issues.CreateComment(ctx, "acme", "calc", num, &github.IssueComment{Body: github.Ptr(svc.progressBody(sid, "👀 On it.", ""))})
	if err != nil {
		t.Fatal(err)
	}
	sess := &store.Session{ID: sid, GitHub: &store.GitHubLink{Repo: "acme/calc", Number: num, Progress: cm.GetID()},
		Repos: []store.Repo{{Name: "calc", GitHub: "acme/calc", Branch: "harvest/1-add-is-wrong"}}}
	body := func() string {
		got, _, err := c.Issues.GetComment(ctx, "acme", "calc", cm.GetID())
		if err != nil {
			t.Fatal(err)
		}
		return got.GetBody()
	}
	edits := func() int {
		n := 0
		for _, r := range gs.Requests() {
			if r.Method == http.MethodPatch && r.Path == fmt.Sprintf("/api/v3/repos/acme/calc/issues/comments/%d", cm.GetID()) {
				n++
			}
		}
		return n
	}
	see := func(w session.TurnWatch, p event.Payload) { w.See(event.Event{Session: sid, Data: p}) }

	w := svc.WatchTurn(ctx, session.TurnStart{Session: sess, Turn: "t-1"})
	if w == nil {
		t.Fatal("no watch for a session with a progress comment")
	}
	see(w, event.TodoUpdated{Items: []event.TodoItem{{Content: "Read the test", Status: "completed"}, {Content: "Fix add", Status: "in_progress"}, {Content: "Push", Status: "pending"}}})
	see(w, event.ToolStarted{Tool: "bash", Summary: "bash: sh test.sh"})
	testbin.WaitFor(t, 30*time.Second, "the checklist and the step in the comment", func() bool {
		b := body()
		return strings.Contains(b, "### Turn 1 · ⏳ Working") && strings.Contains(b, "- [x] Read the test") &&
			strings.Contains(b, "- [ ] ⏳ Fix add") && strings.Contains(b, "- [ ] Push") && strings.Contains(b, "Now: `bash: sh test.sh`")
	})
	if b := body(); strings.Contains(b, "On it.") || !strings.Contains(b, marker(sid)) {
		t.Errorf("the first turn's section replaces the acknowledgement and keeps the marker: %q", b)
	}

	before, start := edits(), time.Now()
	for i := range 200 {
		see(w, event.ToolStarted{Tool: "bash", Summary: fmt.Sprintf("bash: step %d", i)})
	}
	testbin.WaitFor(t, 30*time.Second, "the last step in the comment", func() bool { return strings.Contains(body(), "bash: step 199") })
	elapsed := time.Since(start)
	if n, most := edits()-before, 2+int(elapsed/every); n > most {
		t.Errorf("%d edits for 200 steps in %s; at most %d (one per %s)", n, elapsed, most, every)
	}
	w.Done()

	w = svc.WatchTurn(ctx, session.TurnStart{Session: sess, Turn: "t-2"})
	see(w, event.ToolStarted{Tool: "bash", Summary: "bash: second turn"})
	testbin.WaitFor(t, 30*time.Second, "the second turn's section", func() bool {
		b := body()
		return strings.Contains(b, "### Turn 2 · ⏳ Working") && strings.Contains(b, "bash: second turn")
	})
	if b := body(); !strings.Contains(b, "### Turn 1") || !strings.Contains(b, "bash: step 199") || strings.Index(b, "Turn 1") > strings.Index(b, "Turn 2") {
		t.Errorf("the first turn's section is gone or after the second: %q", b)
	}
	w.Done()
}
