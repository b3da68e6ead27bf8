package cli

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/wire"
)

// TestGitHubCheckRun: the "Harvest" check run on a session's pull
// request. Without checks: write granted, nothing is asked of the checks
// API. Once the installation accepts it (new_permissions_accepted), a
// turn puts a run in progress on the pull request's head as it begins
// and completes it with its summary as it ends; a turn that moves the
// head completes the run it began and gives the new head a run of its
// own. GitHub's check_suite completed for Harvest's own suites is
// dropped (no turn to "fix" it).
func TestGitHubCheckRun(t *testing.T) {
	asked := maps.Clone(ghsim.DefaultAppPermissions)
	asked["checks"] = "write"
	g := newGHEnvAsking(t, asked, ghsim.DefaultAppPermissions)
	e := newServeEnvWith(t, threadScript)
	s := e.start(g.serveArgs()...)
	if err := g.gs.SetWebhookURL(g.app.ID, s.url+"/v1/github/webhook"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := e.client(s)
	ada := g.client(t, g.ada)
	checkRequests := func() []ghsim.Request {
		var out []ghsim.Request
		for _, r := range g.gs.Requests() {
			if strings.Contains(r.Path, "/check-runs") && r.Method != http.MethodGet {
				out = append(out, r)
			}
		}
		return out
	}

	// Turn 1, checks: read only: the pull request, no check run.
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
	waitTurns(t, c, id, 1, "the first turn")
	if rs := checkRequests(); len(rs) != 0 {
		t.Fatalf("check runs asked for without checks: write: %+v", rs)
	}

	// The installation accepts checks: write.
	if err := g.gs.AcceptPermissions(ghsim.InstallationPermissionsSpec{InstallationID: g.inst, Permissions: asked}); err != nil {
		t.Fatal(err)
	}
	delivery(t, c, wire.DeliveryDone, func(d wire.GitHubDelivery) bool {
		return d.Event == "installation" && strings.Contains(d.Result, "accepted new permissions")
	})

	// Turn 2, no commit: one run, in progress as the turn began, completed
	// on the same head as it ended.
	branch := pr.GetHead().GetRef()
	head2 := mustBranch(t, g, branch)
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: pr.GetNumber(), Body: "@harvest explain the fix too"}); err != nil {
		t.Fatal(err)
	}
	waitTurns(t, c, id, 2, "the second turn")
	runs, err := g.gs.CheckRuns("acme/calc")
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 {
		t.Fatalf("after turn 2: %d check runs (%+v); want 1", len(runs), runs)
	}
	r := runs[0]
	if r.Name != "Harvest" || r.App != "harvest" || r.HeadSHA != head2 || r.Status != "completed" || r.Conclusion != "success" ||
		r.ExternalID != id || r.DetailsURL != "http://harvest.example/sessions/"+id || r.Title != "Turn 2 · ✅ Done" || !strings.Contains(r.Summary, "add subtracted") {
		t.Errorf("turn 2's check run: %+v", r)
	}
	reqs := checkRequests()
	if len(reqs) != 2 || reqs[0].Method != http.MethodPost || reqs[1].Method != http.MethodPatch {
		t.Fatalf("turn 2's check requests: %+v; want a POST then a PATCH", reqs)
	}
	var began struct{ Status string }
	if json.Unmarshal(reqs[0].Body, &began) != nil || began.Status != "in_progress" {
		t.Errorf("turn 2's run began as %s; want in_progress", reqs[0].Body)
	}

	// Turn 3, a review answered with a commit: the run begun on the old
	// head is completed, and the new head gets one of its own.
	if _, err := g.gs.SubmitReview(ctx, ghsim.ReviewSpec{Login: "ada", Repo: "acme/calc", Number: pr.GetNumber(), Event: "REQUEST_CHANGES",
		Body: "Document add.", Comments: []ghsim.ReviewCommentLine{{Path: "calc.sh", Line: 1, Body: "Say what it returns."}}}); err != nil {
		t.Fatal(err)
	}
	waitTurns(t, c, id, 3, "the review's turn")
	head3 := mustBranch(t, g, branch)
	if head3 == head2 {
		t.Fatal("the review's turn did not move the branch")
	}
	if runs, err = g.gs.CheckRuns("acme/calc"); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 {
		t.Fatalf("after turn 3: %d check runs (%+v); want 3", len(runs), runs)
	}
	if r := runs[1]; r.HeadSHA != head2 || r.Status != "completed" || r.Conclusion != "success" || !strings.Contains(r.Summary, "The turn's work is on "+head3) {
		t.Errorf("turn 3's run on the old head: %+v", r)
	}
	if r := runs[2]; r.HeadSHA != head3 || r.Status != "completed" || r.Conclusion != "success" || r.Title != "Turn 3 · ✅ Done" {
		t.Errorf("turn 3's run on the new head: %+v", r)
	}

	// Harvest's own suites came back completed (head2's twice, head3's
	// once) and were dropped at receipt.
	waitHTTP(t, time.Minute, "Harvest's own check suites", func() bool {
		ds, err := c.GitHubDeliveries(ctx, wire.DeliveryDone, 0)
		n := 0
		for _, d := range ds {
			if d.Event == "check_suite" {
				if d.Result != "ignored: Harvest's own check suite" {
					t.Errorf("check_suite delivery %s: %q", d.ID, d.Result)
				}
				n++
			}
		}
		return err == nil && n == 3
	})
	if v := waitTurns(t, c, id, 3, "the session at rest"); v.Turns != 3 {
		t.Errorf("the session had %d turns; want 3 (its own check suites start none)", v.Turns)
	}
}
