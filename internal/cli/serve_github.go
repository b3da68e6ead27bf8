package cli

import (
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/ghbot"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/workspace"
)

// githubFlags are harvest serve's GitHub settings: files, never secrets on
// the command line.
type githubFlags struct {
	files     gh.Files
	publicURL string
	hooks     ghbot.HookConfig
	// What people see (ghbot.Config).
	commitAuthor  string
	showCost      bool
	prLabels      []string
	progressEvery time.Duration
	mirrorRefresh time.Duration
	userRole      string
	// permissionTTL is how long GitHub's answer about a person's access
	// to a repository is trusted (package authz).
	permissionTTL time.Duration
}

func (g *githubFlags) add(fl *pflag.FlagSet) {
	fl.Int64Var(&g.files.AppID, "github-app-id", 0, "GitHub App id: sessions on GitHub repositories (repos[].github), tokens minted per session")
	fl.StringVar(&g.files.PrivateKeyFile, "github-app-key", "", "the GitHub App's private key file (.pem, mode 0600)")
	fl.StringVar(&g.files.TokenFile, "github-token-file", "", "instead of an app: a file holding a personal access token (mode 0600)")
	fl.StringVar(&g.files.WebhookSecretFile, "github-webhook-secret-file", "", "a file holding the webhook secret (mode 0600): deliveries to /v1/github/webhook are checked with it")
	fl.StringVar(&g.files.APIURL, "github-api-url", "", "GitHub's REST API (default https://api.github.com/; GitHub Enterprise: https://HOST/api/v3/)")
	fl.StringVar(&g.files.WebURL, "github-url", "", "GitHub's web and git address (default https://github.com/)")
	fl.StringVar(&g.hooks.Agent, "github-agent", "", "agent of the sessions GitHub starts (default the server's; a comment may say agent:NAME)")
	fl.StringVar(&g.hooks.Model, "github-model", "", "model of the sessions GitHub starts (default --model)")
	fl.StringVar(&g.hooks.Label, "github-label", "", "an issue label that starts a session (default none: only mentions and assignment)")
	fl.IntVar(&g.hooks.MaxFixAttempts, "github-fix-attempts", 3, "failed check suites of a session's pull request sent to it (0: none)")
	fl.StringArrayVar(&g.hooks.Repos, "github-repo", nil, "a repository (owner/name, or owner/*) whose events Harvest acts on (repeatable; default all the app is installed on)")
	fl.DurationVar(&g.hooks.IdleTimeout, "github-idle-timeout", 0, "suspend a session GitHub started after this long idle (default the server's, 5m); the next mention, review or failed check on its thread resumes it")
	fl.BoolVar(&g.hooks.KeepBranches, "github-keep-branches", false, "keep the branch of a session whose pull request is closed without being merged (default: delete the branches Harvest made)")
	fl.StringArrayVar(&g.hooks.Users, "github-user", nil, "a person who may ask Harvest (repeatable; default anyone with write access)")
	fl.StringVar(&g.commitAuthor, "github-commit-author", ghbot.AuthorBot, "who authors a session's commits: bot (the app's bot, the person who asked credited by a Co-authored-by trailer) or requester (the person who asked, as before)")
	fl.BoolVar(&g.showCost, "github-show-cost", false, "show what a session's turns cost in its GitHub comments")
	fl.StringArrayVar(&g.prLabels, "github-pr-label", nil, "a label added to every pull request Harvest opens (repeatable; made in the repository when missing)")
	fl.DurationVar(&g.progressEvery, "github-progress-every", ghbot.DefaultProgressEvery, "least time between two edits of a progress comment while a turn runs")
	fl.DurationVar(&g.mirrorRefresh, "github-mirror-refresh", 5*time.Minute, "how often the mirrors of repositories with live sessions or recent activity are fetched in the background (and after a push event), so a session's checkout needs no fetch; 0: every checkout fetches")
	fl.StringVar(&g.userRole, "github-user-role", "member", "the role of a GitHub account that becomes a Harvest user when it first starts a session: member or viewer (harvest user set-role changes it later)")
	fl.DurationVar(&g.permissionTTL, "github-permission-ttl", authz.DefaultTTL, "how long GitHub's answer about a person's access to a repository is trusted before it is asked again: who sees which session follows it (a removed collaborator stops seeing the repository's sessions within it)")
	fl.StringVar(&g.publicURL, "public-url", "", "where people reach this server (https://harvest.example.com), for links in pull requests and comments")
}

