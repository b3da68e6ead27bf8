package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/slack-go/slack"
	"github.com/spf13/pflag"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/server/cluster"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/slackbot"
	"github.com/harvest-dev/harvest/store"
)

// slackFlags are harvest serve's Slack settings: files, never secrets on
// the command line.
type slackFlags struct {
	botTokenFile, appTokenFile, signingSecretFile string
	apiURL, agent, model                          string
	updateEvery                                   time.Duration
	connections                                   int
	// app is the Slack app once started: sessions' agents get its
	// slack_update (hostMCP), those recovered before it starts included
	// when their agent starts after.
	app *atomic.Pointer[slackbot.Bot]
}

// hostMCP is session.Config.HostMCP: the Slack app's servers for a
// session, once the app runs.
func (s *slackFlags) hostMCP(sess *store.Session) []agent.MCPServer {
	if b := s.app.Load(); b != nil {
		return b.MCPServers(sess)
	}
	return nil
}

// hostMCPNames are the names of the Slack app's host MCP servers, when
// it is on: reserved for every session (session.Config.HostMCPNames).
func (s *slackFlags) hostMCPNames() []string {
	if s.botTokenFile == "" {
		return nil
	}
	return []string{slackbot.MCPName}
}

// slackSecretFlags are the flags naming secret files (redacted in
// --print-config).
var slackSecretFlags = []string{"slack-bot-token-file", "slack-app-token-file", "slack-signing-secret-file"}

func (s *slackFlags) add(fl *pflag.FlagSet) {
	s.app = &atomic.Pointer[slackbot.Bot]{}
	fl.StringVar(&s.botTokenFile, "slack-bot-token-file", "", "a file holding the Slack app's bot token (xoxb-, mode 0600): Harvest's Slack app, a mention or a direct message starts a session in its thread")
	fl.StringVar(&s.appTokenFile, "slack-app-token-file", "", "a file holding the Slack app's app-level token (xapp-, connections:write, mode 0600): events over Socket Mode (no public URL needed; the default way)")
	fl.StringVar(&s.signingSecretFile, "slack-signing-secret-file", "", "a file holding the Slack app's signing secret (mode 0600): events, clicks and /harvest over HTTP at POST /v1/slack/events instead of (or besides) Socket Mode")
	fl.StringVar(&s.apiURL, "slack-api-url", "", "Slack's Web API (default https://slack.com/api/; harvest sim slack's http://127.0.0.1:PORT/api/)")
	fl.StringVar(&s.agent, "slack-agent", "", "agent of the sessions Slack starts (default the server's)")
	fl.StringVar(&s.model, "slack-model", "", "model of the sessions Slack starts (default --model)")
	fl.IntVar(&s.connections, "slack-connections", 2, "Socket Mode connections the Slack app keeps, 1 to 10 (Slack allows 10 an app; each envelope comes on one, so one that is cut loses nothing while another is open)")
	fl.DurationVar(&s.updateEvery, "slack-update-every", time.Second, "least time between two edits of a channel's progress messages (Slack allows chat.update about once a second per channel)")
}

// appRepos lists the repositories a GitHub App's installations cover,
// for the Slack picker (nil without an App).
func appRepos(ghc *gh.GitHub) func(context.Context) ([]string, bool, error) {
	if ghc == nil || !ghc.IsApp() {
		return nil
	}
	return func(ctx context.Context) ([]string, bool, error) {
		in, err := ghc.InstalledRepos(ctx)
		return in.Repos, in.Cut, err
	}
}

// start builds and starts the Slack app when --slack-bot-token-file is
// given (nil when not).
// With several nodes (node not nil), a reply or a Stop for a session
// another node owns is sent there as this node's token (server/cluster's
// Sessions, as the API forwards them), and the thread's watcher runs on
// the session's owner (slackbot: "Several nodes").
func (s *slackFlags) start(ctx context.Context, st slackbot.Store, mgr *session.Manager, node *session.NodeConfig, nodeTok *cluster.Token,
	access *authz.Resolver, roots []string, github bool, installed func(context.Context) ([]string, bool, error), publicURL string, logger *slog.Logger) (*slackbot.Bot, error) {
	if s.botTokenFile == "" {
		if s.appTokenFile != "" || s.signingSecretFile != "" {
			return nil, fmt.Errorf("--slack-app-token-file and --slack-signing-secret-file need --slack-bot-token-file (the bot's xoxb- token)")
		}
		return nil, nil
	}
	if s.appTokenFile == "" && s.signingSecretFile == "" {
		return nil, fmt.Errorf("--slack-bot-token-file needs --slack-app-token-file (Socket Mode) or --slack-signing-secret-file (HTTP events at /v1/slack/events)")
	}
	if s.connections < 1 || s.connections > 10 {
		return nil, fmt.Errorf("--slack-connections %d: give 1 to 10 (Slack allows 10 Socket Mode connections an app)", s.connections)
	}
	if s.updateEvery < 100*time.Millisecond {
		return nil, fmt.Errorf("--slack-update-every %s: give 1s or so (each edit is a chat.update, about one a second per channel)", s.updateEvery)
	}
	bot, err := secretFromFileOrEnv(s.botTokenFile, "slack-bot-token-file", "")
	if err != nil {
		return nil, err
	}
	opts := []slack.Option{}
	if s.apiURL != "" {
		if err := checkHTTPURL(s.apiURL); err != nil {
			return nil, fmt.Errorf("--slack-api-url %q: %w", s.apiURL, err)
		}
		u := s.apiURL
		if !strings.HasSuffix(u, "/") {
			u += "/"
		}
		opts = append(opts, slack.OptionAPIURL(u))
	}
	var app, secret string
	if s.appTokenFile != "" {
		if app, err = secretFromFileOrEnv(s.appTokenFile, "slack-app-token-file", ""); err != nil {
			return nil, err
		}
		opts = append(opts, slack.OptionAppLevelToken(app))
	}
	if s.signingSecretFile != "" {
		if secret, err = secretFromFileOrEnv(s.signingSecretFile, "slack-signing-secret-file", ""); err != nil {
			return nil, err
		}
	}
	var sessions slackbot.Sessions = mgr
	var nodeID string
	if node != nil {
		sessions, nodeID = cluster.NewSessions(mgr, nodeTok, node.ID, logger), node.ID
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := slackbot.New(cctx, slackbot.Config{
		API: slack.New(bot, opts...), SocketMode: app != "", Connections: s.connections, SigningSecret: secret,
		Store: st, Sessions: sessions, Access: access, RepoRoots: roots, GitHub: github, Installed: installed, PublicURL: publicURL,
		Agent: s.agent, Model: s.model, UpdateEvery: s.updateEvery, Logger: logger, Node: nodeID,
	})
	if err != nil {
		return nil, err
	}
	if err := b.Start(); err != nil {
		b.Close()
		return nil, err
	}
	s.app.Store(b)
	return b, nil
}
