package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/wire"
)

// BenchmarkGitHubWebhook: a real harvest serve, the GitHub stand-in and
// the model stand-in on loopback; each iteration is a person asking
// Harvest on a new issue, up to the pull request. It reports, as p50 and
// p99 over the iterations: the webhook's delivery to the 👀 reaction
// reaching GitHub (react-ms), to the session's first model request
// (model-ms), and from the turn's end to the pull request's creation
// reaching GitHub (pr-ms).
//
//	go test -run '^$' -bench GitHubWebhook -benchtime 20x ./internal/cli/
func BenchmarkGitHubWebhook(b *testing.B) {
	g := newGHEnv(b)
	e := newServeEnvWith(b, githubScript)
	s := e.start(g.serveArgs()...)
	if err := g.gs.SetWebhookURL(g.app.ID, s.url+"/v1/github/webhook"); err != nil {
		b.Fatal(err)
	}
	c := e.client(s)
	ada := g.client(b, g.ada)
	ctx := context.Background()
	var react, model, pr []float64
	for i := 0; b.Loop(); i++ {
		issue, err := g.gs.OpenIssue(ghsim.IssueSpec{Login: "ada", Repo: "acme/calc", Title: fmt.Sprint("bench ", i)})
		if err != nil {
			b.Fatal(err)
		}
		cid, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: issue, Body: "@harvest fix the failing test"})
		if err != nil {
			b.Fatal(err)
		}
		d, err := g.gs.WaitDelivery(ctx, func(d ghsim.Delivery) bool {
			return d.Event == "issue_comment" && strings.Contains(string(d.Payload), fmt.Sprintf(`"id":%d`, cid))
		})
		if err != nil {
			b.Fatal(err)
		}
		sent := d.DeliveredAt.Add(-d.Duration)
		var opened *github.PullRequest
		waitHTTP(b, 2*time.Minute, "the pull request", func() bool {
			prs, _, err := ada.PullRequests.List(ctx, "acme", "calc", &github.PullRequestListOptions{State: "open"})
			for _, p := range prs {
				if err == nil && strings.Contains(p.GetBody(), fmt.Sprintf("Fixes #%d", issue)) {
					opened = p
				}
			}
			return opened != nil
		})
		reactPath := fmt.Sprintf("/api/v3/repos/acme/calc/issues/comments/%d/reactions", cid)
		var reacted, created time.Time
		for _, r := range g.gs.Requests() {
			switch {
			case r.Method == http.MethodPost && r.Path == reactPath && reacted.IsZero():
				reacted = r.Time
			case r.Method == http.MethodPost && r.Path == "/api/v3/repos/acme/calc/pulls" && r.Time.After(sent) && created.IsZero():
				created = r.Time
			}
		}
		// The session's first model request and its turn's end.
		var id string
		for _, v := range mustSessions(b, c) {
			if v.GitHub != nil && v.GitHub.Number == issue {
				id = v.ID
			}
		}
		first := firstModelRequest(b, e.sim.URL, fmt.Sprintf("#%d", issue))
		evs := follow(b, c, id, 0, "the turn's end", func(ev event.Event) bool { return ev.Data.EventType() == event.TypeTurnFinished })
		ended := evs[len(evs)-1].Time
		react = append(react, ms(reacted.Sub(sent)))
		model = append(model, ms(first.Sub(sent)))
		pr = append(pr, ms(created.Sub(ended)))
	}
	for _, m := range []struct {
		name string
		v    []float64
	}{{"react", react}, {"model", model}, {"pr", pr}} {
		b.ReportMetric(pct(m.v, 50), m.name+"-p50-ms")
		b.ReportMetric(pct(m.v, 99), m.name+"-p99-ms")
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func pct(v []float64, p int) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, (len(s)*p+99)/100-1)]
}

