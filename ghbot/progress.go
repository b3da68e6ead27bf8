package ghbot

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-github/v75/github"

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

func quoteBlock(s string) string {
	if s == "" {
		return ""
	}
	return quote(s)
}

// Ended adds the end of a session that failed or stopped to its progress
// comment: that it ended, and why, with its pull requests and cost.
func (s *Service) Ended(ctx context.Context, sess *store.Session) error {
	defer s.forget(sess.ID)
	d := s.doc(sess)
	if d == nil {
		return nil
	}
	text := "### ⏹️ The session stopped."
	if sess.State == store.StateFailed {
		text = "### ❌ The session failed\n\n" + quote(truncate(sess.Error, 1000))
	}
	for _, r := range sess.Repos {
		if r.PRURL != "" {
			text += "\n\nPull request: " + r.PRURL
		}
	}
	if s.cfg.ShowCost {
		text += fmt.Sprintf("\n\nCost: $%.4f", sess.CostUSD)
	}
	c, err := s.gh.Client(repoScope(d.repo))
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return s.setSection(ctx, c, d, "end", func(int) string { return text })
}
