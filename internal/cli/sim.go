package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/sim"
)

type simFlags struct {
	script   string
	listen   string
	record   string
	cassette string
	replay   string
	quiet    bool
}

func newSimCmd() *cobra.Command {
	var f simFlags
	cmd := &cobra.Command{
		Use:   "sim --script FILE | --replay CASSETTE | --record UPSTREAM --cassette FILE",
		Short: "Serve scripted model replies over the Anthropic and OpenAI APIs",
		Long: `Serve a model API from a script: POST /v1/messages (with count_tokens) as
Anthropic shapes it, and POST /v1/chat/completions as OpenAI does, streamed or
not, with tool calls, usage and injected errors. Point a client at it with its
base URL (http://HOST:PORT for Anthropic clients, http://HOST:PORT/v1 for
OpenAI ones) and any non-empty API key.

The script (YAML) says which reply answers which request; see
sim/README.md. Every request is logged to stderr and kept; GET /_sim/requests
returns them as JSON.

--record UPSTREAM proxies every request to a real API and writes each
exchange to --cassette (API keys redacted); --replay serves a cassette back.

Prints "harvest sim listening on http://HOST:PORT" once it accepts
connections; stops on SIGINT or SIGTERM. Exit status 2 for bad flags or a bad
script or cassette, 1 if serving fails.`,
		Example: `  harvest sim --script sim/examples/chat.yaml
  harvest sim --script task.yaml --listen 127.0.0.1:8080
  ANTHROPIC_BASE_URL=http://127.0.0.1:8080 ANTHROPIC_API_KEY=dummy claude -p hello
  harvest sim --record https://api.anthropic.com --cassette run.json
  harvest sim --replay run.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSim(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.script, "script", "", "the script to serve (YAML)")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:0", "address to listen on (port 0: any free port)")
	fl.StringVar(&f.record, "record", "", "proxy to this API (like https://api.anthropic.com) and record a cassette")
	fl.StringVar(&f.cassette, "cassette", "", "the cassette file --record writes")
	fl.StringVar(&f.replay, "replay", "", "serve this cassette instead of a script")
	fl.BoolVar(&f.quiet, "quiet", false, "do not log each request to stderr")
	cmd.AddCommand(newSimGitHubCmd())
	cmd.AddCommand(newSimSlackCmd())
	return cmd
}

// simServer builds the sim from the flags; errors are the user's to fix.
func simServer(f simFlags, logger *slog.Logger) (*sim.Server, string, error) {
	modes := 0
	for _, set := range []bool{f.script != "", f.replay != "", f.record != ""} {
		if set {
			modes++
		}
	}
	switch {
	case modes == 0:
		return nil, "", errors.New("nothing to serve: give --script FILE, --replay CASSETTE or --record UPSTREAM --cassette FILE")
	case modes > 1:
		return nil, "", errors.New("--script, --replay and --record exclude each other: give one")
	case f.record != "" && f.cassette == "":
		return nil, "", errors.New("--record needs --cassette FILE to write the recording to")
	case f.record == "" && f.cassette != "":
		return nil, "", errors.New("--cassette is the file --record writes; to serve a cassette use --replay FILE")
	}
	opts := []sim.Option{sim.WithLogger(logger)}
	switch {
	case f.record != "":
		u, err := url.Parse(f.record)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, "", fmt.Errorf("--record %q: give the API's base URL, like https://api.anthropic.com", f.record)
		}
		if st, err := os.Stat(filepath.Dir(f.cassette)); err != nil || !st.IsDir() {
			return nil, "", fmt.Errorf("--cassette %s: directory %s does not exist", f.cassette, filepath.Dir(f.cassette))
		}
		return sim.New(nil, append(opts, sim.WithRecord(u, f.cassette))...), "recording " + u.String() + " to " + f.cassette, nil
	case f.replay != "":
		c, err := sim.LoadCassette(f.replay)
		if err != nil {
			return nil, "", err
		}
		return sim.New(nil, append(opts, sim.WithReplay(c))...), fmt.Sprintf("replaying %s (%d interactions)", f.replay, len(c.Interactions)), nil
	}
	s, err := sim.LoadScript(f.script)
	if err != nil {
		return nil, "", err
	}
	return sim.New(s, opts...), fmt.Sprintf("script %s: %d rules, %s mode", f.script, len(s.Rules), s.Mode), nil
}

func runSim(cmd *cobra.Command, f simFlags) error {
	stderr := cmd.ErrOrStderr()
	var handler slog.Handler = slog.NewTextHandler(stderr, nil)
	if f.quiet {
		handler = slog.DiscardHandler
	}
	logger := slog.New(handler).With("component", "sim")
	srv, what, err := simServer(f, logger)
	if err != nil {
		return exitCode(2, err)
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return exitCode(1, fmt.Errorf("--listen %s: %w", f.listen, err))
	}

	// Handlers' contexts end at shutdown, so delays and slow streams stop
	// at once instead of holding the process up.
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	baseCtx, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		ErrorLog:          slog.NewLogLogger(handler, slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	fmt.Fprintf(cmd.OutOrStdout(), "harvest sim listening on http://%s\n", ln.Addr())
	logger.Info("serving", "what", what)

	select {
	case err := <-served:
		return exitCode(1, fmt.Errorf("serving: %w", err))
	case <-ctx.Done():
	}
	logger.Info("stopping")
	cancelBase()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return exitCode(1, fmt.Errorf("serving: %w", err))
	}
	return nil
}