// forge builds the GitHub side when any GitHub flag is set; nil when none
// is.
func (g *githubFlags) forge(data string, clone workspace.CloneOptions, logger *slog.Logger) (*ghbot.Service, *gh.GitHub, error) {
	if !g.files.Set() {
		return nil, nil, nil
	}
	cfg, err := g.files.Load()
	if err != nil {
		return nil, nil, err
	}
	if g.hooks.MaxFixAttempts < 0 {
		return nil, nil, fmt.Errorf("--github-fix-attempts %d: 0 or more", g.hooks.MaxFixAttempts)
	}
	if g.hooks.IdleTimeout < 0 {
		return nil, nil, fmt.Errorf("--github-idle-timeout %s: give a positive duration (or leave it out for the server's)", g.hooks.IdleTimeout)
	}
	if g.hooks.MaxFixAttempts == 0 {
		g.hooks.MaxFixAttempts = -1 // HookConfig: negative is none
	}
	for _, r := range g.hooks.Repos {
		owner, name, ok := strings.Cut(r, "/")
		if !ok || owner == "" || name == "" || (name != "*" && !session.ForgeRepo(r)) {
			return nil, nil, fmt.Errorf("--github-repo %q: give owner/name or owner/*", r)
		}
	}
	switch g.commitAuthor {
	case ghbot.AuthorBot, ghbot.AuthorRequester:
	default:
		return nil, nil, fmt.Errorf("--github-commit-author %q: give %s or %s", g.commitAuthor, ghbot.AuthorBot, ghbot.AuthorRequester)
	}
	if g.progressEvery < time.Second {
		return nil, nil, fmt.Errorf("--github-progress-every %s: give 1s or more (each edit is a request against the installation's rate limit)", g.progressEvery)
	}
	for _, l := range g.prLabels {
		if strings.TrimSpace(l) == "" || len(l) > 50 {
			return nil, nil, fmt.Errorf("--github-pr-label %q: give a label name of 1 to 50 characters", l)
		}
	}
	if g.publicURL != "" {
		if err := checkHTTPURL(g.publicURL); err != nil {
			return nil, nil, fmt.Errorf("--public-url %q: %w", g.publicURL, err)
		}
	}
	switch store.Role(g.userRole) {
	case store.RoleMember, store.RoleViewer:
		g.hooks.DefaultRole = store.Role(g.userRole)
	default:
		return nil, nil, fmt.Errorf("--github-user-role %q: give member or viewer (an admin is made by harvest user set-role)", g.userRole)
	}
	if g.mirrorRefresh < 0 {
		return nil, nil, fmt.Errorf("--github-mirror-refresh %s: 0 or more", g.mirrorRefresh)
	}
	cfg.Logger = logger.With("component", "github")
	gc, err := gh.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	svc, err := ghbot.New(ghbot.Config{
		GitHub: gc, Mirrors: &workspace.Mirrors{Dir: filepath.Join(data, "mirrors"), Opts: clone},
		BaseURL: g.publicURL, Logger: logger, MirrorRefresh: g.mirrorRefresh,
		CommitAuthor: g.commitAuthor, ShowCost: g.showCost, PRLabels: g.prLabels, ProgressEvery: g.progressEvery,
	})
	if err != nil {
		return nil, nil, err
	}
	return svc, gc, nil
}

// checkHTTPURL accepts an absolute http(s) URL without credentials.
func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("give an absolute http(s) URL")
	}
	if u.User != nil {
		return fmt.Errorf("the URL must not carry credentials")
	}
	return nil
}
