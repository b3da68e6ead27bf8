package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/egress"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
	"github.com/harvest-dev/harvest/workspace"
)

// Exit codes of the commands that talk to a server.
const exitRequestFailed = 1 // the server refused (not found, conflict, ...) or could not be reached

// connFlags say which server to talk to, as whom.
type connFlags struct {
	server string
	data   string
}

func (c *connFlags) register(cmd *cobra.Command) {
	fl := cmd.PersistentFlags()
	fl.StringVar(&c.server, "server", "", "Harvest server URL (default $HARVEST_SERVER, else http://"+DefaultListen+")")
	fl.StringVar(&c.data, "data", "", "data directory of a local harvest serve, for its admin-token (default $HARVEST_HOME, else ~/.harvest)")
}

// serverURL is --server, else $HARVEST_SERVER, else the default address.
func (c *connFlags) serverURL() string {
	switch {
	case c.server != "":
		return c.server
	case os.Getenv("HARVEST_SERVER") != "":
		return os.Getenv("HARVEST_SERVER")
	}
	return "http://" + DefaultListen
}

// token is $HARVEST_TOKEN, else DATA/admin-token.
func (c *connFlags) token() (string, error) {
	if t := strings.TrimSpace(os.Getenv("HARVEST_TOKEN")); t != "" {
		return t, nil
	}
	data, err := serverDataDir(c.data)
	if err != nil {
		return "", err
	}
	p := filepath.Join(data, adminTokenFile)
	b, err := os.ReadFile(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("no token: set HARVEST_TOKEN to a token (harvest token create NAME makes one), or run where harvest serve keeps %s (--data DIR)", p)
		}
		return "", fmt.Errorf("reading the admin token: %w (set HARVEST_TOKEN instead)", err)
	}
	return string(bytes.TrimSpace(b)), nil
}

func (c *connFlags) client() (*client.Client, error) {
	tok, err := c.token()
	if err != nil {
		return nil, err
	}
	cl, err := client.New(c.serverURL(), tok, nil)
	if err == nil {
		cl.SetUserAgent(client.CLIUserAgent + Version) // the audit log's cli channel
	}
	return cl, err
}

// open is what every session command starts with: a client for the
// server (exit 2 when there is no token or the URL is bad), and a context
// cancelled by SIGINT or SIGTERM.
func (c *connFlags) open(cmd *cobra.Command) (*client.Client, context.Context, context.CancelFunc, error) {
	cl, err := c.client()
	if err != nil {
		return nil, nil, nil, exitCode(2, err)
	}
	ctx, cancel := signalContext(cmd.Context())
	return cl, ctx, cancel, nil
}

// apiErr is the exit of a failed request: its message, exit 1.
func apiErr(err error) error {
	if err == nil {
		return nil
	}
	var ce *client.Error
	if errors.As(err, &ce) && len(ce.Details) > 1 {
		return exitCode(exitRequestFailed, fmt.Errorf("%s:\n  %s", strings.SplitN(ce.Message, ":", 2)[0], strings.Join(ce.Details, "\n  ")))
	}
	return exitCode(exitRequestFailed, err)
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

func newSessionCmd() *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Start, talk to and manage sessions on a Harvest server",
		Long: `Sessions live in harvest serve: each is a conversation with an agent on one
or more repositories, in its own sandbox, that outlives this command.

The server is --server, else $HARVEST_SERVER, else http://` + DefaultListen + `.
The token is $HARVEST_TOKEN, else the admin token that harvest serve keeps in
DATA/admin-token (--data, else $HARVEST_HOME, else ~/.harvest).

Exit status: 0 done, 1 the server refused or could not be reached (with
new/send --follow: also a turn that failed or was cancelled), 2 bad usage,
130 Ctrl-C during new/send --follow (logs -f ends with 0).`,
	}
	conn.register(cmd)
	cmd.AddCommand(
		newSessionNewCmd(&conn), newSessionLsCmd(&conn), newSessionShowCmd(&conn), newSessionSendCmd(&conn),
		newSessionCancelCmd(&conn), newSessionLogsCmd(&conn), newSessionRmCmd(&conn), newSessionCleanupCmd(&conn),
		newSessionUnlockCmd(&conn), newSessionInfoCmd(&conn),
	)
	return cmd
}

type newFlags struct {
	repos       []string
	title       string
	agent       string
	model       string
	backend     string
	mode        string
	idleTimeout time.Duration
	maxLifetime time.Duration
	watchdog    time.Duration
	memory      string
	disk        diskFlags
	maxSteps    int
	budget      float64
	follow      bool
	json        bool
	workflow    string
	collab      string
	terminal    terminalFlags
	egress      string
	pr          string
	mcp         mcpFlags
}

