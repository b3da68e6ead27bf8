package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/agents"
	"github.com/harvest-dev/harvest/egress"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/llm/providers"
	"github.com/harvest-dev/harvest/memory"
	"github.com/harvest-dev/harvest/netguard"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/backends"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/objstore"
	"github.com/harvest-dev/harvest/workspace"
)

// Defaults of a session's limits (seeds 000 and 003), used where neither the
// request nor Config.Defaults says otherwise.
const (
	DefaultIdleTimeout  = 5 * time.Minute
	DefaultMaxLifetime  = 24 * time.Hour
	DefaultTurnWatchdog = 30 * time.Minute
	DefaultMemoryBytes  = sandbox.DefaultMemory
	// DefaultDiskBytes is a session's disk; its inode cap defaults to one
	// inode per disk.BytesPerInode.
	DefaultDiskBytes = disk.DefaultBytes
	// DefaultLockTTL is how long a turn's session lock lives without being
	// renewed: a run that died holding it blocks the session at most this
	// long.
	DefaultLockTTL = 2 * time.Minute
	// DefaultLockRetry is how often a runner whose session is locked by
	// another run tries again.
	DefaultLockRetry = 2 * time.Second
)

// AgentBuiltin is the default agent kind (CreateRequest.Agent): Harvest's
// own loop. agent/agents lists the others.
var AgentBuiltin = agents.Default

