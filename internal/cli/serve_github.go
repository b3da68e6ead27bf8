package cli

import (
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/ghbot"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/workspace"
)

// githubFlags are harvest serve's GitHub settings: files, never secrets on
// the command line.
type githubFlags struct {
	files     gh.Files
	publicURL string
}

func (g *githubFlags) add(fl *pflag.FlagSet) {
	fl.Int64Var(&g.files.AppID, "github-app-id", 0, "GitHub App id: sessions on GitHub repositories (repos[].github), tokens minted per session")
	fl.StringVar(&g.files.PrivateKeyFile, "github-app-key", "", "the GitHub App's private key file (.pem, mode 0600)")
	fl.StringVar(&g.files.TokenFile, "github-token-file", "", "instead of an app: a file holding a personal access token (mode 0600)")
	fl.StringVar(&g.files.WebhookSecretFile, "github-webhook-secret-file", "", "a file holding the webhook secret (mode 0600): deliveries to /v1/github/webhook are checked with it")
	fl.StringVar(&g.files.APIURL, "github-api-url", "", "GitHub's REST API (default https://api.github.com/; GitHub Enterprise: https://HOST/api/v3/)")
	fl.StringVar(&g.files.WebURL, "github-url", "", "GitHub's web and git address (default https://github.com/)")
	fl.StringVar(&g.publicURL, "public-url", "", "where people reach this server (https://harvest.example.com), for links in pull requests and comments")
}

// forge builds the GitHub side when any GitHub flag is set; nil when none
// is.
func (g *githubFlags) forge(data string, clone workspace.CloneOptions, logger *slog.Logger) (session.Forge, *gh.GitHub, error) {
	if !g.files.Set() {
		return nil, nil, nil
	}
	cfg, err := g.files.Load()
	if err != nil {
		return nil, nil, err
	}
	if g.publicURL != "" {
		if err := checkHTTPURL(g.publicURL); err != nil {
			return nil, nil, fmt.Errorf("--public-url %q: %w", g.publicURL, err)
		}
	}
	gc, err := gh.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	svc, err := ghbot.New(ghbot.Config{
		GitHub: gc, Mirrors: &workspace.Mirrors{Dir: filepath.Join(data, "mirrors"), Opts: clone},
		BaseURL: g.publicURL, Logger: logger,
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