func newSessionNewCmd(conn *connFlags) *cobra.Command {
	var f newFlags
	cmd := &cobra.Command{
		Use:   "new --repo PATH [flags] [PROMPT]",
		Short: "Create a session; with PROMPT its first turn starts at once",
		Long: `Create a session on one or more repositories and print its id. With PROMPT
("-" reads it from stdin) the agent starts on it at once; without, the
session waits for a message (harvest session send).

--repo is a directory on the server's machine (copied; the original is never
written), a git URL (cloned), or OWNER/NAME, a repository on the server's
GitHub (github:OWNER/NAME when a directory has that name): the session works
on branch harvest/SESSION, its git push goes through Harvest, and a turn that
pushed opens a pull request (--pr draft, the default; ready; none). Repeat
--repo for several repositories.
With --follow, the session's events are shown until the first turn ends.

--workflow puts the session in one of your workflows, sharing its
repositories with the workflow's other sessions. --collaboration sequential
(the default) works in the workflow's one workspace, one session's turns at a
time; parallel gives the session a copy on a branch of its own
(harvest/WORKFLOW/SESSION) and runs at once. A sequential session sees the
parallel copies read-only at /runs/SESSION/REPO, to merge their branches.

--mcp and --mcp-stdio give the session's agent MCP servers besides the
server's and the repository's .mcp.json: a remote one's headers come from
Harvest secrets only (--mcp-secret; set them with harvest secret set), added
on the host, never in the box.`,
		Example: `  harvest session new --repo . "Fix the failing test"
  harvest session new --repo acme/api --pr ready "Fix issue 12"
  harvest session new --repo ~/src/api --repo ~/src/web --title "login flow" -f "Add SSO"
  harvest session new --repo . --workflow review --collaboration parallel "Check for SQL injection"
  harvest session new --repo . --mcp github=https://api.githubcopilot.com/mcp/ \
      --mcp-secret github:Authorization=GITHUB_MCP --mcp-stdio lint='python3 tools/lint_mcp.py' "Triage issue 7"`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(f.repos) == 0 {
				return errors.New(`no repository: give --repo DIR (or a git URL), like: harvest session new --repo . "Fix the failing test"`)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := f.request(cmd, args)
			if err != nil {
				return exitCode(2, err)
			}
			c, ctx, cancel, err := conn.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			v, err := c.CreateSession(ctx, req)
			if err != nil {
				return apiErr(err)
			}
			if f.json {
				printJSON(cmd.OutOrStdout(), v)
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), v.ID)
				fmt.Fprintf(cmd.ErrOrStderr(), "harvest: session %s is %s; follow it with: harvest session logs -f %s\n", v.ID, v.State, v.ID)
			}
			if f.follow && req.Prompt != "" && len(v.Queue) > 0 {
				return followTurn(ctx, cmd, c, v.ID, v.Queue[0].ID, 0, f.json)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.repos, "repo", nil, "repository: a directory on the server's machine or a git URL (repeatable)")
	fl.StringVar(&f.title, "title", "", "a title to list the session by")
	fl.StringVar(&f.pr, "pr", "", "for GitHub repositories: the pull request a turn that pushed opens: draft (default), ready or none")
	fl.StringVar(&f.agent, "agent", "", "the agent: builtin (default), claudecode, terminal (Claude Code's TUI, or --command, in a PTY) or opencode")
	fl.StringVar(&f.model, "model", "", "model as provider/model (default: the server's)")
	fl.StringVar(&f.backend, "backend", "", "sandbox backend (default: the server's)")
	fl.StringVar(&f.mode, "mode", "", "messages sent while the agent works: queue (default) or interrupt")
	fl.DurationVar(&f.idleTimeout, "idle-timeout", 0, "suspend the session after this long idle (default: the server's, 5m)")
	fl.DurationVar(&f.maxLifetime, "max-lifetime", 0, "stop the session after this long (default: the server's, 24h)")
	fl.DurationVar(&f.watchdog, "turn-watchdog", 0, "fail a turn with no progress for this long (default: the server's, 30m)")
	fl.StringVar(&f.memory, "memory", "", "memory limit of the sandbox, like 4g (default: the server's, 6g)")
	f.disk.add(fl, "the server's, 20g")
	fl.IntVar(&f.maxSteps, "max-steps", 0, "most model calls per turn")
	fl.Float64Var(&f.budget, "budget", 0, "most USD per turn")
	fl.StringVar(&f.workflow, "workflow", "", "share the repositories with your other sessions of this workflow")
	fl.StringVar(&f.collab, "collaboration", "", "in a workflow: sequential (default: one workspace, one run at a time) or parallel (own copy and branch)")
	fl.BoolVarP(&f.follow, "follow", "f", false, "show the events until the first turn ends")
	fl.BoolVar(&f.json, "json", false, "print the session (and events) as JSON")
	fl.StringVar(&f.egress, "egress", "", `narrow the server's egress allowlist for this session: hosts (comma-separated, "registries" for the package registries) the server allows, or "none" for no way out (default: the server's)`)
	f.terminal.add(cmd)
	f.mcp.add(fl)
	return cmd
}