// Config is what a Manager needs.
type Config struct {
	// Store keeps sessions and messages. Required.
	Store store.Store
	// Journal numbers, stores and fans out events; it must write to Store.
	// Required. The Manager does not close it: close it after Manager.Close.
	Journal *journal.Journal
	// Backends opens a sandbox backend by name ("local", "docker", "host").
	// The Manager calls it at most once per name and does not close what it
	// returns: the caller owns the providers (close them after
	// Manager.Close). Nil opens backends.Open(name, {AgentBinary}) and the
	// Manager closes those itself.
	Backends func(name string) (sandbox.Provider, error)
	// DefaultBackend is used when a request names none (default "local").
	DefaultBackend string
	// AgentBinary is the harvest-agent binary for the backends the Manager
	// opens itself (Backends nil); "" finds it as sandbox.AgentBinary does.
	AgentBinary string
	// DataDir holds the workspaces: DataDir/workspaces/session/{id}/{repo}.
	// Required.
	DataDir string
	// Sources is which repository sources sessions may name (roots for
	// paths, hosts for git URLs; see workspace.Policy). Nil: none for user
	// tokens, anything but the never-copyable directories for the admin.
	// DataDir is added to its never-copyable directories either way.
	Sources *workspace.Policy
	// Clone bounds the clone of a URL source (workspace's defaults when
	// zero).
	Clone workspace.CloneOptions
	// Environments, when set, gives sessions their repository's prepared
	// environment (package environment): warm caches and installed
	// dependencies. Nil: every session starts cold.
	Environments Environments
	// RefreshEvery is how often the environments are refreshed
	// (RefreshEnvironments): default DefaultRefreshEvery; negative: never.
	// Only with Environments.
	RefreshEvery time.Duration
	// SetupSecrets returns a GitHub repository's ("owner/name") setup
	// secrets, KEY=VALUE, for its environment's build (package secrets).
	// Nil: none.
	SetupSecrets func(ctx context.Context, repo string) ([]string, error)
	// SessionSecrets returns the secrets a session's commands get
	// (KEY=VALUE, package secrets: those marked for sessions) for its first
	// GitHub repository ("owner/name", "" for none) and its owner (an API
	// token id). Nil: none. Their values are masked in the session's
	// events.
	SessionSecrets func(ctx context.Context, repo, owner string) ([]string, error)
	// Forge serves repositories named "owner/name" (GitHub's; package
	// ghbot) and publishes sessions' work there. Nil: such repositories
	// are refused.
	Forge Forge
	// Models says where models are served (providers.FromEnv, or harvest
	// sim's endpoint in tests); DefaultModel is used when a request names
	// none ("provider/model").
	Models       providers.Config
	DefaultModel string
	// AgentsDir is the operator's agent definitions directory (NAME.md),
	// searched after the repositories' .harvest/agents; "" searches only
	// the repositories.
	AgentsDir string
	// Egress, when set, gives every session's box a way to the hosts it
	// allows (package registries), bridged into the box for the agent's
	// commands (the builtin agent's bash, an external agent's CLI); nil:
	// boxes have no way out.
	Egress *egress.Proxy
	// CLIPrefix is the npm prefix the external agents' CLIs are installed
	// under (agents.DefaultCLIPrefix when empty); boxes see it read-only.
	CLIPrefix string
	// Disks gives every session a disk (package sandbox/disk) of its
	// limits.disk_bytes (disk.go): its workspaces, /tmp and HOME are then
	// bounded by it, and a session whose disk cannot be made fails.
	// `harvest serve` sets it unless told --no-disk-limits. Off, they are
	// bounded only by the host's disk, and the sessions say so
	// (limits_enforced.disk false). A disk stays mounted until its
	// session ends (Recover mounts it again after a reboot): whoever
	// removes a data directory with live sessions left in it unmounts
	// them first (disk.UnmountUnder).
	Disks bool
	// DiskPool is how many disks of the default size (Defaults'
	// DiskBytes and DiskInodes) to keep made and mounted ahead of demand,
	// with Disks on (package sandbox/disk, Pool): a new session takes
	// one with a rename and a bind mount instead of a mkfs.ext4 and a
	// loop mount. They are in DataDir/disks/pool, count against MinFree,
	// and never outlive the Manager (Close removes them; a killed
	// server's are removed at the next start, or by harvest sandbox
	// prune). 0: none.
	DiskPool int
	// OwnersDir holds the owners' lock files (package sandbox/owner): the
	// disk pool's instance is held there. Default owner.DefaultDir().
	OwnersDir string
	// MinFree is the floor of free space kept on DataDir's filesystem:
	// below it, new sessions, resumes of suspended ones and environment
	// builds are refused (ErrInsufficientStorage; admission.go). The zero
	// value is the default floor; MinFree{Off: true} takes work whatever
	// is free.
	MinFree MinFree
	// Defaults fill the zero fields of a request's limits; their own zero
	// fields take the Default* constants.
	Defaults store.Limits
	// LockTTL and LockRetry tune the session lock (Default* when zero).
	LockTTL, LockRetry time.Duration
	// Clock measures every timeout (idle, lifetime, watchdog, lock retry)
	// and stamps times. Nil is the real clock.
	Clock Clock
	// MCP are the server's MCP servers (harvest serve --mcp-config),
	// given to every session's agent next to its repositories' .mcp.json
	// ones; a remote one's Headers (its credentials) stay on the host.
	MCP []agent.MCPServer
	// HostMCP, when set, gives a session's agent more host-side MCP
	// servers (each a Handler, bridged into the box like the memory's):
	// the Slack app's slack_update for the sessions it started. Asked
	// each time an agent starts; nil or empty for none.
	HostMCP func(s *store.Session) []agent.MCPServer
	// HostMCPNames are the names HostMCP's servers take (the Slack app's
	// "slack"), reserved for every session whether or not it gets them:
	// the operator's MCP and a request's mcp_servers may not use one (a
	// request that does is a 400), so none shadows or is shadowed.
	HostMCPNames []string
	// MCPSecrets returns the secrets (NAME=VALUE, all of them, not only
	// those for sessions) of a session's repository and owner, for the
	// ${secret:NAME} in MCP's headers (agents.ExpandMCPSecrets): they are
	// added on the host, never seen in the box. Nil: there are none.
	MCPSecrets func(ctx context.Context, repo, owner string) ([]string, error)
	// MCPGuard is the address policy of every remote MCP server but
	// MCP's (the operator's): a request's is refused at create (a 400)
	// when its host is, or resolves to, a loopback, private, link-local
	// or reserved address the guard does not allow, and every such
	// server, a repository's .mcp.json ones too, is checked again at
	// each dial (agents.Request.MCPGuard). Nil is netguard's default
	// policy, with no allowances; harvest serve's --mcp-allow adds some.
	// The admin token's requests are not exempt: an operator allows an
	// address for everyone, or lists the server in --mcp-config.
	MCPGuard *netguard.Guard
	// Memory, when set, is the repositories' memory: every session's
	// agent gets its first repository's as the MCP server "memory"
	// (bridged into the box like any host server), a digest of it in its
	// instructions, and a first session seeds it (see memory.go).
	Memory *memory.Service
	// Logger receives what goes wrong in the background; nil discards it.
	// Every turn logs a line when it starts and when it ends, with the
	// session, the turn and (with a Tracer) the trace.
	Logger *slog.Logger
	// Observer, when set, hears of every turn's end and every model call,
	// for an operator's metrics (package telemetry). Nil: nobody does.
	Observer Observer
	// Tracer, when set, traces every turn (tracing.go): a trace begun by
	// the request that sent its message (Create's, SendMessage's context)
	// goes on through the session's provisioning, the turn, its model
	// calls and its tools. Nil: nothing is traced.
	Tracer trace.TracerProvider
	// Node, when set, makes this server one of several nodes sharing the
	// store: it runs only the sessions it holds a lease on (see "Several
	// nodes" in the package doc). Nil: the only server of its store.
	Node *NodeConfig
	// CarryMax bounds the size of a session's workspace carried between
	// nodes (nodes_carry.go): 0 is DefaultCarryMax; below 0 nothing is carried,
	// and the nodes must share the data directory.
	CarryMax int64
	// Checkpoints is the object store the carried workspaces' packs and
	// manifests go to (package store/objstore; nodes_objects.go): nil is
	// a directory below DataDir (DefaultCheckpointDir), which only nodes
	// sharing it reach: nodes on separate machines need one store they
	// all reach, an S3 bucket.
	Checkpoints objstore.Store
	// CleanEvery is how often the Manager collects what it no longer
	// needs (nodes_gc.go): stale workspace copies and disks, and dead
	// nodes. 0 is DefaultCleanEvery.
	CleanEvery time.Duration
	// NodeGone is how long a node's heartbeat must have run out before it
	// leaves the nodes table (several nodes). 0 is DefaultNodeGone.
	NodeGone time.Duration
	// EventRetention, when > 0, is how long the events of a session that
	// is not live (suspended, stopped, failed) are kept whole: after it,
	// the janitor compacts them to the turn-level record
	// (nodes_retention.go). 0 keeps every event forever.
	EventRetention time.Duration
	// StopBoxesOnExit makes Close take the boxes with it, for a server
	// stopped for good: each idle session's box is destroyed and the
	// session suspended (its workspace and conversation kept, resumed by
	// its next message), and a box of a session in any other state is
	// destroyed too (the next start gives it a new one). Off (the
	// default), Close leaves the boxes running for the next server to
	// reattach.
	StopBoxesOnExit bool
}

