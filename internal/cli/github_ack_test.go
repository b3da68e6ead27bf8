package cli

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sim/ghsim"
)

// TestGitHubAcknowledgedAtOnce: a comment that asks Harvest gets its 👀
// as its delivery is stored, not when the deliveries ahead of it are
// done: while the first comment's processing waits for GitHub (its
// progress comment answered only after 20 s), a second comment, on
// another issue, is acknowledged. Each comment is reacted to once (the
// processing after the acknowledgement does not react again), and both
// sessions start once GitHub answers.
func TestGitHubAcknowledgedAtOnce(t *testing.T) {
	g := newGHEnv(t)
	e, s := g.serve(t)
	c := e.client(s)
	other, err := g.gs.OpenIssue(ghsim.IssueSpec{Login: "ada", Repo: "acme/calc", Title: "and subtract?"})
	if err != nil {
		t.Fatal(err)
	}
	progress := fmt.Sprintf("/repos/acme/calc/issues/%d/comments", g.issue)
	if err := g.gs.AddFault(ghsim.FaultSpec{Method: http.MethodPost, Path: progress, DelayMS: 20_000, Count: 1}); err != nil {
		t.Fatal(err)
	}
	eyes := func(cid int64) string {
		return fmt.Sprintf("/api/v3/repos/acme/calc/issues/comments/%d/reactions", cid)
	}
	first, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "@harvest fix the failing test"})
	if err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, time.Minute, "the 👀 on the first comment", func() bool { return g.requested(http.MethodPost, eyes(first)) })
	second, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: other, Body: "@harvest add subtract"})
	if err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, time.Minute, "the 👀 on the second comment", func() bool { return g.requested(http.MethodPost, eyes(second)) })
	if g.requested(http.MethodPost, "/api/v3"+progress) {
		t.Fatal("the second comment's 👀 came after the first comment's progress comment was answered: it waited for the delivery ahead of it (or the stand-in's 20 s delay did not hold)")
	}
	waitHTTP(t, 2*time.Minute, "both sessions", func() bool {
		n := 0
		for _, v := range mustSessions(t, c) {
			if v.GitHub != nil && (v.GitHub.Number == g.issue || v.GitHub.Number == other) {
				n++
			}
		}
		return n == 2
	})
	for _, cid := range []int64{first, second} {
		if n := g.count(http.MethodPost, eyes(cid)); n != 1 {
			t.Errorf("comment %d: %d requests for its 👀; want 1", cid, n)
		}
	}
}
