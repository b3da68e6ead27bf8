package ghbot

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// Reviews. On GitHub every review comment belongs to a review: a review
// of several comments (or with a body) is submitted at once, and GitHub
// sends a pull_request_review_comment for each comment and a
// pull_request_review for the review. Harvest sends a review to the
// session once, whole, as one follow-up: the review's event sends its
// body and all its comments; a comment's event sends only a comment that
// is its review's one comment with no body (a single comment, or a reply
// in a thread). Both decide from the review as GitHub has it when they
// are processed (complete: a review's events are sent once it is
// submitted), so they agree whichever is processed first.

// reviewParts reads a review's comments (and the review itself when the
// event did not carry it).
func reviewParts(ctx context.Context, c *github.Client, repo string, pr int, reviewID int64) ([]*github.PullRequestComment, error) {
	owner, name := split(repo)
	var all []*github.PullRequestComment
	opts := &github.ListOptions{PerPage: 100}
	for {
		cs, resp, err := c.PullRequests.ListReviewComments(ctx, owner, name, pr, reviewID, opts)
		if err != nil {
			return nil, explain(err, fmt.Sprintf("reading the comments of review %d", reviewID))
		}
		all = append(all, cs...)
		if resp.NextPage == 0 {
			return all, nil
		}
		opts.Page = resp.NextPage
	}
}

// reviewSession finds the live session working on pull request pr of
// full, and a client for the repository, for a review or review comment
// (what) by who; ignored says why there is nothing to do (a bot, no
// session, someone not allowed to ask).
func (h *Hooks) reviewSession(ctx context.Context, full string, who *github.User, pr *github.PullRequest, what string) (*store.Session, *github.Client, string, error) {
	if who.GetType() == "Bot" || h.isBot(ctx, who) {
		return nil, nil, "ignored: a bot's " + what, nil
	}
	s, err := h.threadSession(ctx, full, pr.GetNumber(), pr)
	if err != nil {
		return nil, nil, "", err
	}
	if s == nil {
		return nil, nil, "ignored: no live session works on this pull request", nil
	}
	c, err := h.svc.gh.Client(repoScope(full))
	if err != nil {
		return nil, nil, "", err
	}
	if why, err := h.allowed(ctx, c, full, who); err != nil {
		return nil, nil, "", err
	} else if why != "" {
		return nil, nil, "ignored: " + why, nil
	}
	return s, c, "", nil
}

// onReview sends a submitted review of a session's pull request to the
// session: its body and its comments, as one message.
func (h *Hooks) onReview(ctx context.Context, d *store.Delivery, e *github.PullRequestReviewEvent) (string, error) {
	full, who, pr, rv := e.GetRepo().GetFullName(), e.GetSender(), e.GetPullRequest(), e.GetReview()
	s, c, ignored, err := h.reviewSession(ctx, full, who, pr, "review")
	if err != nil || ignored != "" {
		return ignored, err
	}
	comments, err := reviewParts(ctx, c, full, pr.GetNumber(), rv.GetID())
	if err != nil {
		return "", err
	}
	body := strings.TrimSpace(rv.GetBody())
	state := strings.ToLower(rv.GetState())
	switch {
	case body == "" && len(comments) == 1:
		return "ignored: a review of one comment (its comment's event sends it)", nil
	case body == "" && len(comments) == 0:
		return "ignored: a review with nothing to address (" + state + ")", nil
	case state == "approved" && len(comments) == 0:
		return "ignored: an approval with nothing to address", nil
	}
	var b strings.Builder
	how := map[string]string{"changes_requested": "requested changes on", "approved": "approved", "commented": "reviewed"}[state]
	if how == "" {
		how = "reviewed"
	}
	fmt.Fprintf(&b, "@%s %s your pull request #%d", who.GetLogin(), how, pr.GetNumber())
	if body != "" {
		fmt.Fprintf(&b, ":\n\n%s\n", quote(body))
	} else {
		b.WriteString(".\n")
	}
	if len(comments) > 0 {
		fmt.Fprintf(&b, "\nTheir %d comments on the diff:\n", len(comments))
		for i, cm := range comments {
			line := cm.GetLine()
			if line == 0 {
				line = cm.GetOriginalLine()
			}
			fmt.Fprintf(&b, "\n%d. On %s line %d:\n\n%s\n\n```diff\n%s\n```\n", i+1, cm.GetPath(), line, quote(cm.GetBody()), truncate(cm.GetDiffHunk(), 4000))
		}
	}
	b.WriteString("\nAddress the review: commit on your branch and push.")
	res, sent, err := h.followUp(ctx, d, s, who, b.String())
	if err != nil || !sent {
		if err == nil {
			res = "ignored: session " + s.ID + " ended"
		}
		return res, err
	}
	return fmt.Sprintf("sent the review (%d comments) to session %s", len(comments), s.ID), nil
}

