package ghbot

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/store"
)

// marker tags the progress comment of a session, so it is found again
// rather than made twice.
func marker(session string) string { return "<!-- harvest-session: " + session + " -->" }

// progressComment finds or makes the progress comment of session on an
// issue or pull request, and returns its id.
func (h *Hooks) progressComment(ctx context.Context, c *github.Client, repo string, num int, session string) (int64, error) {
	owner, name := split(repo)
	mk := marker(session)
	opts := &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100}}
	for {
		cs, resp, err := c.Issues.ListComments(ctx, owner, name, num, opts)
		if err != nil {
			return 0, explain(err, "reading the comments of #"+fmt.Sprint(num))
		}
		for _, cm := range cs {
			if strings.Contains(cm.GetBody(), mk) {
				return cm.GetID(), nil
			}
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	cm, _, err := c.Issues.CreateComment(ctx, owner, name, num, &github.IssueComment{Body: github.Ptr(h.svc.progressBody(session, "👀 On it.", ""))})
	if err != nil {
		return 0, explain(err, "commenting on #"+fmt.Sprint(num))
	}
	return cm.GetID(), nil
}

// editProgress rewrites a progress comment.
func (h *Hooks) editProgress(ctx context.Context, c *github.Client, repo string, id int64, session, status string) {
	owner, name := split(repo)
	if _, _, err := c.Issues.EditComment(ctx, owner, name, id, &github.IssueComment{Body: github.Ptr(h.svc.progressBody(session, status, ""))}); err != nil {
		h.log.Warn("editing the progress comment", "session", session, "err", err)
	}
}

// reply comments on an issue or pull request once per delivery (found by
// its marker when the delivery is processed again).
func (h *Hooks) reply(ctx context.Context, c *github.Client, repo string, num int, delivery, text string) error {
	owner, name := split(repo)
	mk := "<!-- harvest-delivery: " + delivery + " -->"
	cs, _, err := c.Issues.ListComments(ctx, owner, name, num, &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100}})
	if err != nil {
		return explain(err, "reading the comments of #"+fmt.Sprint(num))
	}
	for _, cm := range cs {
		if strings.Contains(cm.GetBody(), mk) {
			return nil
		}
	}
	_, _, err = c.Issues.CreateComment(ctx, owner, name, num, &github.IssueComment{Body: github.Ptr(text + "\n\n" + mk)})
	return explain(err, "replying on #"+fmt.Sprint(num))
}

// progressBody is the progress comment's text: a status line, details,
// the session's link, the marker.
func (s *Service) progressBody(session, status, details string) string {
	var b strings.Builder
	b.WriteString(status)
	if details != "" {
		b.WriteString("\n\n" + details)
	}
	if s.cfg.BaseURL != "" {
		fmt.Fprintf(&b, "\n\nHarvest session [%s](%s/sessions/%s)", session, strings.TrimRight(s.cfg.BaseURL, "/"), session)
	} else {
		fmt.Fprintf(&b, "\n\nHarvest session `%s`", session)
	}
	b.WriteString("\n\n" + marker(session))
	return b.String()
}

// updateProgress edits the progress comment of a session started on
// GitHub at the end of a turn: how it ended, the summary, the pull
// request, the cost so far.
func (s *Service) updateProgress(ctx context.Context, sess *store.Session, out agent.Outcome) error {
	l := sess.GitHub
	if l == nil || l.Progress == 0 {
		return nil
	}
	var status, details string
	switch {
	case out.Finished != nil:
		status = "✅ Done."
		details = quoteBlock(truncate(strings.TrimSpace(out.Finished.Result), 4000))
	case out.Failed != nil:
		status = "❌ The turn failed (" + string(out.Failed.Kind) + "): " + truncate(out.Failed.Error, 500)
	case out.Cancelled != nil:
		status = "⏹️ Stopped: " + out.Cancelled.Reason
	default:
		status = "…"
	}
	var prs []string
	for _, r := range sess.Repos {
		if r.PRURL != "" {
			prs = append(prs, fmt.Sprintf("Pull request: %s", r.PRURL))
		}
	}
	if len(prs) > 0 {
		details = strings.TrimSpace(details + "\n\n" + strings.Join(prs, "\n"))
	}
	details = strings.TrimSpace(details + fmt.Sprintf("\n\nCost so far: $%.4f", sess.CostUSD))
	c, err := s.gh.Client(repoScope(l.Repo))
	if err != nil {
		return err
	}
	owner, name := split(l.Repo)
	_, _, err = c.Issues.EditComment(ctx, owner, name, l.Progress, &github.IssueComment{Body: github.Ptr(s.progressBody(sess.ID, status, details))})
	return explain(err, "editing the progress comment")
}

func quoteBlock(s string) string {
	if s == "" {
		return ""
	}
	return quote(s)
}

// Ended edits the progress comment of a session that failed or stopped:
// it says so, and why, with its pull requests and cost.
func (s *Service) Ended(ctx context.Context, sess *store.Session) error {
	l := sess.GitHub
	if l == nil || l.Progress == 0 {
		return nil
	}
	status := "⏹️ The session stopped."
	if sess.State == store.StateFailed {
		status = "❌ The session failed: " + truncate(sess.Error, 500)
	}
	var details []string
	for _, r := range sess.Repos {
		if r.PRURL != "" {
			details = append(details, "Pull request: "+r.PRURL)
		}
	}
	details = append(details, fmt.Sprintf("Cost: $%.4f", sess.CostUSD))
	c, err := s.gh.Client(repoScope(l.Repo))
	if err != nil {
		return err
	}
	owner, name := split(l.Repo)
	_, _, err = c.Issues.EditComment(ctx, owner, name, l.Progress, &github.IssueComment{Body: github.Ptr(s.progressBody(sess.ID, status, strings.Join(details, "\n\n")))})
	return explain(err, "editing the progress comment")
}
