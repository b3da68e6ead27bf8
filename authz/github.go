package authz

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultTTL is how long GitHubPerms trusts GitHub's answer: a few
// minutes, so a list of many sessions does not ask GitHub for each, and a
// removed collaborator stops seeing the repository's sessions soon after.
const DefaultTTL = 3 * time.Minute

// maxEntries bounds the cache: past it, expired answers are dropped, then
// any.
const maxEntries = 20000

// ErrUnavailable is a level that could not be known (GitHub did not
// answer, or refused for a rate limit): the request that needs it is
// refused with 503, never allowed on a guess.
var ErrUnavailable = errors.New("access could not be checked")

// ErrDenied, wrapped in a GitHubCheck's error, is a refusal no retry
// changes (the app is not installed on the repository, or lacks the
// permission): the level is none, cached as an answer is, and the error
// says why.
var ErrDenied = errors.New("access denied")

// GitHubCheck asks GitHub for login's permission on repo ("owner/name")
// with the installation's token: GitHub's "permission" ("admin",
// "maintain", "write", "triage", "read", "none"; "" when GitHub does not
// know login there, a 404) and the id of the account it answered for. An
// error is GitHub not answering (5xx, a rate limit, the network).
type GitHubCheck func(ctx context.Context, repo, login string) (perm string, id int64, err error)

// GitHubPerms is GitHub's repository permissions of people, cached for TTL.
type GitHubPerms struct {
	check GitHubCheck
	ttl   time.Duration
	now   func() time.Time

	mu    sync.Mutex
	cache map[string]ghEntry
}

type ghEntry struct {
	level   Level
	why     string
	expires time.Time
}

// NewGitHubPerms caches check's answers for ttl (0: DefaultTTL) by the
// clock now (nil: time.Now).
func NewGitHubPerms(check GitHubCheck, ttl time.Duration, now func() time.Time) *GitHubPerms {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if now == nil {
		now = time.Now
	}
	return &GitHubPerms{check: check, ttl: ttl, now: now, cache: map[string]ghEntry{}}
}

// TTL is how long an answer is trusted.
func (g *GitHubPerms) TTL() time.Duration { return g.ttl }

// LevelOf maps GitHub's permission to a level.
func LevelOf(perm string) Level {
	switch perm {
	case "admin", "maintain", "write":
		return Write
	case "triage", "read":
		return Read
	}
	return None
}

// Level is the level of the GitHub account (numeric id subject, last seen
// as login) on repo: from the cache while its answer is younger than the
// TTL, else asked again. The account GitHub answers for must be the same
// one (a login renamed and taken by someone else since is none). A
// failure to ask is ErrUnavailable, whatever the cache held.
func (g *GitHubPerms) Level(ctx context.Context, repo, subject, login string) (Level, string, error) {
	key := strings.ToLower(repo) + "\x00" + subject
	now := g.now()
	g.mu.Lock()
	e, ok := g.cache[key]
	g.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.level, e.why, nil
	}
	perm, id, err := g.check(ctx, repo, login)
	denied := errors.Is(err, ErrDenied)
	if err != nil && !denied {
		return None, "", fmt.Errorf("checking @%s's access to %s on GitHub: %w: %w", login, repo, ErrUnavailable, err)
	}
	e = ghEntry{level: LevelOf(perm), expires: now.Add(g.ttl)}
	switch {
	case denied:
		e.why = "GitHub refused to say: " + err.Error()
	case perm == "" || perm == "none":
		e.why = "@" + login + " has no access to " + repo + " on GitHub"
	case strconv.FormatInt(id, 10) != subject:
		// GitHub answered for another account by that login.
		e.level, e.why = None, "GitHub's @"+login+" is no longer the account linked to you: sign in with GitHub again"
	default:
		e.why = "@" + login + " has " + perm + " access to " + repo + " on GitHub"
	}
	g.mu.Lock()
	if len(g.cache) >= maxEntries {
		for k, v := range g.cache {
			if !now.Before(v.expires) {
				delete(g.cache, k)
			}
		}
		for k := range g.cache {
			if len(g.cache) < maxEntries {
				break
			}
			delete(g.cache, k)
		}
	}
	g.cache[key] = e
	g.mu.Unlock()
	return e.level, e.why, nil
}
