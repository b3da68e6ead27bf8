package ghbot

import (
	"strings"

	"github.com/google/go-github/v75/github"
)

// Pull requests from forks.
//
// A fork's pull request has its branch in the contributor's repository.
// Harvest's installation token is for the base repository only: it can
// neither push to the fork nor (for a private one) read it, and GitHub's
// "allow edits by maintainers" is for people, not for an App's token. So
// a mention on such a pull request never writes to the fork. It starts
// (or, later, continues: the pull request's thread is the session's) a
// session on a branch of the base repository, harvest/<N>-<slug>, that
// starts from the pull request's head as the base repository has it
// (refs/pull/N/head, fetched into the mirror with the base's token; the
// fork itself is never fetched). When the agent commits, Harvest pushes
// that branch and opens a pull request in the base repository, against
// the fork's pull request's base, saying that it builds on it: it carries
// the contributor's commits, and the session's after them. Only the
// commits after the head (store.Repo.From) count as the session's: a turn
// that commits nothing pushes nothing and opens nothing, and the comment
// says so. The anchors do the same in spirit: Copilot's coding agent
// answers a mention on a person's pull request with a child pull request
// of its own rather than pushing to theirs; claude-code-action checks
// out refs/pull/N/head for a fork's.
//
// The fork's contents are untrusted input like any pull request's: they
// reach the box as files of a clone whose .git the agent writes; no
// credential for the fork exists anywhere.

// forkOf reports whether pr (nil: not a pull request) has its branch
// outside repo, and names the fork ("owner/name"; GitHub sends a null
// head repository when the fork was deleted).
func forkOf(repo string, pr *github.PullRequest) (string, bool) {
	if pr == nil {
		return "", false
	}
	hr := pr.GetHead().GetRepo().GetFullName()
	if strings.EqualFold(hr, repo) {
		return "", false
	}
	if hr == "" {
		hr = "(a deleted fork)"
	}
	return hr, true
}

// isPullRef reports whether ref is a pull request's head as the base
// repository has it (refs/pull/N/head), which the mirror fetches on its
// own: its usual fetch takes branches and tags only.
func isPullRef(ref string) bool {
	return strings.HasPrefix(ref, "refs/pull/") && strings.HasSuffix(ref, "/head")
}
