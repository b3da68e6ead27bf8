package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/store"
)

// repoRootsHelp is --repo-root's: a directory, and who sees whose
// sessions there (package authz, "Directory repositories").
const repoRootsHelp = "a directory user tokens' sessions may copy repositories from (repeatable; without one, only the admin token may name directories); " +
	"after a ?, who reads and who writes the sessions on its repositories: DIR?read=role:viewer&write=team:backend,user:usr-ID (role:R is R and above; everyone; team:NAME, harvest team). " +
	"Without a policy each sees their own sessions there"

// splitRoots reads the --repo-root values: the directories (what package
// workspace's policy takes) and their policies.
func splitRoots(specs []string) ([]string, []authz.Root, error) {
	var paths []string
	var roots []authz.Root
	for _, spec := range specs {
		r, err := authz.ParseRoot(spec)
		if err != nil {
			return nil, nil, err
		}
		paths = append(paths, r.Path)
		roots = append(roots, r)
	}
	return paths, roots, nil
}

// serveAuthz is the server's rules of who sees what: the roots' policies,
// and GitHub's permissions when the server has a GitHub (cached for ttl).
func serveAuthz(st store.Store, roots []authz.Root, ghc *gh.GitHub, ttl time.Duration) (*authz.Resolver, error) {
	pol, err := authz.NewPolicy(roots)
	if err != nil {
		return nil, fmt.Errorf("--repo-root: %w", err)
	}
	cfg := authz.Config{Store: st, Policy: pol}
	if ghc != nil {
		cfg.GitHub = authz.NewGitHubPerms(githubCheck(ghc), ttl, nil)
	}
	return authz.NewResolver(cfg), nil
}

// githubCheck asks GitHub with ghc: a refusal no retry changes (the app
// not installed on the repository) is authz.ErrDenied, a level of none.
func githubCheck(ghc *gh.GitHub) authz.GitHubCheck {
	return func(ctx context.Context, repo, login string) (string, int64, error) {
		p, id, err := ghc.Permission(ctx, repo, login)
		if err != nil && gh.Permanent(err) {
			err = fmt.Errorf("%w: %w", authz.ErrDenied, err)
		}
		return p, id, err
	}
}
