package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/sim/slacksim"
)

type simSlackFlags struct {
	listen        string
	users         []string
	channels      []string
	requestURL    string
	interURL      string
	commandURL    string
	signingSecret string
	ackTimeout    time.Duration
	quiet         bool
}

func newSimSlackCmd() *cobra.Command {
	var f simSlackFlags
	cmd := &cobra.Command{
		Use:   "slack [--user NAME[=EMAIL]]... [--channel NAME]... [--request-url URL]",
		Short: "Serve a Slack stand-in: the Web API, Socket Mode and signed HTTP events",
		Long: `Serve a stand-in for Slack (package sim/slacksim): the Web API methods Harvest
uses at /api/<method> (point slack-go at http://HOST:PORT/api/ with
slack.OptionAPIURL, Bolt with clientOptions.slackApiUrl), Socket Mode through
apps.connections.open, or, with --request-url, events, button clicks and slash
commands POSTed there signed with the signing secret. Rate limits answer 429
with Retry-After. State lives in memory.

At start it makes one workspace with the app's bot, each --user (with the
email users.info gives, if NAME=EMAIL) and each --channel (default: general),
every user and the bot in every channel, and prints the bot token (xoxb-),
the app-level token (xapp-), the signing secret and the ids. Act as people
(post, mention, reply, click, run a slash command) and as Slack (disconnect,
drop, 429 storms) through the JSON endpoints under /_sim/slack/ (see
sim/slacksim/README.md).

Prints "harvest sim slack listening on http://HOST:PORT" last, once it is
ready; stops on SIGINT or SIGTERM. Exit status 2 for bad flags, 1 if serving
fails.`,
		Example: `  harvest sim slack --user alice=alice@example.com --channel general
  harvest sim slack --user alice --request-url http://127.0.0.1:7777/v1/slack/events --signing-secret s3cret`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSimSlack(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:0", "address to listen on (port 0: any free port)")
	fl.StringArrayVar(&f.users, "user", nil, "NAME or NAME=EMAIL: a person in the workspace (repeatable)")
	fl.StringArrayVar(&f.channels, "channel", nil, "a channel, with every user and the bot in it (repeatable; default general)")
	fl.StringVar(&f.requestURL, "request-url", "", "POST events, clicks and commands here (http or https URL) instead of Socket Mode")
	fl.StringVar(&f.interURL, "interactivity-url", "", "POST button clicks here instead of --request-url")
	fl.StringVar(&f.commandURL, "command-url", "", "POST slash commands here instead of --request-url")
	fl.StringVar(&f.signingSecret, "signing-secret", "", "the signing secret (default: generated)")
	fl.DurationVar(&f.ackTimeout, "ack-timeout", 3*time.Second, "how long an envelope or HTTP delivery may wait for its ack")
	fl.BoolVar(&f.quiet, "quiet", false, "do not log each request to stderr")
	return cmd
}

type slackUserFlag struct{ name, email string }

// checkSimSlackFlags validates the flags; errors are the user's to fix.
func checkSimSlackFlags(f simSlackFlags) ([]slackUserFlag, error) {
	if f.ackTimeout <= 0 {
		return nil, fmt.Errorf("--ack-timeout %s: must be positive", f.ackTimeout)
	}
	for _, fl := range []struct{ name, value string }{{"--request-url", f.requestURL}, {"--interactivity-url", f.interURL}, {"--command-url", f.commandURL}} {
		if fl.value == "" {
			continue
		}
		u, err := url.Parse(fl.value)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%s %q: give an http or https URL", fl.name, fl.value)
		}
		if fl.name != "--request-url" && f.requestURL == "" {
			return nil, fmt.Errorf("%s needs --request-url (Socket Mode carries everything)", fl.name)
		}
	}
	if f.signingSecret != "" && f.requestURL == "" {
		return nil, errors.New("--signing-secret needs --request-url (Socket Mode does not sign)")
	}
	var users []slackUserFlag
	for _, u := range f.users {
		name, email, _ := strings.Cut(u, "=")
		if name == "" {
			return nil, fmt.Errorf("--user %q: want NAME or NAME=EMAIL", u)
		}
		users = append(users, slackUserFlag{name, email})
	}
	return users, nil
}

func runSimSlack(cmd *cobra.Command, f simSlackFlags) error {
	users, err := checkSimSlackFlags(f)
	if err != nil {
		return exitCode(2, err)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var handler slog.Handler = slog.NewTextHandler(cmd.ErrOrStderr(), nil)
	if f.quiet {
		handler = slog.DiscardHandler
	}
	logger := slog.New(handler).With("component", "sim-slack")
	srv, err := slacksim.Start(slacksim.Options{Listen: f.listen, Logger: logger, RequestURL: f.requestURL,
		InteractivityURL: f.interURL, CommandURL: f.commandURL, SigningSecret: f.signingSecret, AckTimeout: f.ackTimeout})
	if err != nil {
		return exitCode(1, fmt.Errorf("--listen %s: %w", f.listen, err))
	}
	defer srv.Close()
	out := cmd.OutOrStdout()
	tok := srv.Tokens()
	fmt.Fprintf(out, "team %s app %s bot user %s bot id %s\n", tok.TeamID, tok.AppID, tok.BotUserID, tok.BotID)
	fmt.Fprintf(out, "bot token %s\napp token %s\nsigning secret %s\n", tok.Bot, tok.App, tok.SigningSecret)
	var ids []string
	for _, u := range users {
		got, err := srv.AddUser(slacksim.UserSpec{Name: u.name, Email: u.email})
		if err != nil {
			return exitCode(2, fmt.Errorf("--user: %w", err))
		}
		ids = append(ids, got.ID)
		fmt.Fprintf(out, "user %s %s %s\n", got.Name, got.ID, got.Email)
	}
	channels := f.channels
	if len(channels) == 0 {
		channels = []string{"general"}
	}
	for _, c := range channels {
		got, err := srv.AddChannel(slacksim.ChannelSpec{Name: c, Members: ids})
		if err != nil {
			return exitCode(2, fmt.Errorf("--channel: %w", err))
		}
		fmt.Fprintf(out, "channel #%s %s\n", got.Name, got.ID)
	}
	mode := "socket mode"
	if f.requestURL != "" {
		mode = "events to " + f.requestURL
	}
	fmt.Fprintf(out, "delivery: %s\n", mode)
	// Last, once everything is set up: a script waits for this line.
	fmt.Fprintf(out, "harvest sim slack listening on %s\n", srv.URL())
	<-ctx.Done()
	logger.Info("stopping")
	if err := srv.Close(); err != nil {
		return exitCode(1, fmt.Errorf("stopping: %w", err))
	}
	return nil
}
