package authz

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// Store is what a Resolver reads of the store: a user's identities (the
// GitHub account whose permissions count) and teams.
type Store interface {
	Identities(ctx context.Context, user string) ([]*store.Identity, error)
	UserTeams(ctx context.Context, user string) ([]string, error)
}

// Config is what a Resolver decides with.
type Config struct {
	// Store reads users' identities and teams (required).
	Store Store
	// Policy is the directory roots' policies (nil: every directory
	// repository is unshared).
	Policy *Policy
	// GitHub is GitHub's permissions (nil: this server has no GitHub, and
	// a GitHub repository grants no one anything).
	GitHub *GitHubPerms
	// Recheck is how often a long access (an open event stream) to
	// someone else's session is checked again (default: GitHub's TTL, or
	// DefaultTTL without a GitHub).
	Recheck time.Duration
}

// Resolver finds subjects' levels on sessions and repositories.
type Resolver struct{ cfg Config }

// NewResolver returns the Resolver of cfg.
func NewResolver(cfg Config) *Resolver { return &Resolver{cfg: cfg} }

// Recheck is how often a long access to someone else's session is
// checked again (Config.Recheck).
func (r *Resolver) Recheck() time.Duration {
	switch {
	case r.cfg.Recheck > 0:
		return r.cfg.Recheck
	case r.cfg.GitHub != nil:
		return r.cfg.GitHub.TTL()
	}
	return DefaultTTL
}

// Shared says whether anyone may see another's session through a
// repository: a GitHub or a root with a policy. When not, only their
// users and the admins see sessions, and a list needs no repository's
// level.
func (r *Resolver) Shared() bool { return r.cfg.GitHub != nil || r.cfg.Policy.Shared() }

// For is a Checker for sub, for one request: it reads sub's identities
// and teams once, when first needed, and each repository's grant once.
// It is not safe for concurrent use.
func (r *Resolver) For(sub Subject) *Checker {
	return &Checker{r: r, sub: sub, grants: map[RepoRef]Grant{}}
}

// RepoRef names a repository as the rules see it: a GitHub repository
// ("owner/name"), else a directory on the server (absolute), else
// something else (a git URL: unshared).
type RepoRef struct {
	GitHub string
	Dir    string
	// Name is how a message names it.
	Name string
}

// RefOf is a session's repository as the rules see it.
func RefOf(r store.Repo) RepoRef {
	if r.GitHub != "" {
		return RepoRef{GitHub: r.GitHub, Name: r.GitHub}
	}
	dir := r.Origin
	if dir == "" {
		dir = r.Source
	}
	if filepath.IsAbs(dir) {
		return RepoRef{Dir: dir, Name: r.Source}
	}
	return RepoRef{Name: r.Source}
}

// Checker finds one subject's levels (Resolver.For).
type Checker struct {
	r      *Resolver
	sub    Subject
	loaded bool
	github *store.Identity
	teams  []string
	grants map[RepoRef]Grant
}

// Subject is who the checker checks.
func (c *Checker) Subject() Subject { return c.sub }

func (c *Checker) load(ctx context.Context) error {
	if c.loaded || c.sub.User == "" {
		return nil
	}
	ids, err := c.r.cfg.Store.Identities(ctx, c.sub.User)
	if err != nil {
		return fmt.Errorf("reading the identities of %s: %w", c.sub.User, err)
	}
	for _, i := range ids {
		if i.Kind == store.IdentityGitHub && i.Issuer == "" {
			c.github = i
		}
	}
	if c.r.cfg.Policy.Shared() {
		if c.teams, err = c.r.cfg.Store.UserTeams(ctx, c.sub.User); err != nil {
			return fmt.Errorf("reading the teams of %s: %w", c.sub.User, err)
		}
	}
	c.loaded = true
	return nil
}

// Repo is the subject's grant on one repository.
func (c *Checker) Repo(ctx context.Context, ref RepoRef) (Grant, error) {
	if g, ok := c.grants[ref]; ok {
		return g, nil
	}
	g, err := c.repo(ctx, ref)
	if err != nil {
		return Grant{}, err
	}
	c.grants[ref] = g
	return g, nil
}

func (c *Checker) repo(ctx context.Context, ref RepoRef) (Grant, error) {
	// What starting a session there takes from a member of an unshared
	// repository: their role (a viewer's is read).
	unshared := Grant{Level: c.sub.limit(), Why: "a viewer only reads"}
	switch {
	case ref.GitHub != "":
		if c.r.cfg.GitHub == nil {
			return Grant{Shared: true, Why: "this server has no GitHub"}, nil
		}
		if err := c.load(ctx); err != nil {
			return Grant{}, err
		}
		if c.github == nil {
			return Grant{Shared: true, Why: "you have no GitHub account linked to Harvest: sign in with GitHub, so that GitHub's permissions on " + ref.GitHub + " can be yours"}, nil
		}
		l, why, err := c.r.cfg.GitHub.Level(ctx, ref.GitHub, c.github.Subject, c.github.Login)
		if err != nil {
			return Grant{}, err
		}
		return Grant{Level: l, Shared: true, Why: why}, nil
	case ref.Dir != "":
		rules, root := c.r.cfg.Policy.rulesFor(resolveDir(ref.Dir))
		if rules == nil {
			return unshared, nil
		}
		if err := c.load(ctx); err != nil {
			return Grant{}, err
		}
		l, by := rules.level(c.sub.User, c.sub.Role, c.teams)
		why := "the policy of " + root + " names you for " + l.String() + " (" + by + ")"
		if l == None {
			why = "the policy of " + root + " does not name you"
		}
		return Grant{Level: l, Shared: true, Why: why}, nil
	}
	return unshared, nil
}

// Session is the subject's level on s.
func (c *Checker) Session(ctx context.Context, s *store.Session) (Level, error) {
	own := c.sub.Owns(s)
	if c.sub.Admin || own || len(s.Repos) == 0 {
		return Session(c.sub, own, nil), nil
	}
	grants := make([]Grant, 0, len(s.Repos))
	for _, r := range s.Repos {
		g, err := c.Repo(ctx, RefOf(r))
		if err != nil {
			return None, err
		}
		if !g.Shared || g.Level == None {
			// The lowest already: no need to ask about the others.
			return None, nil
		}
		grants = append(grants, g)
	}
	return Session(c.sub, own, grants), nil
}

// Start says whether the subject may start a session on refs (nil, or
// the refusal); an error that is ErrUnavailable or the store's is the
// second result.
func (c *Checker) Start(ctx context.Context, refs []RepoRef) (refusal, err error) {
	if c.sub.Admin {
		return nil, nil
	}
	if r := Start(c.sub, nil, nil); r != nil {
		return r, nil // a viewer: no repository needs asking
	}
	grants := make([]Grant, len(refs))
	names := make([]string, len(refs))
	for i, ref := range refs {
		if grants[i], err = c.Repo(ctx, ref); err != nil {
			return nil, err
		}
		names[i] = ref.Name
	}
	return Start(c.sub, names, grants), nil
}
