package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/sim/ghsim"
)

type simGitHubFlags struct {
	listen     string
	state      string
	app        string
	appID      int64
	privateKey string
	webhookURL string
	secret     string
	installOn  []string
	repos      []string
	users      []string
	tokenTTL   time.Duration
	quiet      bool
}

func newSimGitHubCmd() *cobra.Command {
	var f simGitHubFlags
	cmd := &cobra.Command{
		Use:   "github --state DIR [--repo OWNER/NAME=DIR]... [--user LOGIN]...",
		Short: "Serve a GitHub stand-in: REST, git over HTTP, App auth and webhooks",
		Long: `Serve a stand-in for GitHub (package sim/ghsim): the REST operations Harvest
uses (at /api/v3 and at the root), git over smart HTTP, GitHub App JWTs and
installation tokens, and webhooks to --webhook-url. State lives in memory;
--state DIR (new or empty) holds the bare repositories and the App's private
key (DIR/app.pem, mode 0600).

At start it registers the App --app, installs it on each --install-on
account (default: the owners of --repo), creates each --repo from a local
directory (its git history, or one commit of its files) and adds each --user
with admin on every repo, printing their tokens. Drive it further through
the JSON endpoints under /_sim/github/ (see sim/ghsim/README.md).

Prints what it set up, then, last, "harvest sim github listening on
http://HOST:PORT" once it is ready; stops on SIGINT or SIGTERM. Exit status 2 for bad flags, 1 if
serving fails.`,
		Example: `  harvest sim github --state /tmp/gh --repo acme/widget=. --user alice \
      --webhook-url http://127.0.0.1:7777/v1/github/webhook --webhook-secret s3cret`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSimGitHub(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:0", "address to listen on (port 0: any free port)")
	fl.StringVar(&f.state, "state", "", "directory (new or empty) for the bare repositories and the App key")
	fl.StringVar(&f.app, "app", "harvest-dev", "the App's slug")
	fl.Int64Var(&f.appID, "app-id", 0, "the App's id (0: assigned)")
	fl.StringVar(&f.privateKey, "private-key", "", "the App's private key (PEM); default: generate one into --state")
	fl.StringVar(&f.webhookURL, "webhook-url", "", "where to deliver webhooks (http or https URL)")
	fl.StringVar(&f.secret, "webhook-secret", "", "the webhook secret (signs X-Hub-Signature-256)")
	fl.StringSliceVar(&f.installOn, "install-on", nil, "accounts to install the App on (default: the --repo owners)")
	fl.StringArrayVar(&f.repos, "repo", nil, "OWNER/NAME=DIR: a repository from a local directory (repeatable)")
	fl.StringArrayVar(&f.users, "user", nil, "a person with a token and admin on every --repo (repeatable)")
	fl.DurationVar(&f.tokenTTL, "token-ttl", time.Hour, "lifetime of installation tokens")
	fl.BoolVar(&f.quiet, "quiet", false, "do not log each request to stderr")
	return cmd
}

type repoFlag struct{ owner, name, dir string }

// checkSimGitHubFlags validates the flags; errors are the user's to fix.
func checkSimGitHubFlags(f simGitHubFlags) ([]repoFlag, error) {
	if f.state == "" {
		return nil, errors.New("--state DIR is required: a new or empty directory for the repositories and the App key")
	}
	if ents, err := os.ReadDir(f.state); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("--state %s: not empty; give a new or empty directory", f.state)
	} else if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("--state %s: %w", f.state, err)
	}
	if f.tokenTTL <= 0 {
		return nil, fmt.Errorf("--token-ttl %s: must be positive", f.tokenTTL)
	}
	if f.webhookURL != "" {
		u, err := url.Parse(f.webhookURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--webhook-url %q: give an http or https URL", f.webhookURL)
		}
	}
	if f.secret != "" && f.webhookURL == "" {
		return nil, errors.New("--webhook-secret needs --webhook-url")
	}
	if f.privateKey != "" {
		b, err := os.ReadFile(f.privateKey)
		if err != nil {
			return nil, fmt.Errorf("--private-key: %w", err)
		}
		if _, err := ghsim.ParsePrivateKey(b); err != nil {
			return nil, fmt.Errorf("--private-key %s: %w", f.privateKey, err)
		}
	}
	var repos []repoFlag
	for _, r := range f.repos {
		full, dir, ok := strings.Cut(r, "=")
		owner, name, ok2 := strings.Cut(full, "/")
		if !ok || !ok2 || owner == "" || name == "" || dir == "" {
			return nil, fmt.Errorf("--repo %q: want OWNER/NAME=DIR", r)
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("--repo %s: %s is not a directory", full, dir)
		}
		repos = append(repos, repoFlag{owner, name, dir})
	}
	return repos, nil
}

