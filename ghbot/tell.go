package ghbot

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// Telling people what a turn did.
//
// Editing a comment notifies no one on GitHub; a new comment that
// mentions someone does. So at a turn's end Harvest:
//
//   - writes the turn's section of the progress comment (live.go) with
//     how it ended, its summary, its commits and the pull request;
//   - answers whoever asked in a new comment that mentions them (the
//     person who asked for this turn: the delivery its message came from
//     says who and where; else the session's requester), with the
//     summary, the pull request and the session's link (and the cost with
//     --github-show-cost). A review comment is answered in its own thread
//     (POST …/pulls/{n}/comments/{id}/replies) naming the commit that
//     addressed it; a submitted review, an issue or a pull request
//     comment gets one comment on the thread;
//   - reacts to the comment that asked: 🚀 (rocket) when the turn
//     finished, 😕 (confused) when it failed or was stopped. GitHub's
//     reactions are +1, -1, laugh, confused, heart, hooray, rocket and
//     eyes; 👀 (eyes) was the acknowledgement, so the end is a different
//     one, and both stay.
//
// When no repository has a change (the agent committed nothing), nothing
// was pushed and no pull request opened, and the comment says so with
// the agent's summary (its reason).

// tell reports a finished turn to the people on GitHub. sess is the
// session with the turn's cost counted.
func (s *Service) tell(ctx context.Context, t session.TurnEnd, sess *store.Session, works []repoWork) error {
	l := sess.GitHub
	trig := s.turnTrigger(ctx, sess, t.Message)
	if trig.Repo == "" {
		trig.Repo, trig.Number = l.Repo, l.Number
	}
	if trig.Number == 0 {
		for _, w := range works {
			if strings.EqualFold(w.repo.GitHub, trig.Repo) && w.repo.PRNumber != 0 {
				trig.Number, trig.IsPR = w.repo.PRNumber, true
			}
		}
	}
	c, err := s.gh.Client(repoScope(trig.Repo))
	if err != nil {
		return err
	}
	var errs []error
	if d := s.doc(sess); d != nil {
		d.mu.Lock()
		err := s.setSection(ctx, c, d, t.Turn, func(n int) string { return s.endSection(n, t, sess, works) })
		d.mu.Unlock()
		errs = append(errs, err)
	}
	if trig.Number != 0 {
		errs = append(errs, s.answer(ctx, c, t, sess, trig, works))
	}
	s.react(ctx, c, t, trig)
	return errors.Join(errs...)
}

// status is how a turn ended, in a few words with an emoji.
func status(t session.TurnEnd) (string, bool) {
	o := t.Outcome
	switch {
	case o.Finished != nil:
		return "✅ Done", true
	case o.Failed != nil && o.Failed.Kind == event.FailBudget:
		return "⛔ Stopped: a budget is reached", false
	case o.Failed != nil:
		return "❌ Failed (" + string(o.Failed.Kind) + ")", false
	case o.Cancelled != nil:
		return "⏹️ Stopped", false
	}
	return "⏹️ Ended", false
}

// summary is what the agent said it did (or why the turn ended).
func summary(t session.TurnEnd) string {
	o := t.Outcome
	switch {
	case o.Finished != nil:
		return strings.TrimSpace(o.Finished.Result)
	case o.Failed != nil:
		return strings.TrimSpace(o.Failed.Error)
	case o.Cancelled != nil:
		return strings.TrimSpace(o.Cancelled.Reason)
	}
	return ""
}

// changes says what the turn changed on each repository: its commits,
// the pull request, or that nothing changed.
func changes(works []repoWork) (lines []string, changed bool) {
	for _, w := range works {
		r := w.repo
		switch {
		case w.err != nil:
			lines = append(lines, fmt.Sprintf("Publishing %s failed: %s", r.GitHub, truncate(w.err.Error(), 300)))
		case len(w.commits) > 0:
			changed = true
			var shas []string
			for _, c := range w.commits {
				shas = append(shas, c.sha[:7])
			}
			lines = append(lines, fmt.Sprintf("Commits on `%s`: %s", r.Branch, strings.Join(shas, ", ")))
			if r.From != "" {
				lines = append(lines, fmt.Sprintf("The pull request's own branch is in a fork, where Harvest cannot push: this work is on `%s` of %s, started from its head %s.", r.Branch, r.GitHub, shortSHA(r.From)))
			}
		case w.unchanged && r.PRNumber == 0:
			lines = append(lines, fmt.Sprintf("No change to %s: nothing was pushed and no pull request opened.", r.GitHub))
		}
		if r.PRURL != "" {
			verb := "Pull request"
			if w.opened {
				verb = "Opened pull request"
			}
			lines = append(lines, verb+": "+r.PRURL)
		}
	}
	return lines, changed
}

