package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/agents"
	"github.com/harvest-dev/harvest/environment"
	"github.com/harvest-dev/harvest/ghbot"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/memory"
	"github.com/harvest-dev/harvest/netguard"
	"github.com/harvest-dev/harvest/sandbox/backends"
	"github.com/harvest-dev/harvest/secrets"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/server/cluster"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/slackbot"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/telemetry"
	"github.com/harvest-dev/harvest/web"
	"github.com/harvest-dev/harvest/workspace"
)

// DefaultListen is where harvest serve listens, and where the session
// commands look for it, unless told otherwise.
const DefaultListen = "127.0.0.1:7777"

// adminTokenFile is the admin token's file in the data directory.
const adminTokenFile = "admin-token"

type serveFlags struct {
	listen     string
	data       string
	backend    string
	model      string
	simScript  string
	unsafeHost bool
	pool       int
	quiet      bool
	egress     string
	runtime    string
	internal   []string
	repoRoots  []string
	gitHosts   []string
	clone      workspace.CloneOptions
	grace      time.Duration
	disk       diskFlags
	noDisks    bool
	minFree    string
	github     githubFlags
	slack      slackFlags
	signIn     signInFlags
	refresh    time.Duration
	retention  string
	repoConfig string
	store      string
	storeTime  time.Duration
	mcpConfig  string
	mcpAllow   []string
	memoryHook string
	nats       string
	natsFollow bool
	nodeID     string
	advertise  string
	leaseTTL   time.Duration
	maxSess    int
	takeRate   float64
	sharedData bool
	carryMax   string
	ckpt       checkpointFlags
	stopBoxes  bool
	config     string
	printCfg   bool
	tel        telemetryFlags
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve [--listen ADDR] [--data DIR]",
		Short: "Run the Harvest server: sessions, their sandboxes, the HTTP API",
		Long: `Serve Harvest's HTTP API (described at /openapi.json): sessions that outlive
clients and restarts, each a conversation with an agent in its own sandbox.

State lives in the data directory (--data, else $HARVEST_HOME, else
~/.harvest): harvest.db (SQLite: sessions, messages, events, tokens,
secrets; or, with --store postgres://..., a PostgreSQL database that several
servers may share), secret.key (the key the secrets are encrypted with: made on first
start, mode 0600; the server refuses a key others may read) and workspaces/. On first start an admin token is written to DATA/admin-token
(mode 0600); the session commands read it from there, or take $HARVEST_TOKEN.
Make tokens for others with: harvest token create NAME.

On start, sessions that were live are recovered: their sandboxes are
reattached or remade from the kept workspace, an interrupted turn is marked
as such, queued messages are delivered, and boxes no session owns are
removed.

SIGINT or SIGTERM drains it for a restart: new sessions and messages get
503 with Retry-After (queued messages stay queued for the next start), the
API keeps answering reads and event streams, and running turns get
--shutdown-grace to finish; then what still runs is interrupted (marked so,
and resumed by the next start) and it exits. A second signal skips the
rest of the grace. Nothing is lost either way, nor by kill -9. The
sessions' boxes are left running for the next start to reattach; to stop
for good, give --stop-boxes-on-exit: then they are destroyed after the
drain and the idle sessions suspended (their next message resumes them on
a new box). Boxes a server left that no running server owns (it was
stopped without the flag, or killed) are removed by harvest sandbox prune.
Warm boxes (--pool) never outlive the server. As PID 1 (a container
without an init) it runs the server as its child and reaps the orphans
the kernel gives it, like tini.

Settings: every flag below is also a key of a YAML config file, --config
FILE (or $HARVEST_CONFIG): the flag's name without its --, a list for a
repeatable flag, a mapping for a NAME=VALUE one (see
docs/running-a-server.md#a-config-file). The command line wins over the file, the file over the
environment, the environment over the defaults; a mistake in the file is
reported with its line. --print-config prints the effective settings as
such a file, secrets redacted.

Repositories: the admin token's sessions may copy any directory but /proc,
/sys, /dev and the data directory, and clone any git URL. A user token's
may copy only directories under a --repo-root and clone only https:// (or
http://) URLs of a --git-host; without them, user tokens can name no
directory and no URL.

Models: like harvest run (--model, $HARVEST_MODEL, the API keys in the
environment; with no key, the bundled demo on harvest sim, said so).

MCP servers: a session's remote MCP servers (its request's mcp_servers,
its repositories' .mcp.json) are reached from this machine, so Harvest
dials them only at public addresses: a URL whose host is, or resolves to, a
loopback, private (10/8, 172.16/12, 192.168/16, fc00::/7), shared
(100.64/10), link-local (169.254/16, the cloud metadata service, fe80::/10)
or reserved address, or does not resolve, is refused (a 400 for a request,
left out with a warning for a .mcp.json), for every token, the admin
token's included. The address is checked again at every connection, and
the checked address is the one dialed. To allow an internal server, give
--mcp-allow (a host name, an IP or a CIDR network, each optionally with
:PORT); the servers of --mcp-config are the operator's and are not
checked.`,
		Example: `  harvest serve
  harvest serve --listen 127.0.0.1:8080 --data /srv/harvest
  harvest serve --config /etc/harvest/serve.yaml --pool 4
  harvest serve --config /etc/harvest/serve.yaml --print-config
  HARVEST_HOME=/tmp/h harvest serve --sim-script task.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := applyServeConfig(cmd.Flags(), configPath(f.config))
			if err != nil {
				return err
			}
			if f.printCfg {
				return printServeConfig(cmd.OutOrStdout(), cmd.Flags(), cfg)
			}
			return cfg.explain(serve(cmd, f)) // f as the file set it
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", DefaultListen, "address to listen on, HOST:PORT (port 0: any free port)")
	fl.StringVar(&f.data, "data", "", "data directory (default $HARVEST_HOME, else ~/.harvest)")
	fl.StringVar(&f.backend, "backend", backends.Default, "default sandbox backend of new sessions: "+strings.Join(backends.Names(), ", "))
	fl.StringVar(&f.model, "model", "", "default model of new sessions, as provider/model")
	fl.StringVar(&f.simScript, "sim-script", "", "serve every model from harvest sim with this script instead of a model API")
	fl.BoolVar(&f.unsafeHost, "unsafe-host", false, "allow sessions on the host backend: tools run on this machine with NO isolation")
	fl.IntVar(&f.pool, "pool", 2, "sandboxes the local and docker backends each keep ready (docker's from its first box on), and session disks of the default size (--disk) made and mounted ahead of demand in DATA/disks/pool, for faster session starts")
	fl.BoolVar(&f.quiet, "quiet", false, "log only warnings and errors")
	f.disk.add(fl, "20g; a session may ask for another")
	fl.StringVar(&f.minFree, "min-free", "", "free space kept on the data directory's filesystem: below it new sessions, resumes and environment builds are refused (507); a size like 5g, a share like 10%, or 0 for none (default: 10% of the filesystem, at least 1g, at most 5g)")
	fl.BoolVar(&f.noDisks, "no-disk-limits", false, "run sessions without disk limits (their workspaces, /tmp and HOME can fill the host's disk; sessions say limits_enforced.disk false), where disks cannot be made: without it, harvest serve refuses to start there")
	fl.StringVar(&f.egress, "egress-allow", "", egressHelp)
	fl.StringVar(&f.runtime, "runtime", "", runtimeHelp)
	fl.StringArrayVar(&f.internal, "egress-internal", nil, internalHelp)
	fl.StringArrayVar(&f.repoRoots, "repo-root", nil, repoRootsHelp)
	fl.StringArrayVar(&f.gitHosts, "git-host", nil, "a host user tokens' sessions may clone https:// URLs from, or *.domain (repeatable; default none)")
	fl.DurationVar(&f.clone.Timeout, "clone-timeout", workspace.DefaultCloneTimeout, "longest a git clone of a session's repository may take")
	fl.DurationVar(&f.clone.Stall, "clone-stall-timeout", workspace.DefaultCloneStall, "end a git clone that receives less than 1 KiB/s for this long (connecting included)")
	f.github.add(fl)
	f.slack.add(fl)
	f.signIn.add(fl)
	fl.StringVar(&f.repoConfig, "repo-config", "", "a YAML file of setup and start scripts per repository, for those that have none of their own (see docs/environments.md)")
	fl.StringVar(&f.mcpConfig, "mcp-config", "", "a YAML file of MCP servers every session's agent gets (see docs/agents.md#mcp-servers)")
	fl.StringArrayVar(&f.mcpAllow, "mcp-allow", nil, mcpAllowHelp)
	fl.DurationVar(&f.refresh, "refresh-environments", session.DefaultRefreshEvery, "how often prepared environments are rebuilt when their repository changed (0: never)")
	fl.StringVar(&f.retention, "event-retention", "", "compact the events of sessions not live (suspended, stopped, failed) for this long, like 30d: their text, thinking, tool calls and terminal bytes are removed, their turns' record (prompts, results, usage, state changes, git and pull requests) kept, each removed run marked (events.compacted); empty or 0: keep every event forever")
	fl.StringVar(&f.store, "store", "", storeHelp)
	fl.DurationVar(&f.storeTime, "store-timeout", server.DefaultStoreTimeout, storeTimeoutHelp)
	fl.StringVar(&f.memoryHook, "memory-hook", "", "a program run for every write to a repository's memory, the write as JSON on its stdin: exit 0 allows it, any other status refuses it with the first line of its stderr as the reason")
	fl.StringVar(&f.nats, "nats", "", "a NATS server with JetStream (nats://HOST:4222): every stored event is also published there, so other servers can follow this one's sessions (see docs/several-machines.md)")
	addNodeFlags(fl, &f)
	addCheckpointFlags(fl, &f.ckpt)
	fl.BoolVar(&f.natsFollow, "nats-follow", false, "serve event streams from NATS (--nats) instead of this server's journal, as a server whose sessions run elsewhere would; they read the store for what NATS misses")
	f.tel.add(fl)
	fl.DurationVar(&f.grace, "shutdown-grace", 30*time.Second, "on SIGTERM or SIGINT, how long running turns may go on before they are interrupted (0: interrupt at once)")
	fl.BoolVar(&f.stopBoxes, "stop-boxes-on-exit", false, "on SIGTERM or SIGINT, after the drain, destroy the sessions' boxes (idle sessions are suspended: their next message resumes them) instead of leaving them running for the next start to reattach")
	fl.StringVar(&f.config, "config", "", "a YAML file of settings: each key a flag of this command, without its -- (default $"+configEnv+"; flags given here win; see docs/running-a-server.md#a-config-file)")
	fl.BoolVar(&f.printCfg, "print-config", false, "print the effective settings (flags, --config, environment, defaults) as a config file, secrets redacted, and exit")
	annotate(fl, "egress-internal", configAnnotation, configKeyValue)
	for _, name := range append([]string{"github-app-key", "github-token-file", "github-webhook-secret-file", "github-client-secret-file", "oidc-client-secret-file"}, slackSecretFlags...) {
		annotate(fl, name, configAnnotation, configSecretFile)
	}
	annotate(fl, "data", envAnnotation, "HARVEST_HOME")
	annotate(fl, "store", envAnnotation, "HARVEST_STORE")
	annotate(fl, "model", envAnnotation, "HARVEST_MODEL")
	return cmd
}

func serve(cmd *cobra.Command, f serveFlags) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if os.Getpid() == 1 {
		return serveAsInit(stderr) // see serveinit.go
	}
	if f.pool < 0 {
		return exitCode(2, fmt.Errorf("--pool %d: must be positive", f.pool))
	}
	if f.refresh < 0 || (f.refresh > 0 && f.refresh < time.Minute) {
		return exitCode(2, fmt.Errorf("--refresh-environments %s: give 0 (never) or a minute or more, like 30m", f.refresh))
	}
	var repoDefaults *environment.Defaults
	if f.repoConfig != "" {
		var err error
		if repoDefaults, err = environment.LoadDefaults(f.repoConfig); err != nil {
			return exitCode(2, fmt.Errorf("--repo-config: %w", err))
		}
	}
	var mcpServers []agent.MCPServer
	if f.mcpConfig != "" {
		var err error
		if mcpServers, err = agents.LoadMCPConfig(f.mcpConfig); err != nil {
			return exitCode(2, err)
		}
	}
	mcpGuard, err := netguard.New(netguard.Config{Allow: f.mcpAllow})
	if err != nil {
		return exitCode(2, fmt.Errorf("--mcp-allow: %w", err))
	}
	if f.grace < 0 {
		return exitCode(2, fmt.Errorf("--shutdown-grace %s: must be 0 or more", f.grace))
	}
	var memHook memory.Hook
	if f.memoryHook != "" {
		var err error
		if memHook, err = memory.CommandHook([]string{f.memoryHook}); err != nil {
			return exitCode(2, fmt.Errorf("--memory-hook: %w (give an executable's path)", err))
		}
	}
	if _, err := backends.Lookup(f.backend); err != nil {
		return exitCode(2, fmt.Errorf("--backend: %w", err))
	}
	if f.store == "" {
		f.store = os.Getenv("HARVEST_STORE") // not the flag's default: --help would show it
	}
	if err := checkStoreFlag(f.store); err != nil {
		return exitCode(2, err)
	}
	retention, err := eventRetention(f.retention)
	if err != nil {
		return exitCode(2, err)
	}
	if f.storeTime < 100*time.Millisecond {
		return exitCode(2, fmt.Errorf("--store-timeout %s: give at least 100ms (how long an API request waits for the store before it answers 503), like 5s", f.storeTime))
	}
	// The runtime is the docker backend's, whatever the default backend:
	// sessions that choose docker get it.
	if err := checkRuntimeName(f.runtime); err != nil {
		return exitCode(2, err)
	}
	if err := checkNATSFlags(f); err != nil {
		return exitCode(2, err)
	}
	if f.clone.Timeout <= 0 || f.clone.Stall <= 0 {
		return exitCode(2, errors.New("--clone-timeout and --clone-stall-timeout must be positive, like 10m and 30s"))
	}
	diskDefault, err := f.disk.limits()
	if err != nil {
		return exitCode(2, err)
	}
	minFree, err := session.ParseMinFree(f.minFree)
	if err != nil {
		return exitCode(2, err)
	}
	data, err := serverDataDir(f.data)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}
	rootPaths, roots, err := splitRoots(f.repoRoots)
	if err != nil {
		return exitCode(2, fmt.Errorf("--repo-root: %w", err))
	}
	if f.github.permissionTTL <= 0 {
		return exitCode(2, fmt.Errorf("--github-permission-ttl %s: give how long GitHub's answer is trusted, like 3m (more than 0)", f.github.permissionTTL))
	}
	sources, err := workspace.NewPolicy(rootPaths, f.gitHosts, []string{data})
	if err != nil {
		return exitCode(2, fmt.Errorf("--repo-root/--git-host: %w", err))
	}
	if err := os.MkdirAll(data, 0o711); err != nil {
		return exitCode(exitHarvestError, fmt.Errorf("creating the data directory %s: %w (pass --data or set HARVEST_HOME to a writable directory)", data, err))
	}
	// Before any box is made or reattached: this server's boxes are
	// recorded with its owner (servestop.go).
	own, err := holdServerOwner(cmd.Context(), data, stderr)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}
	defer own.Release()
	if err := serveDisks(cmd.Context(), data, f, stderr); err != nil {
		return err
	}
	level := slog.LevelInfo
	if f.quiet {
		level = slog.LevelWarn
	}
	tel, err := newServeTelemetry(cmd.Context(), f.tel, stderr, level)
	if err != nil {
		return err
	}
	defer tel.stop()
	logger := tel.logs.Logger
	ghsvc, ghc, err := f.github.forge(data, f.clone, logger)
	if err != nil {
		return exitCode(2, err)
	}
	var forge session.Forge
	if ghsvc != nil {
		forge = ghsvc
	}
	eg, err := openEgress(f.egress, f.internal, logger, tel.metrics)
	if err != nil {
		return exitCode(2, err)
	}

	models, err := serveModels(f, stderr)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}
	defer models.stop()

	st, err := openServerStore(cmd.Context(), f.store, data)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}
	defer st.Close()
	st = store.Observe(st, tel.metrics)
	// An API request's store calls are bounded by --store-timeout (the
	// server gives each request its budget); the others are not.
	st = store.Bounded(st)
	if ghc != nil {
		// What a node learns of GitHub's limits and installations, the
		// others know (gh's package doc, "Limits"); before anything asks
		// GitHub.
		ghc.ShareLimits(ghbot.SharedMarks(st))
		// Kept current in the background: requests never wait for
		// the store to know them.
		lctx, stopLimits := context.WithCancel(context.Background())
		limitsDone := make(chan struct{})
		go func() { defer close(limitsDone); ghc.RunShared(lctx) }()
		defer func() { stopLimits(); <-limitsDone }()
	}
	rules, err := serveAuthz(st, roots, ghc, f.github.permissionTTL)
	if err != nil {
		return exitCode(2, err)
	}
	tokenPath, created, err := ensureAdminToken(cmd.Context(), st, data)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}
	if created {
		fmt.Fprintf(stderr, "harvest: created an admin token and wrote it to %s (mode 0600); the session commands read it from there\n", tokenPath)
	} else {
		fmt.Fprintf(stderr, "harvest: the admin token is in %s\n", tokenPath)
	}

	secretKey, err := openSecretKey(cmd.Context(), st, data, stderr)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}

	mem, err := memory.New(memory.Config{Store: st, Hook: memHook})
	if err != nil {
		return exitCode(exitHarvestError, err)
	}
	jopt := journal.Options{Logger: logger}
	bus, err := connectBus(cmd.Context(), f, st, logger)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}
	if bus != nil {
		// closeAll closes it after the journal; this is for the early
		// returns (Close is idempotent).
		defer closeBus(bus)
		jopt.Publisher = bus
	}
	j := journal.New(st, jopt)
	provs := &providerSet{opts: backends.Options{AllowUnsafeHost: f.unsafeHost, LocalPool: f.pool, DockerPool: f.pool, DockerRuntime: f.runtime, Owner: own.ID()}, stderr: stderr, observe: tel.metrics}
	builder, err := environment.NewBuilder(environment.Config{
		Dir: filepath.Join(data, "environments"), Store: st, Provider: provs.open, Egress: eg, Version: Version, Logger: logger,
		Defaults: repoDefaults,
	})
	if err != nil {
		j.Close(context.Background())
		return exitCode(exitHarvestError, err)
	}
	// With several nodes the address is advertised before the API
	// serves: listen first.
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		j.Close(context.Background())
		return exitCode(exitHarvestError, fmt.Errorf("--listen %s: %w (is another harvest serve running? pick another address)", f.listen, err))
	}
	defer ln.Close()
	node, carryMax, err := nodeConfig(f, ln.Addr().String())
	if err != nil {
		j.Close(context.Background())
		return exitCode(exitHarvestError, err)
	}
	if node != nil {
		tel.logs.SetNode(node.ID)
	}
	checkpoints, err := checkpointStore(cmd.Context(), f.ckpt, node, carryMax, data, stderr)
	if err != nil {
		j.Close(context.Background())
		return exitCode(exitHarvestError, err)
	}
	mgr, err := session.NewManager(session.Config{
		Environments: builder, RefreshEvery: refreshEvery(f.refresh),
		SetupSecrets: func(ctx context.Context, repo string) ([]string, error) {
			setup, _, err := secrets.Resolve(ctx, st, secretKey, repo, "")
			if err == nil && len(setup) > 0 {
				auditSetupSecrets(ctx, st, repo, setup, logger)
			}
			return setup, err
		},
		SessionSecrets: func(ctx context.Context, repo, owner string) ([]string, error) {
			if !strings.HasPrefix(owner, "tok-") {
				owner = "" // a session GitHub started belongs to no token
			}
			if repo == "" && owner == "" {
				return nil, nil
			}
			_, sess, err := secrets.Resolve(ctx, st, secretKey, repo, owner)
			return sess, err
		},
		MCP: mcpServers, MCPGuard: mcpGuard, Memory: mem, HostMCP: f.slack.hostMCP, HostMCPNames: f.slack.hostMCPNames(),
		MCPSecrets: func(ctx context.Context, repo, owner string) ([]string, error) {
			if !strings.HasPrefix(owner, "tok-") {
				owner = ""
			}
			if repo == "" && owner == "" {
				return nil, nil
			}
			all, _, err := secrets.Resolve(ctx, st, secretKey, repo, owner)
			return all, err
		},
		Store: st, Journal: j, Backends: provs.open, DefaultBackend: f.backend,
		DataDir: data, Models: models.cfg, DefaultModel: models.model,
		AgentsDir: agentsDir(), Logger: logger, Egress: eg, CLIPrefix: cliPrefix(),
		Sources: sources, Clone: f.clone, Forge: forge,
		Disks: !f.noDisks, DiskPool: f.pool, OwnersDir: provs.opts.OwnersDir(), Defaults: store.Limits{DiskBytes: diskDefault.Bytes, DiskInodes: diskDefault.Inodes}, MinFree: minFree,
		Node: node, CarryMax: carryMax, Checkpoints: checkpoints, StopBoxesOnExit: f.stopBoxes, EventRetention: retention,
		Observer: tel.metrics, Tracer: tel.tracing.TracerProvider(),
	})
	if err != nil {
		j.Close(context.Background())
		provs.close()
		return exitCode(exitHarvestError, err)
	}
	// Shutdown order: the API (Drain, Shutdown), then the runners, then the
	// journal (which flushes), then the sandbox providers, then the store.
	var slackApp *slackbot.Bot // closed first: its watchers follow the sessions
	closeAll := func(ctx context.Context) {
		if slackApp != nil {
			slackApp.Close()
		}
		if err := mgr.Close(ctx); err != nil {
			logger.Error("stopping the sessions", "err", err)
		}
		if err := j.Close(ctx); err != nil {
			logger.Error("flushing the journal", "err", err)
		}
		if bus != nil {
			if err := bus.Close(ctx); err != nil {
				logger.Error("publishing the last events on NATS", "err", err)
			}
		}
		provs.close()
	}

	// Signals: the first drains (stop), a second skips the rest of the
	// grace and the HTTP shutdown (hard), a third stops waiting for the
	// runners and the journal (abandon).
	sigs := make(chan os.Signal, 3)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	stopCtx, stop := context.WithCancel(cmd.Context())
	defer stop()
	hard, hardStop := context.WithCancel(context.Background())
	defer hardStop()
	abandon, abandonStop := context.WithCancel(context.Background())
	defer abandonStop()
	var sigWG sync.WaitGroup
	sigDone := make(chan struct{})
	sigWG.Add(1)
	go func() {
		defer sigWG.Done()
		n := 0
		for {
			select {
			case s := <-sigs:
				n++
				switch n {
				case 1:
					fmt.Fprintf(stderr, "harvest: %s: stopping (again to interrupt the running turns now)\n", s)
					stop()
				case 2:
					fmt.Fprintf(stderr, "harvest: %s: interrupting the running turns now (again to stop without waiting for them)\n", s)
					hardStop()
				default:
					abandonStop()
				}
			case <-sigDone:
				return
			}
		}
	}()
	defer func() { close(sigDone); sigWG.Wait() }()

	recoverCtx, cancelRecover := context.WithTimeout(stopCtx, 5*time.Minute)
	err = mgr.Recover(recoverCtx)
	cancelRecover()
	if err != nil {
		closeAll(hard)
		return exitCode(exitHarvestError, fmt.Errorf("recovering the sessions: %w", err))
	}

	var nodeTok *cluster.Token
	if node != nil {
		// Tokens of nodes that died (server/cluster: "Node tokens"), and
		// this node's own: forwarded requests and webhooks' messages for
		// another node's session carry it.
		sctx, stopSweep := context.WithCancel(context.Background())
		swept := make(chan struct{})
		go func() { defer close(swept); cluster.SweepTokens(sctx, st, cluster.TokenGrace, logger) }()
		defer func() { stopSweep(); <-swept }()
		if nodeTok, err = cluster.NewToken(cmd.Context(), st, node.ID, logger); err != nil {
			closeAll(hard)
			return exitCode(exitHarvestError, err)
		}
		defer nodeTok.Remove()
	}
	var webhook http.Handler
	var deliveries server.GitHubDeliveries
	if ghsvc != nil {
		var sessions ghbot.Sessions = mgr
		if node != nil {
			// A delivery's message for a session another node owns is
			// sent there, with this node's token (server/cluster: "Webhooks").
			sessions = cluster.NewSessions(mgr, nodeTok, node.ID, logger)
		}
		hcfg := f.github.hooks
		hcfg.Shared = node != nil
		hcfg.Observer, hcfg.Tracer = tel.metrics, tel.tracing.TracerProvider()
		hooks := ghbot.NewHooks(ghsvc, st, sessions, hcfg)
		webhook, deliveries = hooks, hooks
		hctx, stopHooks := context.WithCancel(context.Background())
		hooksDone := make(chan struct{})
		go func() { defer close(hooksDone); hooks.Run(hctx) }()
		defer func() { stopHooks(); <-hooksDone }()
	}
	var slackEvents http.Handler
	if slackApp, err = f.slack.start(cmd.Context(), st, mgr, node, nodeTok, rules, rootPaths, ghsvc != nil, appRepos(ghc), f.github.publicURL, logger); err != nil {
		closeAll(hard)
		return exitCode(2, err)
	} else if slackApp != nil && f.slack.signingSecretFile != "" {
		slackEvents = slackApp
	}
	signIn, err := f.signIn.config(&f.github)
	if err != nil {
		closeAll(hard)
		return exitCode(2, err)
	}
	var liveNodes func(ctx context.Context, node string) (bool, error)
	if node != nil {
		liveNodes = cluster.NodeLive(st) // other nodes' tokens are accepted
	}
	var follow func(ctx context.Context, session string, after int64) (server.EventStream, error)
	if f.natsFollow {
		follow = followBus(bus)
	}
	tel.metrics.Watch(telemetry.Sources{Store: st, Journal: j, Sessions: mgr, Backends: provs.list, Disk: mgr.DiskUsage, Logger: logger})
	api, err := server.New(server.Config{Manager: mgr, Store: st, Logger: logger, Version: Version, GitHubWebhook: webhook, GitHubDeliveries: deliveries, SlackEvents: slackEvents,
		Secrets: st, SecretKey: secretKey, Memory: mem, UI: web.Handler(), Follow: follow, NodeLive: liveNodes, StoreTimeout: f.storeTime, SignIn: signIn, Access: rules,
		Ready: tel.readyChecks(st, provs, f.backend, mgr), Metrics: tel.metrics.Handler(slog.NewLogLogger(logger.Handler(), slog.LevelWarn))})
	if err != nil {
		closeAll(hard)
		return exitCode(exitHarvestError, err)
	}
	if host, _, _ := net.SplitHostPort(f.listen); !isLoopback(host) {
		fmt.Fprintf(stderr, "harvest: WARNING: listening on %s, beyond this machine, over plain HTTP: tokens cross the network in clear; put a TLS proxy in front\n", f.listen)
	}
	stopMetrics, err := tel.serveMetrics(f.tel.metricsListen, stderr)
	if err != nil {
		closeAll(hard)
		return err
	}
	defer stopMetrics()
	hs := &http.Server{Handler: tel.tracing.Handler(nodeHandler(api, mgr, st, node, nodeTok, f, logger, stderr)), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	fmt.Fprintf(stdout, "harvest serve listening on http://%s\n", ln.Addr())
	fmt.Fprintf(stderr, "harvest: data in %s; default backend %s, default model %s\n", data, f.backend, models.model)

	var failed error
	select {
	case <-stopCtx.Done():
	case err := <-serveErr:
		failed = fmt.Errorf("serving: %w", err)
	}
	// Drain: the API goes on answering (creating and sending get 503 from
	// the Manager) while the running turns finish, for the grace at most.
	drainTurns(mgr, f.grace, hard, stderr, logger)
	api.Drain()
	shutCtx, cancelShut := context.WithTimeout(hard, 5*time.Second)
	if err := hs.Shutdown(shutCtx); err != nil {
		hs.Close()
	}
	cancelShut()
	if failed == nil {
		<-serveErr // http.ErrServerClosed
	}
	// Close interrupts what still runs (each turn's tools are stopped as it
	// is cancelled, in well under this bound) and flushes the journal.
	closeCtx, cancelClose := context.WithTimeout(abandon, closeBound)
	closeAll(closeCtx)
	cancelClose()
	if f.stopBoxes {
		sweepOwnBoxes(own, stderr, logger)
	}
	if failed != nil {
		return exitCode(exitHarvestError, failed)
	}
	fmt.Fprintln(stderr, "harvest: stopped")
	return nil
}

// closeBound bounds stopping the sessions and flushing the journal once the
// grace is over: serve exits within --shutdown-grace plus about this.
const closeBound = 20 * time.Second

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// refreshEvery is session.Config.RefreshEvery for --refresh-environments
// (0: never, which the Config says with a negative).
func refreshEvery(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// eventRetention parses --event-retention: empty or 0 is forever (0), else
// a duration in days, weeks or Go's units of at least an hour.
func eventRetention(v string) (time.Duration, error) {
	if v == "" || v == "0" {
		return 0, nil
	}
	d, err := parseAge(v)
	if err == nil && d < time.Hour {
		err = errors.New("below an hour")
	}
	if err != nil {
		return 0, fmt.Errorf("--event-retention %q: give how long the events of a session not live are kept whole, like 30d or 2w (at least 1h), or 0 to keep them forever", v)
	}
	return d, nil
}