func (f newFlags) request(cmd *cobra.Command, args []string) (wire.CreateRequest, error) {
	req := wire.CreateRequest{Title: f.title, Agent: f.agent, Model: f.model, Backend: f.backend, Mode: f.mode,
		Workflow: f.workflow, Collaboration: f.collab}
	switch {
	case f.collab != "" && f.workflow == "":
		return req, errors.New("--collaboration needs --workflow: it says how the session shares the workflow's repositories")
	case f.collab != "" && f.collab != wire.Sequential && f.collab != wire.Parallel:
		return req, fmt.Errorf("--collaboration %q: use sequential or parallel", f.collab)
	case f.idleTimeout < 0, f.maxLifetime < 0, f.watchdog < 0:
		return req, errors.New("--idle-timeout, --max-lifetime and --turn-watchdog must be positive")
	case f.maxSteps < 0:
		return req, fmt.Errorf("--max-steps %d: must be positive", f.maxSteps)
	case f.budget < 0:
		return req, fmt.Errorf("--budget %v: must be positive (USD)", f.budget)
	case f.mode != "" && f.mode != session.ModeQueue && f.mode != session.ModeInterrupt:
		return req, fmt.Errorf("--mode %q: use queue or interrupt", f.mode)
	}
	term, err := f.terminal.spec(f.agent)
	if err != nil {
		return req, err
	}
	req.Terminal = term
	if req.MCPServers, err = f.mcp.servers(); err != nil {
		return req, err
	}
	switch e := strings.TrimSpace(f.egress); e {
	case "":
	case "none":
		req.Egress = &[]string{}
	default:
		hosts := egress.Expand(strings.Split(e, ","))
		if len(hosts) == 0 {
			return req, errors.New(`--egress: give hosts (comma-separated), "registries", or "none"`)
		}
		req.Egress = &hosts
	}
	req.Limits = store.Limits{IdleTimeout: f.idleTimeout, MaxLifetime: f.maxLifetime, TurnWatchdog: f.watchdog, MaxSteps: f.maxSteps, BudgetUSD: f.budget}
	if f.memory != "" {
		n, err := sandbox.ParseSize(f.memory)
		if err != nil {
			return req, fmt.Errorf("--memory: %w", err)
		}
		req.Limits.MemoryBytes = n
	}
	ds, err := f.disk.limits()
	if err != nil {
		return req, err
	}
	req.Limits.DiskBytes, req.Limits.DiskInodes = ds.Bytes, ds.Inodes
	switch f.pr {
	case "", store.PRDraft, store.PRReady, store.PRNone:
		req.PR = f.pr
	default:
		return req, fmt.Errorf("--pr %q: use draft, ready or none", f.pr)
	}
	for _, r := range f.repos {
		if repo, ok := githubRepo(r); ok {
			req.Repos = append(req.Repos, wire.RepoSpec{GitHub: repo})
			continue
		}
		src := r
		if !workspace.IsURL(r) {
			// A directory: the server resolves it on its machine, so send
			// it absolute.
			abs, err := filepath.Abs(r)
			if err != nil {
				return req, fmt.Errorf("--repo %s: %w", r, err)
			}
			src = abs
		}
		req.Repos = append(req.Repos, wire.RepoSpec{Source: src})
	}
	prompt, err := readText(cmd, args)
	if err != nil {
		return req, err
	}
	req.Prompt = prompt
	return req, nil
}

// readText joins the arguments; "-" reads stdin.
func readText(cmd *cobra.Command, args []string) (string, error) {
	text := strings.Join(args, " ")
	if text == "-" {
		b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), server.MaxBody))
		if err != nil {
			return "", fmt.Errorf("reading stdin: %w", err)
		}
		text = string(b)
	}
	return text, nil
}

