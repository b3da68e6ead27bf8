package ghbot

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// stopTimeout bounds waiting for a session to stop (its running turn is
// cancelled, its box destroyed).
const stopTimeout = 2 * time.Minute

// onPRClosed ends the session of a pull request that was merged or closed:
// pr.merged or pr.closed, then the session stops (its box is freed, its
// branch free for a new session). A pull request closed without being
// merged also loses its branch, when the session made it (not a person's
// branch it adopted) and the server does not keep branches.
func (h *Hooks) onPRClosed(ctx context.Context, d *store.Delivery, e *github.PullRequestEvent) (string, error) {
	full, pr, who := e.GetRepo().GetFullName(), e.GetPullRequest(), e.GetSender()
	branch := pr.GetHead().GetRef()
	if !strings.EqualFold(pr.GetHead().GetRepo().GetFullName(), full) {
		return "ignored: a fork's pull request", nil
	}
	s, err := h.branchSession(ctx, full, branch)
	if err != nil {
		return "", err
	}
	merged := pr.GetMerged()
	var ended *store.Session
	if s != nil {
		req := session.StopRequest{}
		if merged {
			req.Reason = fmt.Sprintf("pull request #%d was merged by @%s: the work is done", pr.GetNumber(), who.GetLogin())
			req.Event = event.PRMerged{Repo: full, Number: pr.GetNumber(), URL: pr.GetHTMLURL(), Branch: branch, By: who.GetLogin(), SHA: pr.GetMergeCommitSHA()}
		} else {
			req.Reason = fmt.Sprintf("pull request #%d was closed by @%s without being merged", pr.GetNumber(), who.GetLogin())
			req.Event = event.PRClosed{Repo: full, Number: pr.GetNumber(), URL: pr.GetHTMLURL(), Branch: branch, By: who.GetLogin()}
		}
		sctx, cancel := context.WithTimeout(ctx, stopTimeout)
		err := h.sessions.Stop(sctx, "", s.ID, req)
		cancel()
		if err != nil && !errors.Is(err, session.ErrConflict) {
			return "", err
		}
		ended = s
	} else {
		// Processed before (the session stopped, the branch may be left
		// to delete), or no session of ours: the session that last held
		// the branch, if it was Harvest's.
		if ended, err = h.lastBranchSession(ctx, full, pr.GetNumber(), branch); err != nil {
			return "", err
		}
		if ended == nil {
			return "ignored: no session of Harvest's works on this pull request", nil
		}
	}
	what := "merged"
	if !merged {
		what = "closed"
	}
	res := fmt.Sprintf("pull request %s: session %s ended", what, ended.ID)
	if merged || h.cfg.KeepBranches || !madeBranch(ended, full, branch) {
		return res, nil
	}
	c, err := h.svc.gh.Client(repoScope(full))
	if err != nil {
		return "", err
	}
	owner, name := split(full)
	resp, err := c.Git.DeleteRef(ctx, owner, name, "heads/"+branch)
	switch {
	case err == nil:
		return res + "; deleted branch " + branch, nil
	case resp != nil && (resp.StatusCode == http.StatusUnprocessableEntity || resp.StatusCode == http.StatusNotFound):
		return res + "; branch " + branch + " was gone already", nil
	}
	return "", explain(err, "deleting branch "+branch)
}

// madeBranch reports whether session s made branch of repo (it started
// it from another ref), rather than adopting a pull request's.
func madeBranch(s *store.Session, repo, branch string) bool {
	for _, r := range s.Repos {
		if strings.EqualFold(r.GitHub, repo) && r.Branch == branch {
			return r.Ref != r.Branch
		}
	}
	return false
}

// lastBranchSession finds the ended session of Harvest's that worked on
// branch of repo for pull request num (nil: none).
func (h *Hooks) lastBranchSession(ctx context.Context, repo string, num int, branch string) (*store.Session, error) {
	ss, err := h.st.ListSessions(ctx, store.SessionFilter{Owner: Owner, Limit: 1000})
	if err != nil {
		return nil, err
	}
	for _, s := range ss {
		for _, r := range s.Repos {
			if strings.EqualFold(r.GitHub, repo) && r.Branch == branch && (r.PRNumber == num || r.PRNumber == 0) {
				return s, nil
			}
		}
	}
	return nil, nil
}
