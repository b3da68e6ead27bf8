package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"
	"github.com/jackc/pgx/v5"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/ghbot"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/store"
)

// followUpScript is reviewScript with an answer to a follow-up comment.
const followUpScript = reviewScript + `
  - name: follow-up
    when: {last_user: "explain the fix too"}
    reply: {text: "add subtracted; it adds now.", usage: {input_tokens: 100, output_tokens: 10}}
`

// TestGitHubNodesForwardToOwner: two `harvest serve` nodes on one
// PostgreSQL, both GitHub apps. A comment delivered to node A starts a
// session there; then every delivery goes to node B, which owns nothing:
// a follow-up comment, a review comment and a failed check suite on the
// session's pull request each reach the session on A (B sends them there
// with its node token, keyed as the GitHub app's), once each, in turns
// that run on A. GitHub's redelivery of one is not processed again, and
// processing the follow-up and the check suite a second time (as after a
// crash before their end was recorded) stores no second message and
// counts no second fix attempt. B's token is valid only for that and is
// gone once B stops.
func TestGitHubNodesForwardToOwner(t *testing.T) {
	g := newGHEnv(t)
	e := newServeEnvWith(t, followUpScript)
	e.onPostgres()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	st := e.openStore(ctx)
	args := append(g.serveArgs(), "--pool", "0", "--github-fix-attempts", "2")
	a := e.start(append(args, "--node-id", "a")...)
	b := e.start(append(args, "--node-id", "b", "--quiet=false")...) // its log says what it forwards
	ca, cb := e.client(a), e.client(b)
	hook := func(s *serveProc) {
		t.Helper()
		// None left for the previous node to send or process: from now on
		// only s processes deliveries (a node processes every pending one
		// it finds, whoever received it).
		if _, err := g.gs.WaitDeliveries(ctx); err != nil {
			t.Fatal(err)
		}
		waitHTTP(t, time.Minute, "no pending delivery", func() bool {
			ds, err := st.PendingDeliveries(ctx, 0)
			return err == nil && len(ds) == 0
		})
		if err := g.gs.SetWebhookURL(g.app.ID, s.url+"/v1/github/webhook"); err != nil {
			t.Fatal(err)
		}
	}
	// delivered waits for the delivery of what made ghsim event (the
	// comment or suite id in its payload) to be processed, and returns it.
	delivered := func(ghEvent string, id int64) *store.Delivery {
		t.Helper()
		d, err := g.gs.WaitDelivery(ctx, func(d ghsim.Delivery) bool {
			return d.Event == ghEvent && strings.Contains(string(d.Payload), fmt.Sprintf(`"id":%d`, id))
		})
		if err != nil || d.StatusCode != http.StatusAccepted {
			t.Fatalf("the %s delivery: %d, %v; want 202", ghEvent, d.StatusCode, err)
		}
		var sd *store.Delivery
		waitHTTP(t, 2*time.Minute, "the "+ghEvent+" delivery "+d.GUID+" to be processed", func() bool {
			sd, err = st.GetDelivery(ctx, d.GUID)
			return err == nil && sd.State != store.DeliveryPending
		})
		if sd.State != store.DeliveryDone {
			t.Fatalf("delivery %s (%s): %s: %s", d.GUID, ghEvent, sd.State, sd.Result)
		}
		return sd
	}

	// The session starts on A.
	hook(a)
	cid, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "@harvest fix the failing test"})
	if err != nil {
		t.Fatal(err)
	}
	delivered("issue_comment", cid)
	ss := mustSessions(t, ca)
	if len(ss) != 1 {
		t.Fatalf("%d sessions after the comment, want 1", len(ss))
	}
	id := ss[0].ID
	waitIdle := func(what string, turns int) {
		t.Helper()
		waitHTTP(t, 2*time.Minute, what, func() bool {
			v, err := cb.GetSession(ctx, id)
			return err == nil && v.Turns >= turns && v.State == "idle"
		})
	}
	waitIdle("the first turn", 1)
	ada := g.client(t, g.ada)
	var pr *github.PullRequest
	waitHTTP(t, 2*time.Minute, "the pull request", func() bool {
		prs, _, err := ada.PullRequests.List(ctx, "acme", "calc", &github.PullRequestListOptions{State: "open"})
		if err == nil && len(prs) > 0 {
			pr = prs[0]
		}
		return pr != nil
	})
	if l, err := st.GetLease(ctx, id); err != nil || !strings.HasPrefix(l.Node, "a-") {
		t.Fatalf("session %s started from a delivery to A: lease %+v, %v; want A's", id, l, err)
	}
	tokens := nodeTokens(t, ctx, st)
	if len(tokens) != 2 {
		t.Fatalf("node tokens in the store: %v; want A's and B's", tokens)
	}

	// Everything else is delivered to B.
	hook(b)
	start := time.Now()
	cid, err = g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "@harvest explain the fix too"})
	if err != nil {
		t.Fatal(err)
	}
	follow1 := delivered("issue_comment", cid)
	if follow1.Result != "sent to session "+id || follow1.Attempts != 1 {
		t.Errorf("the follow-up on B: %q after %d attempts; want sent to session %s at the first", follow1.Result, follow1.Attempts, id)
	}
	waitIdle("the follow-up's turn", 2)
	t.Logf("follow-up comment on B → its turn on A done: %s", time.Since(start).Round(time.Millisecond))
	if !b.stderr.WaitFor("sent a message to a session on its node", time.Second) {
		t.Errorf("B did not say it sent the follow-up to A:\n%s", b.stderr)
	}

	rid, err := g.gs.ReviewComment(ctx, ghsim.ReviewCommentSpec{Login: "ada", Repo: "acme/calc", Number: pr.GetNumber(), Path: "calc.sh", Line: 1, Body: "Please document add."})
	if err != nil {
		t.Fatal(err)
	}
	if d := delivered("pull_request_review_comment", rid); !strings.HasPrefix(d.Result, "sent the review comment") {
		t.Errorf("the review comment on B: %q", d.Result)
	}
	waitIdle("the review's turn", 3)

	fail := ghsim.CheckSuiteSpec{Repo: "acme/calc", Number: pr.GetNumber(), Runs: []ghsim.CheckRunSpec{
		{Name: "lint", Conclusion: "failure", Title: "1 problem", Summary: "README.md: missing final blank line"},
	}}
	csid, err := g.gs.CompleteCheckSuite(ctx, fail)
	if err != nil {
		t.Fatal(err)
	}
	check := delivered("check_suite", csid)
	if !strings.HasPrefix(check.Result, "sent 1 failed checks") {
		t.Errorf("the failed check suite on B: %q", check.Result)
	}
	waitIdle("the check's turn", 4)

	// GitHub's Redeliver of the follow-up: acknowledged, not processed.
	var first int64
	for _, d := range g.gs.Deliveries() {
		if d.GUID == follow1.ID {
			first = d.ID
		}
	}
	again, err := g.gs.Redeliver(first)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := g.gs.WaitDelivery(ctx, func(d ghsim.Delivery) bool { return d.ID == again }); err != nil || d.StatusCode != http.StatusAccepted {
		t.Fatalf("the redelivery: %d, %v; want 202", d.StatusCode, err)
	}
	// Processed a second time, as when a node dies after a delivery's
	// effects and before its end is recorded: pending again, then B is
	// woken by a comment that does not mention Harvest (processed after
	// them: oldest first).
	repend(t, ctx, e.store, follow1.ID, check.ID)
	cid, err = g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "thanks (no mention)"})
	if err != nil {
		t.Fatal(err)
	}
	delivered("issue_comment", cid)
	for _, d0 := range []*store.Delivery{follow1, check} {
		d, err := st.GetDelivery(ctx, d0.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d.State != store.DeliveryDone || d.Attempts != d0.Attempts+1 {
			t.Errorf("delivery %s processed again: %s after %d attempts (%q); want done after %d", d.ID, d.State, d.Attempts, d.Result, d0.Attempts+1)
		}
	}

	// The session's log: each message once, stored by A (keyed as the
	// app's), delivered once, in turns 2, 3 and 4; seqs without a gap.
	v, err := ca.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if v.Turns != 4 || len(v.Queue) != 0 || v.State != "idle" {
		t.Errorf("session %s: %d turns, %d queued, %s; want 4, 0, idle", id, v.Turns, len(v.Queue), v.State)
	}
	if v.GitHub == nil || v.GitHub.FixAttempts != 1 {
		t.Errorf("session %s: %+v; want 1 fix attempt, counted once", id, v.GitHub)
	}
	page, err := ca.EventLog(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	queued := map[string]int{}
	delivered2 := map[string]string{}
	for i, ev := range page.Events {
		if ev.Seq != int64(i+1) {
			t.Fatalf("session %s: event %d has seq %d", id, i+1, ev.Seq)
		}
		switch p := ev.Data.(type) {
		case event.MessageQueued:
			for _, s := range []string{"explain the fix too", "commented on your pull request", "The checks on your pull request failed"} {
				if strings.Contains(p.Text, s) {
					queued[s]++
				}
			}
		case event.MessageDelivered:
			delivered2[p.MessageID] = ev.Turn
		}
	}
	for s, n := range queued {
		if n != 1 {
			t.Errorf("session %s: %d messages %q, want 1", id, n, s)
		}
	}
	if len(queued) != 3 {
		t.Errorf("session %s: messages %v; want the follow-up, the review comment and the failed checks", id, queued)
	}
	for turn, d := range map[string]*store.Delivery{"t2": follow1, "t4": check} {
		m, err := st.MessageByKey(ctx, id, ghbot.Owner, "github-"+d.ID)
		if err != nil {
			t.Errorf("the message of delivery %s keyed as the GitHub app's: %v", d.ID, err)
			continue
		}
		if got := delivered2[m.ID]; got != turn {
			t.Errorf("message %s of delivery %s delivered in turn %q, want %s", m.ID, d.ID, got, turn)
		}
	}
	if msgs, err := st.Messages(ctx, id); err != nil || len(msgs) != 4 {
		t.Errorf("session %s: %d messages stored (%v); want 4: the prompt, the follow-up, the review, the checks", id, len(msgs), err)
	}

	// B leaves: its token goes with it.
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := b.wait(); err != nil {
		t.Fatalf("B after SIGTERM: %v\n%s", err, b.stderr)
	}
	if left := nodeTokens(t, ctx, st); len(left) != 1 || !strings.HasPrefix(left[0], server.NodeTokenPrefix+"a-") {
		t.Errorf("node tokens after B stopped: %v; want A's only", left)
	}
	if t.Failed() {
		t.Logf("node A:\n%s\nnode B:\n%s", a.stderr, b.stderr)
	}
}

// nodeTokens lists the names of the nodes' tokens in st.
func nodeTokens(t *testing.T, ctx context.Context, st store.Store) []string {
	t.Helper()
	ts, err := st.ListTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tok := range ts {
		if _, ok := server.NodeOf(tok); ok {
			names = append(names, tok.Name)
		}
	}
	return names
}

// repend makes processed deliveries pending again in the PostgreSQL store
// at url, as a node that died after their effects and before recording
// their end leaves them.
func repend(t *testing.T, ctx context.Context, url string, ids ...string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tag, err := conn.Exec(ctx, `UPDATE deliveries SET state = 'pending', result = '', done_at = NULL WHERE id = ANY($1)`, ids)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != int64(len(ids)) {
		t.Fatal(errors.New("not every delivery was made pending again"))
	}
}