func printJSON(w io.Writer, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Fprintf(w, "%s\n", b)
}

func newSessionSendCmd(conn *connFlags) *cobra.Command {
	var interrupt, follow, asJSON bool
	var retryFor time.Duration
	cmd := &cobra.Command{
		Use:   "send ID TEXT",
		Short: "Send a message; queued while the agent works (or --interrupt the turn)",
		Long: `Send a message to a session. It is stored before this command returns. If
the agent is working, it waits in the queue and is taken when the turn ends;
with --interrupt, the running turn is cancelled and this message starts the
next one. A suspended session is resumed with its whole conversation.
TEXT "-" reads the message from stdin.

The message is sent with an idempotency key: when the server cannot be
reached or is restarting (503), send tries again for --retry-for (default
2m), and the message is stored once however many tries it took.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return errors.New(`give a session id and the message, like: harvest session send s-abcdefghijklmnop "Now add a test"`)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			text, err := readText(cmd, args[1:])
			if err != nil {
				return exitCode(2, err)
			}
			c, err := conn.client()
			if err != nil {
				return exitCode(2, err)
			}
			mode := ""
			if interrupt {
				mode = session.ModeInterrupt
			}
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			// Events from here on: the ones this message causes.
			var after int64
			if follow {
				p, err := c.EventLog(ctx, args[0], 0, 1)
				if err != nil {
					return apiErr(err)
				}
				after = p.LastSeq
			}
			m, err := sendOnce(ctx, c, args[0], text, mode, retryFor, cmd.ErrOrStderr())
			if err != nil {
				return apiErr(err)
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), m)
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), m.ID)
			}
			if follow {
				return followTurn(ctx, cmd, c, args[0], m.ID, after, asJSON)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&interrupt, "interrupt", false, "cancel the running turn and start this message now")
	cmd.Flags().DurationVar(&retryFor, "retry-for", 2*time.Minute, "keep trying this long while the server cannot be reached or is restarting (0: once)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "show the events until the turn that takes this message ends")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the message (and events) as JSON")
	return cmd
}

func newSessionCancelCmd(conn *connFlags) *cobra.Command {
	return idCmd(conn, "cancel", "Cancel the running turn (the session stays; queued messages stay queued)", (*client.Client).Cancel)
}

func newSessionRmCmd(conn *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID...",
		Aliases: []string{"delete"},
		Short:   "Delete sessions: stop them, destroy their sandboxes, remove workspaces and history",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("give session ids (harvest session ls lists them)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, cancel, err := conn.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			var failed error
			for _, id := range args {
				if err := c.DeleteSession(ctx, id); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "harvest: %s: %v\n", id, err)
					failed = exitCode(exitRequestFailed, nil)
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), id)
			}
			return failed
		},
	}
}

// parseAge parses a duration that may also be in days (7d) or weeks (2w).
func parseAge(s string) (time.Duration, error) {
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "w": 7 * 24 * time.Hour} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			f, err := strconv.ParseFloat(n, 64)
			if err != nil || f < 0 {
				break
			}
			return time.Duration(f * float64(unit)), nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q: give a duration like 7d, 2w, 12h or 90m", s)
	}
	return d, nil
}

func newSessionCleanupCmd(conn *connFlags) *cobra.Command {
	var olderThan string
	var states []string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "cleanup --older-than D",
		Short: "Delete the sessions not used for a while (suspended, stopped or failed ones)",
		Long: `Delete every session in one of --state (default: suspended, stopped, failed)
whose last update is older than --older-than (like 7d, 2w, 12h). Live
sessions are never touched unless named in --state. Prints what it deletes.`,
		Example: `  harvest session cleanup --older-than 7d
  harvest session cleanup --older-than 1d --state failed --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan == "" {
				return exitCode(2, errors.New("--older-than is required, like --older-than 7d"))
			}
			age, err := parseAge(olderThan)
			if err != nil {
				return exitCode(2, fmt.Errorf("--older-than %w", err))
			}
			c, err := conn.client()
			if err != nil {
				return exitCode(2, err)
			}
			o := client.ListOptions{UpdatedBefore: time.Now().Add(-age)}
			for _, s := range states {
				for p := range strings.SplitSeq(s, ",") {
					o.States = append(o.States, wire.State(strings.TrimSpace(p)))
				}
			}
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			list, err := c.ListSessions(ctx, o)
			if err != nil {
				return apiErr(err)
			}
			var failed error
			for _, s := range list {
				if !dryRun {
					if err := c.DeleteSession(ctx, s.ID); err != nil && !client.IsNotFound(err) {
						fmt.Fprintf(cmd.ErrOrStderr(), "harvest: %s: %v\n", s.ID, err)
						failed = exitCode(exitRequestFailed, nil)
						continue
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\t%s\n", s.ID, s.State, ago(time.Now(), lastUsed(s)))
			}
			verb := "deleted"
			if dryRun {
				verb = "would delete"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "harvest: %s %d %s\n", verb, len(list), plural(len(list), "session", "sessions"))
			return failed
		},
	}
	cmd.Flags().StringVar(&olderThan, "older-than", "", "delete sessions last used longer ago than this (like 7d, 2w, 12h)")
	cmd.Flags().StringArrayVar(&states, "state", []string{"suspended,stopped,failed"}, "only sessions in these states")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be deleted, delete nothing")
	return cmd
}

func newSessionUnlockCmd(conn *connFlags) *cobra.Command {
	return idCmd(conn, "unlock", "Force-release a session's lock, held by a run that died (admin)", (*client.Client).Unlock)
}

// idCmd is a command that makes one call on one session and prints nothing.
func idCmd(conn *connFlags, use, short string, call func(*client.Client, context.Context, string) error) *cobra.Command {
	return &cobra.Command{
		Use:   use + " ID",
		Short: short,
		Args:  idArgs(use),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, cancel, err := conn.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			return apiErr(call(c, ctx, args[0]))
		},
	}
}

