package ghbot

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// The check run: a check named "Harvest" on the head of a session's pull
// request, where reviewers look (the pull request's checks, the commit's
// status), when the app's installation was granted checks: write (read
// with the installation, gh.Granted; without it nothing is asked, and
// the token that writes the runs asks for checks: write and nothing
// else):
//
//	turn begins, the pull request open, its head on GitHub
//	    → POST check-runs: in_progress on that head (WatchTurn, in the
//	      watch's goroutine: the turn does not wait for it)
//	turn ends (after the pull request and the comment, AfterTurn)
//	    head unchanged → PATCH: completed, with the turn's conclusion and
//	                     summary
//	    head moved     → PATCH the one in progress completed ("superseded
//	                     by" the new head), POST a completed one on the
//	                     new head
//	    none began (the pull request opened by this turn)
//	                   → POST a completed one on its head
//
// Conclusions: a finished turn success, a failed one failure, a stopped
// one cancelled. GitHub delivers the suite's check_suite completed to the
// app too: ignorable drops the app's own (a failed turn is not a failed
// check for the session to fix). Check runs are deferrable work: they
// keep off the installation's reserve and never wait inside a window
// (gh.Background, gh.NoWait); a refusal is logged, never the turn's
// failure. A run in progress that a crash left behind is completed by
// the next turn's end on the repository (or stays in progress: GitHub
// marks it stale after two weeks).

// checkName is the check run's name.
const checkName = "Harvest"

// checkTimeout bounds one request about a check run.
const checkTimeout = 30 * time.Second

// checkRef is a turn's check run in progress on one repository.
type checkRef struct {
	id  int64
	sha string
}

func checkKey(session, repo string) string { return session + "\x00" + repo }

// checksScope is what writing check runs needs, and nothing else.
func checksScope(repo string) gh.Scope {
	return gh.Scope{Repos: []string{repo}, Permissions: map[string]string{"checks": "write", "metadata": "read"}}
}

// checksClient writes check runs on repo; nil when the installation was
// not granted checks: write (or Harvest is a token, not an app).
func (s *Service) checksClient(ctx context.Context, repo string) *github.Client {
	ok, err := s.gh.Granted(ctx, repo, "checks", "write")
	if err != nil {
		s.log.Warn("asking what the app's installation was granted (no check run)", "repo", repo, "err", err)
	}
	if !ok {
		return nil
	}
	c, err := s.gh.Client(checksScope(repo))
	if err != nil {
		s.log.Warn("a client for check runs", "repo", repo, "err", err)
		return nil
	}
	return c
}

// checkCtx bounds a request about a check run: deferrable, never waiting
// inside one of GitHub's windows.
func checkCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(gh.NoWait(gh.Background(ctx)), checkTimeout)
}

// startChecks puts a check run in progress on the head of each pull
// request of the session as its turn begins.
func (s *Service) startChecks(ctx context.Context, t session.TurnStart) {
	if t.Session.PR == store.PRNone {
		return
	}
	for _, r := range t.Session.Repos {
		if r.GitHub == "" || r.PRNumber == 0 || r.Pushed == "" {
			continue
		}
		cctx, cancel := checkCtx(ctx)
		c := s.checksClient(cctx, r.GitHub)
		if c == nil {
			cancel()
			continue
		}
		owner, name := split(r.GitHub)
		run, _, err := c.Checks.CreateCheckRun(cctx, owner, name, github.CreateCheckRunOptions{
			Name: checkName, HeadSHA: r.Pushed, Status: github.Ptr("in_progress"),
			StartedAt: &github.Timestamp{Time: s.cfg.Now()}, ExternalID: github.Ptr(t.Session.ID), DetailsURL: s.detailsURL(t.Session.ID),
			Output: &github.CheckRunOutput{Title: github.Ptr(fmt.Sprintf("Turn %d · working", t.Session.Turns)),
				Summary: github.Ptr(fmt.Sprintf("Harvest session %s is working on turn %d.", s.sessionLink(t.Session.ID), t.Session.Turns))},
		})
		cancel()
		if err != nil {
			s.log.Warn("putting the check run in progress", "session", t.Session.ID, "repo", r.GitHub, "err", explain(err, "creating a check run"))
			continue
		}
		s.mu.Lock()
		s.checks[checkKey(t.Session.ID, r.Name)] = checkRef{id: run.GetID(), sha: r.Pushed}
		s.mu.Unlock()
	}
}