func runSimGitHub(cmd *cobra.Command, f simGitHubFlags) error {
	repos, err := checkSimGitHubFlags(f)
	if err != nil {
		return exitCode(2, err)
	}
	// Before anything is printed: a signal right after the ready line
	// must stop it cleanly, not kill it.
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stderr := cmd.ErrOrStderr()
	var handler slog.Handler = slog.NewTextHandler(stderr, nil)
	if f.quiet {
		handler = slog.DiscardHandler
	}
	logger := slog.New(handler).With("component", "sim-github")
	state, err := filepath.Abs(f.state)
	if err != nil {
		return exitCode(2, err)
	}
	srv, err := ghsim.Start(ghsim.Options{Listen: f.listen, Dir: state, TokenTTL: f.tokenTTL, Logger: logger})
	if err != nil {
		return exitCode(1, fmt.Errorf("--listen %s: %w", f.listen, err))
	}
	defer srv.Close()
	out := cmd.OutOrStdout()
	if err := setUpSimGitHub(cmd.Context(), srv, f, repos, state, out); err != nil {
		return exitCode(2, err)
	}
	// Last, once everything is set up: a script waits for this line.
	fmt.Fprintf(out, "harvest sim github listening on %s\n", srv.URL())

	<-ctx.Done()
	logger.Info("stopping")
	if err := srv.Close(); err != nil {
		return exitCode(1, fmt.Errorf("stopping: %w", err))
	}
	return nil
}

func setUpSimGitHub(ctx context.Context, srv *ghsim.Server, f simGitHubFlags, repos []repoFlag, state string, out interface{ Write([]byte) (int, error) }) error {
	spec := ghsim.AppSpec{ID: f.appID, Slug: f.app, WebhookURL: f.webhookURL, WebhookSecret: f.secret}
	if f.privateKey != "" {
		b, _ := os.ReadFile(f.privateKey)
		spec.PrivateKeyPEM = string(b)
	}
	app, err := srv.CreateApp(spec)
	if err != nil {
		return fmt.Errorf("--app: %w", err)
	}
	keyNote := "from " + f.privateKey
	if f.privateKey == "" {
		keyPath := filepath.Join(state, "app.pem")
		if err := os.WriteFile(keyPath, []byte(app.PrivateKeyPEM), 0o600); err != nil {
			return err
		}
		keyNote = "written to " + keyPath + " (0600)"
	}
	fmt.Fprintf(out, "app %s id %d, private key %s\n", app.Slug, app.ID, keyNote)
	accounts := f.installOn
	if len(accounts) == 0 {
		for _, r := range repos {
			if !containsString(accounts, r.owner) {
				accounts = append(accounts, r.owner)
			}
		}
	}
	for _, a := range accounts {
		id, err := srv.CreateInstallation(ghsim.InstallationSpec{AppID: app.ID, Account: a})
		if err != nil {
			return fmt.Errorf("--install-on: %w", err)
		}
		fmt.Fprintf(out, "installation %d on %s\n", id, a)
	}
	for _, r := range repos {
		got, err := srv.CreateRepo(ctx, ghsim.RepoSpec{Owner: r.owner, Name: r.name, Dir: r.dir, Private: true})
		if err != nil {
			return fmt.Errorf("--repo: %w", err)
		}
		fmt.Fprintf(out, "repo %s (default branch %s) at %s\n", got.FullName, got.DefaultBranch, got.CloneURL)
	}
	for _, login := range f.users {
		u, err := srv.AddUser(ghsim.UserSpec{Login: login})
		if err != nil {
			return fmt.Errorf("--user: %w", err)
		}
		for _, r := range repos {
			if err := srv.SetPermission(ghsim.PermissionSpec{Repo: r.owner + "/" + r.name, Login: login, Permission: ghsim.PermAdmin}); err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "user %s token %s\n", u.Login, u.Token)
	}
	return nil
}

func containsString(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