func (c *Config) cliPrefix() string {
	if c.CLIPrefix == "" {
		return agents.DefaultCLIPrefix
	}
	return c.CLIPrefix
}

func (c *Config) check() error {
	var missing []string
	if c.Store == nil {
		missing = append(missing, "Store")
	}
	if c.Journal == nil {
		missing = append(missing, "Journal")
	}
	if c.DataDir == "" {
		missing = append(missing, "DataDir")
	}
	if len(missing) > 0 {
		return fmt.Errorf("session.Config: %v not set: a Manager needs a store, the journal writing to it and a data directory", missing)
	}
	if c.DefaultBackend == "" {
		c.DefaultBackend = backends.Default
	}
	if err := agent.CheckMCP(c.MCP); err != nil {
		return fmt.Errorf("session.Config.MCP: %w", err)
	}
	for _, s := range c.MCP {
		if slices.Contains(c.HostMCPNames, s.Name) {
			return fmt.Errorf("session.Config.MCP: the server %q (%s) has a name Harvest's own host MCP server takes (%s): rename it", s.Name, s.Source, strings.Join(c.HostMCPNames, ", "))
		}
	}
	var roots, hosts, never []string
	if c.Sources != nil {
		roots, hosts, never = c.Sources.Roots, c.Sources.GitHosts, c.Sources.Never
	}
	p, err := workspace.NewPolicy(roots, hosts, append(slices.Clone(never), c.DataDir))
	if err != nil {
		return fmt.Errorf("session.Config.Sources: %w", err)
	}
	c.Sources = p
	if c.Clock == nil {
		c.Clock = RealClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Node != nil {
		if c.Node.ID == "" {
			return errors.New("session.Config.Node: ID not set: every node needs its own id")
		}
		if c.Node.TTL <= 0 {
			c.Node.TTL = DefaultLeaseTTL
		}
		if c.Node.TakeoverRate < 0 {
			return fmt.Errorf("session.Config.Node: TakeoverRate %g: give how many sessions a second the node takes over at most (0: the default, %g)", c.Node.TakeoverRate, DefaultTakeoverRate)
		}
	}
	if c.EventRetention < 0 {
		return fmt.Errorf("session.Config: EventRetention %s must not be negative (0: keep events forever)", c.EventRetention)
	}
	if c.CleanEvery < 0 || c.NodeGone < 0 {
		return fmt.Errorf("session.Config: CleanEvery %s and NodeGone %s must not be negative (0: the defaults)", c.CleanEvery, c.NodeGone)
	}
	if c.CleanEvery == 0 {
		c.CleanEvery = DefaultCleanEvery
	}
	if c.NodeGone == 0 {
		c.NodeGone = DefaultNodeGone
	}
	if c.MinFree.Bytes < 0 || c.MinFree.Percent < 0 || c.MinFree.Percent >= 100 {
		return fmt.Errorf("session.Config.MinFree %+v: give a size or a share below 100%%", c.MinFree)
	}
	if c.LockTTL <= 0 {
		c.LockTTL = DefaultLockTTL
	}
	if c.LockRetry <= 0 {
		c.LockRetry = DefaultLockRetry
	}
	d := &c.Defaults
	if d.IdleTimeout < 0 || d.MaxLifetime < 0 || d.TurnWatchdog < 0 || d.MemoryBytes < 0 || d.DiskBytes < 0 || d.DiskInodes < 0 || d.MaxSteps < 0 || d.BudgetUSD < 0 {
		return errors.New("session.Config: Defaults has a negative limit; use zero for the built-in default")
	}
	if d.IdleTimeout == 0 {
		d.IdleTimeout = DefaultIdleTimeout
	}
	if d.MaxLifetime == 0 {
		d.MaxLifetime = DefaultMaxLifetime
	}
	if d.TurnWatchdog == 0 {
		d.TurnWatchdog = DefaultTurnWatchdog
	}
	if d.MemoryBytes == 0 {
		d.MemoryBytes = DefaultMemoryBytes
	}
	if d.DiskBytes == 0 {
		d.DiskBytes = DefaultDiskBytes
	}
	if err := (disk.Size{Bytes: d.DiskBytes, Inodes: d.DiskInodes}).WithDefaults().Validate(); err != nil {
		return fmt.Errorf("session.Config: Defaults: %w", err)
	}
	return nil
}

// limits returns req with its zero fields taken from the defaults, or the
// problems with it.
func (c *Config) limits(req store.Limits) (store.Limits, []string) {
	var problems []string
	if req.IdleTimeout < 0 || req.MaxLifetime < 0 || req.TurnWatchdog < 0 {
		problems = append(problems, "limits: durations must be positive (zero takes the server's default)")
	}
	if req.MemoryBytes < 0 || (req.MemoryBytes > 0 && req.MemoryBytes < sandbox.MinMemory) {
		problems = append(problems, fmt.Sprintf("limits.memory_bytes %d: give at least %d (32 MiB), or zero for the default", req.MemoryBytes, int64(sandbox.MinMemory)))
	}
	if req.DiskBytes < 0 || req.DiskInodes < 0 {
		problems = append(problems, "limits.disk_bytes and limits.disk_inodes must be positive (zero: the server's default)")
	}
	if req.MaxSteps < 0 {
		problems = append(problems, "limits.max_steps must be positive (zero: the agent's default)")
	}
	if req.BudgetUSD < 0 {
		problems = append(problems, "limits.budget_usd must be positive (zero: no budget)")
	}
	d := c.Defaults
	if req.IdleTimeout == 0 {
		req.IdleTimeout = d.IdleTimeout
	}
	if req.MaxLifetime == 0 {
		req.MaxLifetime = d.MaxLifetime
	}
	if req.TurnWatchdog == 0 {
		req.TurnWatchdog = d.TurnWatchdog
	}
	if req.MemoryBytes == 0 {
		req.MemoryBytes = d.MemoryBytes
	}
	if req.DiskBytes == 0 {
		req.DiskBytes = d.DiskBytes
		if req.DiskInodes == 0 {
			req.DiskInodes = d.DiskInodes
		}
	}
	if req.DiskInodes == 0 {
		req.DiskInodes = max(req.DiskBytes/disk.BytesPerInode, disk.MinInodes)
	}
	if req.DiskBytes > 0 && req.DiskInodes > 0 {
		if err := (disk.Size{Bytes: req.DiskBytes, Inodes: req.DiskInodes}).Validate(); err != nil {
			problems = append(problems, "limits: "+err.Error())
		}
	}
	if req.MaxSteps == 0 {
		req.MaxSteps = d.MaxSteps
	}
	if req.BudgetUSD == 0 {
		req.BudgetUSD = d.BudgetUSD
	}
	return req, problems
}

// Clock is the time source of the session layer. Tests inject one they move
// by hand; everything that waits for a time waits on At.
type Clock interface {
	Now() time.Time
	// At returns a channel that receives once when the clock reaches t (at
	// once if it has), and a function that releases the timer.
	At(t time.Time) (<-chan time.Time, func())
}

// RealClock is the wall clock.
type RealClock struct{}

// Now implements Clock.
func (RealClock) Now() time.Time { return time.Now() }

// At implements Clock.
func (RealClock) At(t time.Time) (<-chan time.Time, func()) {
	tm := time.NewTimer(time.Until(t))
	return tm.C, func() { tm.Stop() }
}

func (c *Config) refreshEvery() time.Duration {
	if c.RefreshEvery == 0 {
		return DefaultRefreshEvery
	}
	return c.RefreshEvery
}