// finishChecks completes the turn's check runs with how it ended (see the
// top of this file). sess is the session with the turn's cost counted.
func (s *Service) finishChecks(ctx context.Context, t session.TurnEnd, sess *store.Session, works []repoWork) {
	st, _ := status(t)
	concl := conclusion(t.Outcome)
	n := t.Session.Turns
	summary := truncate(strings.TrimSpace(s.endSection(n, t, sess, works)), 60000)
	title := fmt.Sprintf("Turn %d · %s", n, st)
	for _, w := range works {
		r := w.repo
		key := checkKey(t.Session.ID, r.Name)
		s.mu.Lock()
		ref, began := s.checks[key]
		delete(s.checks, key)
		s.mu.Unlock()
		open := r.PRNumber != 0 && r.Pushed != "" && t.Session.PR != store.PRNone
		if !began && !open {
			continue
		}
		cctx, cancel := checkCtx(ctx)
		s.finishCheck(cctx, t.Session.ID, r, ref, began, open, concl, title, summary)
		cancel()
	}
}

func (s *Service) finishCheck(ctx context.Context, session string, r *store.Repo, ref checkRef, began, open bool, concl, title, summary string) {
	c := s.checksClient(ctx, r.GitHub)
	if c == nil {
		return
	}
	owner, name := split(r.GitHub)
	done := func(sum string) *github.CheckRunOutput {
		return &github.CheckRunOutput{Title: github.Ptr(title), Summary: github.Ptr(sum)}
	}
	if began {
		sum := summary
		if !open || ref.sha != r.Pushed {
			sum = fmt.Sprintf("The turn's work is on %s.\n\n%s", firstOf(r.Pushed, "no commit of GitHub's"), summary)
		}
		if _, _, err := c.Checks.UpdateCheckRun(ctx, owner, name, ref.id, github.UpdateCheckRunOptions{
			Name: checkName, Conclusion: github.Ptr(concl), CompletedAt: &github.Timestamp{Time: s.cfg.Now()}, Output: done(sum),
		}); err != nil {
			s.log.Warn("completing the check run", "session", session, "repo", r.GitHub, "err", explain(err, "updating a check run"))
		}
		if !open || ref.sha == r.Pushed {
			return
		}
	}
	now := s.cfg.Now()
	if _, _, err := c.Checks.CreateCheckRun(ctx, owner, name, github.CreateCheckRunOptions{
		Name: checkName, HeadSHA: r.Pushed, Conclusion: github.Ptr(concl), StartedAt: &github.Timestamp{Time: now},
		CompletedAt: &github.Timestamp{Time: now}, ExternalID: github.Ptr(session), DetailsURL: s.detailsURL(session), Output: done(summary),
	}); err != nil {
		s.log.Warn("making the check run", "session", session, "repo", r.GitHub, "err", explain(err, "creating a check run"))
	}
}

// conclusion is a turn's check conclusion.
func conclusion(o agent.Outcome) string {
	switch {
	case o.Finished != nil:
		return "success"
	case o.Failed != nil:
		return "failure"
	case o.Cancelled != nil:
		return "cancelled"
	}
	return "neutral"
}

// detailsURL is the session's page (nil without --public-url).
func (s *Service) detailsURL(session string) *string {
	if s.cfg.BaseURL == "" {
		return nil
	}
	return github.Ptr(strings.TrimRight(s.cfg.BaseURL, "/") + "/sessions/" + session)
}

// watchChecks starts the turn's check runs in a goroutine of their own
// (nil: there is no pull request to put one on).
func (s *Service) watchChecks(ctx context.Context, t session.TurnStart) session.TurnWatch {
	if !s.gh.IsApp() || t.Session.PR == store.PRNone {
		return nil
	}
	some := false
	for _, r := range t.Session.Repos {
		some = some || r.GitHub != "" && r.PRNumber != 0 && r.Pushed != ""
	}
	if !some {
		return nil
	}
	w := &checkWatch{done: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(w.done)
		s.startChecks(w.ctx, t)
	}()
	return w
}

// checkWatch is the goroutine that puts a turn's check runs in progress.
// Done waits for it (so the turn's end finds the runs), a bounded time.
type checkWatch struct {
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

func (w *checkWatch) See(event.Event) {}

func (w *checkWatch) Done() {
	t := time.NewTimer(checkTimeout + time.Second)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C:
		w.cancel()
		<-w.done
	}
	w.cancel()
}

// watches are a turn's watches, seen and done together.
type watches []session.TurnWatch

func (ws watches) See(ev event.Event) {
	for _, w := range ws {
		w.See(ev)
	}
}

func (ws watches) Done() {
	for _, w := range ws {
		w.Done()
	}
}
