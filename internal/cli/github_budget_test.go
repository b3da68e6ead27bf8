package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sim/ghsim"
)

// TestGitHubBudgets: a budget is said where it was asked. The person who
// mentioned Harvest on GitHub becomes a user; an admin caps them with
// harvest user budget set (through the API of a running harvest serve);
// their next request in the thread gets a comment saying the day's
// budget is spent and how it is raised, and a request on another issue,
// over their live-session cap, gets a comment saying so. harvest user
// budget show prints it; harvest audit has the change as the CLI's.
func TestGitHubBudgets(t *testing.T) {
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

	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "@harvest just look"}); err != nil {
		t.Fatal(err)
	}
	waitComment(t, ctx, ada, g.issue, "@ada ✅ Done: I made no change")
	sess := mustSessions(t, c)
	if len(sess) != 1 || sess[0].User == "" {
		t.Fatalf("sessions %+v, want ada's one", sess)
	}
	user := sess[0].User

	tok, err := os.ReadFile(filepath.Join(e.home, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("HARVEST_SERVER", s.url)
	t.Setenv("HARVEST_TOKEN", strings.TrimSpace(string(tok)))
	if code, _, errOut := runCLI(t, "", "user", "budget", "set", user); code != 2 || !strings.Contains(errOut, "--daily-usd") {
		t.Errorf("harvest user budget set without a cap: exit %d %s", code, errOut)
	}
	code, out, errOut := runCLI(t, "", "user", "budget", "set", user, "--daily-usd", "0.0001", "--max-sessions", "1")
	if code != 0 || !strings.Contains(out, "of $0.0001 today") || !strings.Contains(out, "live sessions: 1 of 1") {
		t.Fatalf("harvest user budget set: exit %d\n%s%s", code, out, errOut)
	}

	// The day's spend is over the cap: the next turn is refused, and the
	// person is told in the thread.
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "@harvest just look again"}); err != nil {
		t.Fatal(err)
	}
	told := waitComment(t, ctx, ada, g.issue, "@ada ⛔ Stopped: a budget is reached")
	if !strings.Contains(told, "the daily model budget of user "+user+" is spent") || !strings.Contains(told, "harvest user budget set "+user+" --daily-usd") {
		t.Errorf("the budget's comment: %q", told)
	}

	// Another issue: a second live session is over the cap of 1.
	other, err := g.gs.OpenIssue(ghsim.IssueSpec{Login: "ada", Repo: "acme/calc", Title: "Is sub right?"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: other, Body: "@harvest just look"}); err != nil {
		t.Fatal(err)
	}
	told = waitComment(t, ctx, ada, other, "Sorry @ada, I can't start a session")
	if !strings.Contains(told, "max_sessions 1") || !strings.Contains(told, "--max-sessions") {
		t.Errorf("the session cap's comment: %q", told)
	}
	if n := len(mustSessions(t, c)); n != 1 {
		t.Errorf("%d sessions, want only the first", n)
	}

	if code, out, errOut := runCLI(t, "", "user", "budget", "show", user); code != 0 || !strings.Contains(out, "of $0.0001 today") || !strings.Contains(out, "live sessions: 1 of 1") {
		t.Errorf("harvest user budget show: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := runCLI(t, "", "audit", "--action", "budget.set"); code != 0 || !strings.Contains(out, "cli") || !strings.Contains(out, user) {
		t.Errorf("harvest audit --action budget.set:\n%s", out)
	}
	if code, _, errOut := runCLI(t, "", "user", "budget", "clear", user); code != 0 || !strings.Contains(errOut, "cleared") {
		t.Errorf("harvest user budget clear: exit %d %s", code, errOut)
	}
}