// firstModelRequest is when the model stand-in got the first request that
// mentions marker (the issue, in the session's first prompt).
func firstModelRequest(b *testing.B, simURL, marker string) time.Time {
	b.Helper()
	resp, err := http.Get(simURL + "/_sim/requests")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var reqs []struct {
		Time time.Time       `json:"time"`
		Body json.RawMessage `json:"body"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&reqs); err != nil {
		b.Fatal(err)
	}
	for _, r := range reqs {
		if strings.Contains(string(r.Body), marker) {
			return r.Time
		}
	}
	b.Fatalf("no model request mentions %s", marker)
	return time.Time{}
}

// BenchmarkGitHubRateLimitStorm: a real harvest serve on the GitHub
// stand-in; each iteration puts the app's installation under a secondary
// limit (403, Retry-After: 15), then 100 mentions arrive (by a person
// without write access, so each is answered with a reply and starts
// nothing). It reports the requests Harvest sent inside the window besides
// the one GitHub refused (inside-window, must be 0), the refused ones
// (refused), and how long after the window's end the last reply reached
// GitHub (drain-s).
//
//	go test -run '^$' -bench GitHubRateLimitStorm -benchtime 1x ./internal/cli/
func BenchmarkGitHubRateLimitStorm(b *testing.B) {
	const mentions, window = 100, 15 * time.Second
	g := newGHEnv(b)
	e := newServeEnvWith(b, githubScript)
	s := e.start(g.serveArgs()...)
	if err := g.gs.SetWebhookURL(g.app.ID, s.url+"/v1/github/webhook"); err != nil {
		b.Fatal(err)
	}
	c := e.client(s)
	ctx := context.Background()
	// A person without write access is answered once per thread
	// (refuseOnce): each mention of an iteration is on an issue of its own,
	// opened before the window, so each gets its reply.
	openIssues := func() []int {
		issues := make([]int, mentions)
		for i := range issues {
			n, err := g.gs.OpenIssue(ghsim.IssueSpec{Login: "ada", Repo: "acme/calc", Title: fmt.Sprint("storm ", i)})
			if err != nil {
				b.Fatal(err)
			}
			issues[i] = n
		}
		return issues
	}
	replies := func() int {
		n := 0
		for _, r := range g.gs.Requests() {
			if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/comments") && byHarvest(r) && r.Status == http.StatusCreated {
				n++
			}
		}
		return n
	}
	// Harvest knows the installation and has its token.
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "mallory", Repo: "acme/calc", Number: g.issue, Body: "@harvest warm up"}); err != nil {
		b.Fatal(err)
	}
	waitHTTP(b, time.Minute, "the warm-up reply", func() bool { return replies() == 1 })
	var inside, refused, drain []float64
	// for range b.N, not b.Loop: with this body, b.Loop's keep-alive
	// crashes go1.26.8's compiler (escape analysis, a nil type).
	for range b.N {
		issues := openIssues()
		before := replies()
		start := time.Now()
		if err := g.gs.SetSecondaryLimit(ghsim.SecondaryLimitSpec{LimitScope: ghsim.LimitScope{InstallationID: g.inst}, For: int(window / time.Second)}); err != nil {
			b.Fatal(err)
		}
		for i := range mentions {
			if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "mallory", Repo: "acme/calc", Number: issues[i], Body: fmt.Sprintf("@harvest storm %d", i)}); err != nil {
				b.Fatal(err)
			}
		}
		waitHTTP(b, 5*time.Minute, "the storm's replies", func() bool { return replies() >= before+mentions })
		end := start.Add(window)
		var in, ref float64
		var last time.Time
		for _, r := range g.gs.Requests() {
			if !byHarvest(r) || r.Time.Before(start) {
				continue
			}
			switch {
			case r.Time.Before(end) && r.Status == http.StatusForbidden:
				ref++
			case r.Time.Before(end):
				in++
			}
			if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/comments") && r.Time.After(last) {
				last = r.Time
			}
		}
		inside = append(inside, in)
		refused = append(refused, ref)
		drain = append(drain, last.Sub(end).Seconds())
		if in != 0 {
			b.Errorf("%v requests sent inside the window", in)
		}
	}
	ds, err := c.GitHubDeliveries(ctx, wire.DeliveryFailed, 0)
	if err != nil || len(ds) != 0 {
		b.Errorf("failed deliveries: %v, %v", ds, err)
	}
	b.ReportMetric(pct(inside, 100), "inside-window")
	b.ReportMetric(pct(refused, 100), "refused")
	b.ReportMetric(pct(drain, 50), "drain-s")
}