// onReviewComment sends a review comment on a session's pull request to
// it, with where it was made, when it is its review's one comment (see
// the top of this file).
func (h *Hooks) onReviewComment(ctx context.Context, d *store.Delivery, e *github.PullRequestReviewCommentEvent) (string, error) {
	full, who, pr, cm := e.GetRepo().GetFullName(), e.GetSender(), e.GetPullRequest(), e.GetComment()
	s, c, ignored, err := h.reviewSession(ctx, full, who, pr, "review comment")
	if err != nil || ignored != "" {
		return ignored, err
	}
	owner, name := split(full)
	if rid := cm.GetPullRequestReviewID(); rid != 0 {
		rv, _, err := c.PullRequests.GetReview(ctx, owner, name, pr.GetNumber(), rid)
		if err != nil {
			return "", explain(err, fmt.Sprintf("reading review %d", rid))
		}
		comments, err := reviewParts(ctx, c, full, pr.GetNumber(), rid)
		if err != nil {
			return "", err
		}
		if strings.TrimSpace(rv.GetBody()) != "" || len(comments) > 1 {
			return fmt.Sprintf("ignored: part of review %d, which is sent whole by its own event", rid), nil
		}
	}
	if _, resp, err := c.Reactions.CreatePullRequestCommentReaction(ctx, owner, name, cm.GetID(), "eyes"); err != nil && (resp == nil || resp.StatusCode >= 500) {
		return "", explain(err, "reacting to the review comment")
	}
	line := cm.GetLine()
	if line == 0 {
		line = cm.GetOriginalLine()
	}
	text := fmt.Sprintf("@%s commented on your pull request #%d, on %s line %d:\n\n%s\n\nThe diff there:\n\n```diff\n%s\n```\n\nAddress it: commit on your branch and push.",
		who.GetLogin(), pr.GetNumber(), cm.GetPath(), line, quote(cm.GetBody()), cm.GetDiffHunk())
	if _, sent, err := h.followUp(ctx, d, s, who, text); err != nil || !sent {
		if err == nil {
			return "ignored: session " + s.ID + " ended", nil
		}
		return "", err
	}
	return "sent the review comment to session " + s.ID, nil
}

// onCheckSuite sends a failed check suite of a session's pull request to
// it, up to MaxFixAttempts times.
func (h *Hooks) onCheckSuite(ctx context.Context, d *store.Delivery, e *github.CheckSuiteEvent) (string, error) {
	cs := e.GetCheckSuite()
	switch cs.GetConclusion() {
	case "failure", "timed_out":
	default:
		return "ignored: check suite " + cs.GetConclusion(), nil
	}
	full := e.GetRepo().GetFullName()
	var s *store.Session
	var err error
	for _, pr := range cs.PullRequests {
		// A suite's pull requests are minimal: the head's repository has
		// an id, no name.
		if pr.GetHead().GetRepo().GetID() != e.GetRepo().GetID() {
			continue // a fork's
		}
		if s, err = h.branchSession(ctx, full, pr.GetHead().GetRef()); err != nil || s != nil {
			break
		}
	}
	if err == nil && s == nil {
		s, err = h.branchSession(ctx, full, cs.GetHeadBranch())
	}
	if err != nil {
		return "", err
	}
	if s == nil {
		return "ignored: no live session's pull request", nil
	}
	if h.cfg.MaxFixAttempts < 0 || (s.GitHub != nil && s.GitHub.FixAttempts >= h.cfg.MaxFixAttempts) {
		return fmt.Sprintf("ignored: session %s had its %d fix attempts", s.ID, max(h.cfg.MaxFixAttempts, 0)), nil
	}
	c, err := h.svc.gh.Client(repoScope(full))
	if err != nil {
		return "", err
	}
	owner, name := split(full)
	runs, _, err := c.Checks.ListCheckRunsCheckSuite(ctx, owner, name, cs.GetID(), &github.ListCheckRunsOptions{ListOptions: github.ListOptions{PerPage: 50}})
	if err != nil {
		return "", explain(err, "reading the check suite's runs")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "The checks on your pull request failed (commit %s):\n", shortSHA(cs.GetHeadSHA()))
	n := 0
	for _, r := range runs.CheckRuns {
		switch r.GetConclusion() {
		case "failure", "timed_out", "cancelled", "action_required":
		default:
			continue
		}
		n++
		o := r.GetOutput()
		fmt.Fprintf(&b, "\n### %s: %s\n%s\n", r.GetName(), r.GetConclusion(), quote(truncate(strings.TrimSpace(o.GetTitle()+"\n"+o.GetSummary()+"\n"+o.GetText()), 8000)))
	}
	if n == 0 {
		return "ignored: the check suite failed with no failed run", nil
	}
	b.WriteString("\nFix what fails, commit on your branch and push.")
	// An attempt is counted once its message is stored (here, or on the
	// session's node), and only by the processing that stored it: a retry
	// of this delivery (the send failed, or its node did not answer) or a
	// second processing of it (a redelivery) counts nothing more. A crash
	// between the send and the count leaves one attempt uncounted.
	key := "github-" + d.ID
	if _, err := h.st.MessageByKey(ctx, s.ID, Owner, key); err == nil {
		return fmt.Sprintf("session %s has the failed checks already (sent before)", s.ID), nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return "", err
	}
	m, err := h.sessions.SendMessage(ctx, "", s.ID, session.Outgoing{Text: b.String(), Key: key, Sender: Owner})
	if err != nil {
		return "", err
	}
	h.audit(ctx, store.AuditEntry{Action: "session.send", Target: s.ID, Result: store.AuditOK,
		Detail: auditDetail(map[string]any{"delivery": d.ID, "event": d.Event, "message": m.ID, "why": "failed checks"})})
	if _, err := h.st.UpdateSession(ctx, s.ID, func(st *store.Session) error {
		if st.GitHub == nil {
			st.GitHub = &store.GitHubLink{Repo: full}
		}
		st.GitHub.FixAttempts++
		return nil
	}); err != nil {
		h.log.Warn("counting a fix attempt (its message was sent)", "session", s.ID, "delivery", d.ID, "err", err)
	}
	return fmt.Sprintf("sent %d failed checks to session %s", n, s.ID), nil
}
