package gh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/go-github/v75/github"
)

// The repositories the app's installations cover (a picker of them, in
// Slack): GET /app/installations with the app's JWT, then GET
// /installation/repositories of each installation that is not suspended,
// with a token of its own (metadata: read, every repository), both
// paginated by 100. The list is cached for reposTTL and dropped with the
// installations' other facts (ForgetInstallation, ForgetRepos,
// ForgetAccount: the installation and installation_repositories events),
// and made once however many ask at the same moment.

const (
	// reposTTL is how long the list of installed repositories is
	// trusted without an installation event.
	reposTTL = 2 * time.Minute
	// maxInstalled bounds the repositories listed (and maxPages the
	// pages of each list asked for): past it the list says it is cut.
	maxInstalled = 2000
	maxPages     = 20
)

// Installed is the repositories the app's installations cover.
type Installed struct {
	// Repos are "owner/name", sorted (case-insensitively).
	Repos []string
	// Cut says there are more than Repos (maxInstalled).
	Cut bool
}

type reposEntry struct {
	done  chan struct{}
	list  Installed
	err   error
	until time.Time
}

// listScope is a token for listing an installation's repositories:
// metadata, read, on every repository it covers.
var listScope = Scope{Permissions: map[string]string{"metadata": "read"}}

// InstalledRepos is the repositories the app's installations cover (a
// token, not an app: an error). A person waits for it: it never waits
// for a rate-limit window (NoWait), a *RateLimitedError says when to try
// again. An error is not cached.
func (g *GitHub) InstalledRepos(ctx context.Context) (Installed, error) {
	if g.key == nil {
		return Installed{}, errors.New("gh: Harvest is configured with a token, not an app: it has no installations to list")
	}
	for {
		g.mu.Lock()
		e := g.repoList
		if e != nil {
			select {
			case <-e.done:
				if e.err == nil && g.now().Before(e.until) {
					g.mu.Unlock()
					return e.list, nil
				}
				e = nil
			default:
			}
		}
		if e == nil {
			e = &reposEntry{done: make(chan struct{})}
			g.repoList = e
			g.mu.Unlock()
			e.list, e.err = g.listInstalled(ctx)
			e.until = g.now().Add(reposTTL)
			g.mu.Lock()
			if e.err != nil && g.repoList == e {
				g.repoList = nil
			}
			g.mu.Unlock()
			close(e.done)
			return e.list, e.err
		}
		g.mu.Unlock()
		select {
		case <-e.done:
			if e.err != nil {
				return Installed{}, e.err
			}
			return e.list, nil
		case <-ctx.Done():
			return Installed{}, context.Cause(ctx)
		}
	}
}

// dropRepoList forgets the list of installed repositories. Called with
// g.mu held.
func (g *GitHub) dropRepoList() { g.repoList = nil }

// listInstalled asks GitHub for the installed repositories.
func (g *GitHub) listInstalled(ctx context.Context) (Installed, error) {
	ctx = NoWait(ctx)
	app, err := g.AppClient()
	if err != nil {
		return Installed{}, err
	}
	var insts []*github.Installation
	var out Installed
	opts := &github.ListOptions{PerPage: 100}
	for p := 1; ; p++ {
		page, resp, err := app.Apps.ListInstallations(ctx, opts)
		if err != nil {
			return Installed{}, explain(err, "listing the app's installations")
		}
		insts = append(insts, page...)
		if resp.NextPage == 0 {
			break
		}
		if p == maxPages {
			out.Cut = true
			break
		}
		opts.Page = resp.NextPage
	}
	seen := map[string]bool{}
	for _, in := range insts {
		id := in.GetID()
		if in.SuspendedAt != nil || g.checkSuspended(ctx, id) != nil {
			continue // nothing may be done there
		}
		c, err := g.newClient(&transport{g: g, base: g.baseTransport(), auth: func(ctx context.Context, fresh bool) (string, string, error) {
			t, err := g.cachedToken(ctx, id, listScope, fresh)
			return InstallationScope(id), "token " + t.Value, err
		}})
		if err != nil {
			return Installed{}, err
		}
		opts := &github.ListOptions{PerPage: 100}
		for p := 1; ; p++ {
			page, resp, err := c.Apps.ListRepos(ctx, opts)
			if err != nil {
				return Installed{}, explain(err, fmt.Sprintf("listing the repositories of installation %d (%s)", id, in.GetAccount().GetLogin()))
			}
			for _, r := range page.Repositories {
				n := r.GetFullName()
				if n == "" || seen[strings.ToLower(n)] {
					continue
				}
				if len(out.Repos) == maxInstalled {
					out.Cut = true
					break
				}
				seen[strings.ToLower(n)] = true
				out.Repos = append(out.Repos, n)
			}
			if out.Cut || resp.NextPage == 0 {
				break
			}
			if p == maxPages {
				out.Cut = true
				break
			}
			opts.Page = resp.NextPage
		}
	}
	slices.SortFunc(out.Repos, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	return out, nil
}