func newSessionLogsCmd(conn *connFlags) *cobra.Command {
	var follow, asJSON bool
	var since int64
	cmd := &cobra.Command{
		Use:   "logs ID [-f] [--since SEQ]",
		Short: "Show a session's events; -f keeps following them live",
		Long: `Print a session's events after --since (their seq; default all). With -f,
keep printing them as they happen, reconnecting if the server restarts,
until Ctrl-C or the session is deleted. --json prints each event as one
JSON line (with its seq, to resume from).`,
		Args: idArgs("logs"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if since < 0 {
				return exitCode(2, fmt.Errorf("--since %d: give the seq of the last event you have (0 for all)", since))
			}
			c, ctx, cancel, err := conn.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			out := newEventPrinter(cmd.OutOrStdout(), asJSON)
			defer out.close()
			id := args[0]
			if !follow {
				after := since
				for {
					p, err := c.EventLog(ctx, id, after, 0)
					if err != nil {
						return apiErr(err)
					}
					for _, ev := range p.Events {
						out.event(ev)
						after = ev.Seq
					}
					if len(p.Events) == 0 || after >= p.LastSeq {
						return nil
					}
				}
			}
			st := c.Events(ctx, id, client.StreamOptions{After: since})
			defer st.Close()
			for {
				ev, err := st.Next()
				if err != nil {
					if ctx.Err() != nil {
						return nil // Ctrl-C
					}
					return apiErr(err)
				}
				out.event(ev)
			}
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep following the events live")
	cmd.Flags().Int64Var(&since, "since", 0, "only events after this seq")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print each event as a JSON line")
	return cmd
}

// sendOnce sends a message under one idempotency key, trying again while
// the server cannot be reached or answers 503 (a restart drains), for up
// to retryFor: however many tries it takes, the message is stored once.
func sendOnce(ctx context.Context, c *client.Client, id, text, mode string, retryFor time.Duration, stderr io.Writer) (*wire.Message, error) {
	key := client.NewIdempotencyKey()
	deadline := time.Now().Add(retryFor)
	wait := 250 * time.Millisecond
	said := false
	for {
		m, err := c.SendOnce(ctx, id, key, text, mode)
		st := client.StatusOf(err)
		retry := err != nil && ctx.Err() == nil && (st == 0 || st == http.StatusServiceUnavailable || st == http.StatusBadGateway)
		if !retry || time.Now().Add(wait).After(deadline) {
			return m, err
		}
		if !said {
			fmt.Fprintf(stderr, "harvest: %v; trying again for up to %s (the message is stored once)\n", err, retryFor)
			said = true
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// githubRepo reads --repo OWNER/NAME (not an existing directory) or
// github:OWNER/NAME as a repository on the server's GitHub.
func githubRepo(r string) (string, bool) {
	if repo, ok := strings.CutPrefix(r, "github:"); ok {
		return repo, true
	}
	if !session.ForgeRepo(r) {
		return "", false
	}
	if _, err := os.Stat(r); err == nil {
		return "", false
	}
	return r, true
}
