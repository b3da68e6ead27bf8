package store

import (
	"context"
	"fmt"
	"strings"
)

// One branch, one session. Two agents pushing to one branch of one
// repository undo each other's work, so a live session holds the branch of
// each of its GitHub repositories (Repo.GitHub, Repo.Branch) until it ends,
// and the store refuses a second live session on a branch held: the rule
// is the database's (a claim row whose primary key is the repository and
// the branch), so two nodes, or two webhook deliveries processed at the
// same instant, cannot both start one.
//
//   - CreateSession claims the branches of the new session in the same
//     transaction as its row. A branch another live session holds is a
//     *BranchHeldError (ErrConflict), and nothing is written.
//   - UpdateSession that moves a session to an ended state (stopped,
//     failed) releases its claims in the same transaction; DeleteSession
//     removes them with the row.
//   - BranchSession says which live session holds a branch.
//
// Repository names are compared without regard to case (GitHub's are
// case-insensitive); branch names exactly (git's are not).

// BranchKey is one claimed branch: Repo is "owner/name" in lower case.
type BranchKey struct {
	Repo, Branch string
}

// BranchKeys are the branches a session holds while it is live: one per
// GitHub repository with a branch. Both implementations claim exactly
// these.
func BranchKeys(s *Session) []BranchKey {
	var out []BranchKey
	for _, r := range s.Repos {
		if r.GitHub == "" || r.Branch == "" {
			continue
		}
		k := BranchKey{Repo: strings.ToLower(r.GitHub), Branch: r.Branch}
		dup := false
		for _, o := range out {
			dup = dup || o == k
		}
		if !dup {
			out = append(out, k)
		}
	}
	return out
}

// BranchHeldError is ErrConflict: a live session (Session) already works
// on the branch. The caller sends what it wanted to that session instead
// of starting another.
type BranchHeldError struct {
	Repo, Branch, Session string
}

func (e *BranchHeldError) Error() string {
	return fmt.Sprintf("branch %s of %s is worked on by session %s (one live session per branch): send it a message instead", e.Branch, e.Repo, e.Session)
}

func (e *BranchHeldError) Unwrap() error { return ErrConflict }

// Branches is the part of a Store that says who holds a branch.
type Branches interface {
	// BranchSession is the id of the live session that holds branch of
	// repo ("owner/name", any case), or ErrNotFound.
	BranchSession(ctx context.Context, repo, branch string) (string, error)
}