// endSection is a finished turn's section of the progress comment.
func (s *Service) endSection(n int, t session.TurnEnd, sess *store.Session, works []repoWork) string {
	st, _ := status(t)
	var b strings.Builder
	fmt.Fprintf(&b, "### Turn %d · %s\n", n, st)
	if sum := summary(t); sum != "" {
		b.WriteString("\n" + quote(truncate(sum, 4000)) + "\n")
	}
	lines, _ := changes(works)
	if len(lines) > 0 {
		b.WriteString("\n" + strings.Join(lines, "\n\n") + "\n")
	}
	if s.cfg.ShowCost {
		fmt.Fprintf(&b, "\nCost so far: $%.4f\n", sess.CostUSD)
	}
	return b.String()
}

// answer posts the new comment that tells whoever asked how the turn
// ended (in the review comment's thread when one asked).
func (s *Service) answer(ctx context.Context, c *github.Client, t session.TurnEnd, sess *store.Session, trig trigger, works []repoWork) error {
	st, ok := status(t)
	lines, changed := changes(works)
	var b strings.Builder
	if trig.Login != "" {
		b.WriteString("@" + trig.Login + " ")
	}
	b.WriteString(st)
	if ok && !changed {
		b.WriteString(": I made no change")
	}
	sum := summary(t)
	if trig.ReviewComment != 0 {
		// What addressed this comment: the turn's commits on the pull
		// request's branch.
		for _, w := range works {
			if strings.EqualFold(w.repo.GitHub, trig.Repo) && len(w.commits) > 0 {
				last := w.commits[len(w.commits)-1]
				fmt.Fprintf(&b, " in %s (%s)", last.sha, oneLine(last.subject, 100))
			}
		}
	}
	b.WriteString(".")
	if sum != "" {
		b.WriteString("\n\n" + quote(truncate(sum, 4000)))
	}
	if len(lines) > 0 {
		b.WriteString("\n\n" + strings.Join(lines, "\n"))
	}
	fmt.Fprintf(&b, "\n\nSession %s", s.sessionLink(sess.ID))
	if s.cfg.ShowCost {
		fmt.Fprintf(&b, " · cost so far $%.4f", sess.CostUSD)
	}
	b.WriteString("\n\n<!-- harvest-turn-end: " + sess.ID + " " + t.Turn + " -->")
	owner, name := split(trig.Repo)
	if trig.ReviewComment != 0 {
		err := replyInThread(ctx, c, owner, name, trig.Number, trig.ReviewComment, b.String())
		if err == nil {
			return nil
		}
		s.log.Warn("answering in the review comment's thread; commenting on the pull request instead", "session", sess.ID, "err", err)
	}
	_, _, err := c.Issues.CreateComment(ctx, owner, name, trig.Number, &github.IssueComment{Body: github.Ptr(b.String())})
	return explain(err, fmt.Sprintf("telling @%s on #%d", trig.Login, trig.Number))
}

// react marks the comment (or issue) that asked with how the turn ended.
func (s *Service) react(ctx context.Context, c *github.Client, t session.TurnEnd, trig trigger) {
	content := "confused"
	if _, ok := status(t); ok {
		content = "rocket"
	}
	owner, name := split(trig.Repo)
	var err error
	switch {
	case trig.Comment != 0:
		_, _, err = c.Reactions.CreateIssueCommentReaction(ctx, owner, name, trig.Comment, content)
	case trig.ReviewComment != 0:
		_, _, err = c.Reactions.CreatePullRequestCommentReaction(ctx, owner, name, trig.ReviewComment, content)
	case trig.Issue && trig.Number != 0:
		_, _, err = c.Reactions.CreateIssueReaction(ctx, owner, name, trig.Number, content)
	}
	if err != nil {
		s.log.Warn("reacting to what asked for a turn", "session", t.Session.ID, "err", err)
	}
}

// replyInThread answers a review comment in its thread, through the
// endpoint GitHub describes for it (POST
// /repos/{owner}/{repo}/pulls/{n}/comments/{id}/replies, {"body"}).
// go-github's CreateCommentInReplyTo posts {body, in_reply_to} to
// …/pulls/{n}/comments instead, which GitHub's description says needs a
// commit and a path.
func replyInThread(ctx context.Context, c *github.Client, owner, name string, pr int, comment int64, body string) error {
	u := fmt.Sprintf("repos/%s/%s/pulls/%d/comments/%d/replies", owner, name, pr, comment)
	req, err := c.NewRequest("POST", u, map[string]string{"body": body})
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, req, new(github.PullRequestComment))
	return explain(err, "replying in the review comment's thread")
}
