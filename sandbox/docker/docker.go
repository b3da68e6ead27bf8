// Package docker is the "docker" sandbox backend: each box is a container on a
// dockerd running on this machine, with the same in-box agent as every other
// backend as its PID 1.
//
// # Shape
//
// Start creates a container from the box's image with the entrypoint replaced by
// the static harvest-agent binary, bind-mounted read-only from the host at
// /.harvest/bin/harvest-agent. The agent listens on a unix socket in a per-box
// run dir that is bind-mounted at /.harvest/run; Harvest dials the host side of
// that socket. Because the connection is a unix socket on a shared directory,
// not TCP, it works with network mode "none": the box gets only a loopback
// interface.
//
//	<RunDir>/<id>/             0700, ours (root)
//	<RunDir>/<id>/handle.json  0600: the Handle, for List after a crash
//	<RunDir>/<id>/run/         0700, the box user's, mounted at /.harvest/run
//	<RunDir>/<id>/run/agent.sock
//
// The box user must own the directory the agent creates its socket in, so that
// directory is writable by the box; handle.json sits one level up, where the
// box cannot reach it (a box able to rewrite its own handle could point a
// later Destroy at another container or host directory).
//
// # The peer check
//
// Since the box user owns /.harvest/run, a command in the box can replace
// agent.sock: with its own listener, or with a symlink to another box's socket
// (or any socket on the host; the host side follows symlinks when it dials).
// So after dialing, Harvest asks the kernel who created the listening socket
// (SO_PEERCRED) and refuses the connection unless that pid is the container's
// PID 1 as dockerd reports it (State.Pid). Nothing is sent on a refused
// connection. This needs Harvest to see dockerd's pid namespace: it does when
// both run on the host (a Harvest inside a container with the docker socket
// mounted would be refused every time).
//
// # Isolation and limits
//
//   - network "none", every capability dropped, no-new-privileges, a private
//     IPC namespace, the box user from the Spec (never root).
//   - read-only root filesystem; writable are the workspaces (bind mounts at
//     /workspace/NAME), /tmp and the box user's HOME (tmpfs, fresh per box,
//     charged to the box's memory limit, exec allowed: builds run what they
//     write there), and /.harvest/run.
//   - disk: with Spec.DiskDir, /tmp and HOME are binds of DiskDir/tmp and
//     DiskDir/home instead, on the box's disk (package sandbox/disk), so
//     they count against its limits like the workspaces on it. dockerd's
//     own storage limit (--storage-opt size, overlay2 on xfs with pquota
//     only) would bound just the writable layer, which a box with a
//     read-only root does not write to.
//   - the spec's Mounts are read-only bind mounts, not recursive: a
//     filesystem mounted below a host path is not shown (its mount point's
//     own content is), because dockerd before 25 makes only the top of a
//     recursive bind read-only. A box path may be anywhere the spec allows,
//     over the image's own files too; dockerd creates missing mount points.
//   - memory: Limits.MemoryBytes, with memory+swap set to the same value (no
//     swap). The kernel OOM-kills a command, not the agent (it raises its
//     commands' oom_score_adj) and the agent reports it (ExitStatus.OOMKilled).
//   - pids: Limits.Pids + sandbox.AgentPidsReserve, so the agent's own threads
//     do not eat into the caller's budget.
//   - cpus: Limits.CPUs as NanoCPUs (0: no cap; a cap of at least every CPU
//     this machine has is no cap either, and dockerd would refuse it).
//   - no docker-init (the agent is PID 1 and reaps), no restart policy, no
//     auto-remove (Destroy removes the container), image healthchecks disabled,
//     the stop signal forced to SIGTERM (the agent's cue to end the box).
//
// # gVisor (Config.Runtime "runsc")
//
// With runsc, dockerd runs each box under gVisor: a user-space kernel (the
// sentry) implements the box's syscalls, so they never reach the host
// kernel directly, and a kernel bug reachable from a box is no longer a way
// out of it. Everything above holds (the same spec, the same agent), with
// the differences RuntimeCaveats lists and these: the agent's socket on the
// host belongs to runsc's gofer, so the peer check accepts the gofer of
// the box's own sandbox (gVisorGofer); the box's processes are not host
// processes. runsc must be registered with dockerd with --network=none
// (boxes have no network) and --host-uds=create (the agent's socket must be
// reachable from the host); scripts/setup does it.
//
// # Requirements
//
// dockerd must run as root on this machine, without userns-remap (rootless
// docker is not supported): box uids are host uids, so files a box writes in a
// workspace belong to the Spec's user, and the agent can create its socket in
// the run dir Harvest gave that user. Harvest runs as root, or (in the docker
// group) with the box user set to its own uid.
//
// # Images
//
// Harvest never pulls: the image must already be on the dockerd (build
// harvest/base:bookworm with scripts/build-base-image: Debian bookworm with
// build-essential, Python, Node.js, Go and the usual command-line tools; or
// docker/kitchen-sink, which adds Rust and Bun but needs a registry). Any
// Linux image works as long as it provides:
//
//   - a /workspace directory (the default working directory when the Spec has
//     no workspace; Start fails with a clear error if it is missing);
//   - anything the box's commands need (a shell, git, ...). The agent itself
//     is static and needs nothing from the image.
//
// dockerd creates the mount points /.harvest/bin/harvest-agent, /.harvest/run,
// /workspace/NAME, /tmp and HOME in the container's own layer even with a
// read-only root filesystem, so images need not have them (the base images
// create them anyway). The image's ENV is kept unless the Spec's environment
// sets the same variable (PATH always is: put tools in the default PATH), and
// dockerd adds HOSTNAME. HOME is an empty tmpfs, so nothing the image keeps in
// the home directory is visible in a box. Avoid VOLUME in box images: dockerd
// gives each a writable anonymous volume outside the box's limits (Destroy
// removes them).
//
// # Warm boxes (Config.PoolSize)
//
// A cold box spends about 350 ms in dockerd (`docker create`, `docker
// start`: runc's namespaces, cgroups and mounts, or gVisor's sentry and
// gofer) before its agent listens. A server keeps Config.PoolSize
// containers started ahead of demand, their agents listening but
// unclaimed (pool.go), so that a create costs a claim of a few
// milliseconds. The package's default is no pool (right for one-shot use
// like `harvest sandbox run`); `harvest serve --pool N` (default 2) sets
// it, and the pool starts with the server's first box.
//
// Why slots with rslave propagation: what a box is made of that differs
// per request, its workspaces and its /tmp and HOME (on its disk, or
// fresh tmpfs), are mounts, and dockerd fixes a container's mounts at
// create; a running container without capabilities cannot mount anything
// itself. Mount propagation is the one way to hand it new mounts: a warm
// container binds three empty directories of a per-box slot on the host
// at /workspace, /tmp and HOME with rslave propagation, and the claim
// mounts the box's workspaces, /tmp and HOME below them on the host,
// where they show up in the running box (slot.go). Slave, not shared:
// nothing goes from the box to the host. The slot is a shared bind mount
// of itself, because propagation needs a shared source and dockerd
// refuses rslave from a private one (the run dir's filesystem may well be
// private: / is, on the machine this was developed on). Each mount the claim
// makes is then made private, as dockerd's binds of a cold box are
// (rprivate): later host mounts do not reach the box. /workspace itself
// is made read-only on the host, not by dockerd: under gVisor a read-only
// docker mount makes everything later mounted below it read-only too.
//
// Why `docker update` and `docker rename`: a box's limits (memory and
// memory+swap, pids, CPUs) are the request's, and the warm container was
// made before the request, so the claim sets them with `docker update`,
// which changes a running container's cgroup; its name is renamed to
// harvest-ID, the cold box's, so that box ids stay unique through
// dockerd (a rename to a name in use is refused as a cold create is) and
// Recover, Destroy and `docker ps` find it as any box. runsc has no
// update command (dockerd's call fails), so under gVisor warm boxes keep
// the default limits they were made with and serve only boxes that ask
// for those; a box asking for other limits starts cold. gVisor also does
// not see a mount made on the root of a bind after the start (its gofer
// holds that directory open), so there a warm box's /tmp and HOME are
// dockerd's tmpfs from the start, and a box with a disk starts cold
// (slot.go, lateRoots).
//
// Ownership: labels cannot change after create. A warm container is
// labelled with the provider's instance (LabelPool, LabelOwner; package
// owner): an instance's hold ends with its process, which is how warm
// boxes die with the server that made them (see pool.go: Close; after a
// kill -9 the next pool on the run dir or `harvest sandbox prune`). A
// claimed box's owner (the server's shared owner, as a cold box's label
// would say) is recorded in its run dir, written before the run dir takes
// the box's name; ListOwned reads it there for a container made warm. Its
// LabelBox stays the warm name, which its handle records (Pool) with its
// slot.
//
// A warm box has the same container settings as a cold one (no
// capabilities, no network, read-only root, no-new-privileges, the same
// runtime); the conformance and isolation suites run on both, under runc
// and gVisor. It is claimed once (its agent refuses a second claim) and
// destroyed with its box: nothing of one box is in another. What differs,
// none of it isolation: the host name is "box" (HOSTNAME in the
// environment is the box's own); the container does not carry
// Spec.Labels (the handle does); an image with files in /workspace gets
// no pool (the slot would hide them); a spec with another image, user or
// HOME, or with read-only Mounts (a CLI agent's session has one), starts
// cold.
//
// # Lifecycle
//
// Containers outlive Harvest: dockerd is their parent. Recover inspects the
// container and reconnects (with the peer check); Stop is `docker stop` with the
// grace as timeout (dockerd sends SIGTERM to the agent, which SIGTERMs every
// process, then SIGKILL after the grace); Destroy force-removes the container
// and the run dir. Containers carry the labels dev.harvest.managed=true,
// dev.harvest.box=ID and dev.harvest.rundir=RUNDIR, so List finds the boxes of
// this RunDir even when their run dir is gone (after a reboot wiped /run).
package docker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/owner"
)

// Name is the backend's name.
const Name = "docker"

// DefaultImage is the image boxes run when neither the Spec nor the Config
// names one (built by scripts/build-base-image).
const DefaultImage = "harvest/base:bookworm"

// Container labels. List finds boxes by them.
const (
	LabelManaged  = "dev.harvest.managed"
	LabelBox      = "dev.harvest.box"
	LabelRunDir   = "dev.harvest.rundir"
	LabelCreated  = "dev.harvest.created"
	LabelDeadline = "dev.harvest.deadline"
	// LabelOwner names the owner (package owner) the box was made under.
	LabelOwner = "dev.harvest.owner"
)

// warmPool is the provider's pool of warm boxes (nil without one),
// started by the first call: it reaps the warm boxes of dead Harvests on
// the run dir first (reapDead), then fills.
func (p *Provider) warmPool() *pool {
	if p.cfg.PoolSize <= 0 {
		return nil
	}
	p.mu.Lock()
	started := p.pooled
	p.pooled = true
	pl := p.pool
	p.mu.Unlock()
	if started {
		return pl
	}
	inst, err := p.instance()
	if err != nil {
		p.log.Warn("keeping warm boxes", "err", err)
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.pool = newPool(p, p.cfg.PoolSize, inst)
	return p.pool
}

// Paths inside a box.
const (
	agentPath = "/.harvest/bin/harvest-agent"
	runMount  = "/.harvest/run"
	sockName  = "agent.sock"
)

// Config configures the docker backend. The zero value works on a machine
// with a local dockerd and the base image built.
type Config struct {
	// Host is dockerd's address. Default: $DOCKER_HOST (with the other
	// DOCKER_* variables: TLS, API version), else unix:///var/run/docker.sock.
	// dockerd must run on this machine: boxes bind-mount host paths.
	Host string
	// Image is the image of boxes whose Spec names none (default
	// DefaultImage).
	Image string
	// RunDir holds per-box run dirs (default sandbox.DefaultRunDir("docker")).
	RunDir string
	// AgentBinary is the static harvest-agent (default sandbox.AgentBinary).
	AgentBinary string
	// Runtime is the OCI runtime dockerd runs boxes with ("" dockerd's
	// default, runc): "runsc" for gVisor, which must be registered with
	// dockerd (its daemon.json "runtimes"; scripts/setup does it).
	Runtime string
	// Logger receives warnings (default slog.Default()).
	Logger *slog.Logger
	// Owner is the owner (package owner) every box this provider starts is
	// labelled with (LabelOwner), which the caller holds: a server's
	// shared owner. Default: the provider's own instance, made at the
	// first Start and released by Close (a one-shot command's boxes).
	Owner string
	// OwnersDir holds the owners' lock files (package owner). Default:
	// owner.DirFor(RunDir): with the default run dirs, the one every
	// backend shares and harvest sandbox prune looks in.
	OwnersDir string
	// PoolSize is how many boxes to keep started ahead of demand (see
	// pool.go), from the first Start on. 0: none, every Start makes its
	// container (right for one-shot use like `harvest sandbox run`); a
	// server sets a few (harvest serve --pool, default 2). Close destroys
	// them.
	PoolSize int
}

// Provider runs boxes as docker containers. It is safe for concurrent use.
type Provider struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	cli    *client.Client // created on first use
	cliErr error
	inst   *owner.Hold // made on first need (instance)
	closed bool
	pool   *pool // started by the first Start (warmPool)
	pooled bool  // the pool was started (or refused)
}

var _ sandbox.Provider = (*Provider)(nil)
var _ sandbox.Lister = (*Provider)(nil)

// New returns a docker provider. It does not contact dockerd: Available says
// whether it can be reached.
func New(cfg Config) *Provider {
	cfg.Image = cmp.Or(cfg.Image, DefaultImage)
	cfg.RunDir = cmp.Or(cfg.RunDir, sandbox.DefaultRunDir(Name))
	cfg.OwnersDir = cmp.Or(cfg.OwnersDir, owner.DirFor(cfg.RunDir, Name))
	if abs, err := filepath.Abs(cfg.RunDir); err == nil {
		cfg.RunDir = abs
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Provider{cfg: cfg, log: log.With("sandbox", Name)}
}

// Name implements sandbox.Provider.
func (p *Provider) Name() string { return Name }

// Close destroys the warm boxes and releases the connection to dockerd and
// the provider's instance. Boxes it started keep running: owned by
// Config.Owner, or by no one (the instance's: harvest sandbox prune
// removes them).
func (p *Provider) Close() error {
	p.mu.Lock()
	p.closed = true
	pl := p.pool
	p.pool = nil
	p.mu.Unlock()
	pl.close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inst.Release()
	p.inst = nil
	if p.cli == nil {
		return nil
	}
	err := p.cli.Close()
	p.cli, p.cliErr = nil, nil
	return err
}

// boxOwner is the owner a started box is labelled with: Config.Owner, or
// the provider's instance (made now if need be).
func (p *Provider) boxOwner() (string, error) {
	if p.cfg.Owner != "" {
		return p.cfg.Owner, nil
	}
	return p.instance()
}

// instance is the provider's instance owner, made on first need: the owner
// of its boxes without Config.Owner, and of its warm boxes.
func (p *Provider) instance() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inst == nil {
		if p.closed {
			return "", errors.New("the docker backend is closed")
		}
		h, err := owner.NewInstance(p.cfg.OwnersDir)
		if err != nil {
			return "", fmt.Errorf("owning the box: %w", err)
		}
		p.inst = h
	}
	return p.inst.ID(), nil
}

// client returns the docker client, creating it on first use. Creating it
// does not contact dockerd.
func (p *Provider) client() (*client.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cli != nil || p.cliErr != nil {
		return p.cli, p.cliErr
	}
	opt := client.FromEnv
	if p.cfg.Host != "" {
		opt = client.WithHost(p.cfg.Host)
	}
	p.cli, p.cliErr = client.New(opt)
	if p.cliErr != nil {
		p.cliErr = &sandbox.UnavailableError{Backend: Name,
			Reason: fmt.Sprintf("docker host %q: %v", p.host(), p.cliErr),
			Fix:    "set DOCKER_HOST (or the docker host in the config) to an address like unix:///var/run/docker.sock"}
	}
	return p.cli, p.cliErr
}

// host is dockerd's address as configured, for messages.
func (p *Provider) host() string {
	if p.cfg.Host != "" {
		return p.cfg.Host
	}
	return cmp.Or(os.Getenv(client.EnvOverrideHost), client.DefaultDockerHost)
}

const pingTimeout = 3 * time.Second

// Available implements sandbox.Provider: the agent binary is static, dockerd
// answers, and the configured image is there.
func (p *Provider) Available(ctx context.Context) error {
	if _, err := p.agentBinary(); err != nil {
		return err
	}
	cli, err := p.connectDaemon(ctx)
	if err != nil {
		return err
	}
	if _, err := cli.ImageInspect(ctx, p.cfg.Image); err != nil {
		if cerrdefs.IsNotFound(err) {
			return imageMissing(p.cfg.Image)
		}
		return &sandbox.UnavailableError{Backend: Name, Reason: fmt.Sprintf("inspecting image %s: %v", p.cfg.Image, err)}
	}
	return p.checkRuntime(ctx, cli)
}

// agentBinary finds the agent and checks it runs in any image.
func (p *Provider) agentBinary() (string, error) {
	const fix = "rebuild with CGO_ENABLED=0 go install ./cmd/..."
	bin, err := sandbox.AgentBinary(p.cfg.AgentBinary)
	if err != nil {
		return "", &sandbox.UnavailableError{Backend: Name, Reason: err.Error(), Fix: fix}
	}
	static, err := sandbox.IsStatic(bin)
	if err != nil {
		return "", &sandbox.UnavailableError{Backend: Name, Reason: fmt.Sprintf("agent binary %s: %v", bin, err), Fix: fix}
	}
	if !static {
		return "", &sandbox.UnavailableError{Backend: Name,
			Reason: fmt.Sprintf("agent binary %s is dynamically linked: it cannot run inside an arbitrary image", bin), Fix: fix}
	}
	return bin, nil
}

// connectDaemon pings dockerd (negotiating the API version on first use).
func (p *Provider) connectDaemon(ctx context.Context) (*client.Client, error) {
	cli, err := p.client()
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, p.unreachable(err)
	}
	return cli, nil
}

func (p *Provider) unreachable(err error) error {
	fix := "start it: `dockerd &` (or `systemctl start docker`)"
	if strings.Contains(err.Error(), "permission denied") {
		fix = "run harvest as root, or as a member of the docker group"
	}
	// The client's message repeats the address, and sometimes hides why it
	// could not connect; the dial error says it all.
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		err = op.Err
	} else if cause := dialError(p.host()); cause != nil {
		err = cause
	}
	return &sandbox.UnavailableError{Backend: Name,
		Reason: fmt.Sprintf("cannot reach dockerd at %s: %v", p.host(), err), Fix: fix}
}

// dialError dials a unix or tcp docker host and returns why that fails, or
// nil.
func dialError(host string) error {
	u, err := client.ParseHostURL(host)
	if err != nil {
		return nil
	}
	network := "tcp"
	if u.Scheme == "unix" {
		network = "unix"
	}
	c, err := net.DialTimeout(network, u.Host, pingTimeout)
	if err == nil {
		c.Close()
		return nil
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}

func imageMissing(image string) error {
	return &sandbox.UnavailableError{Backend: Name,
		Reason: fmt.Sprintf("image %s is not on this dockerd (Harvest never pulls images)", image),
		Fix:    "build it: sudo scripts/build-base-image (or docker build -t harvest/kitchen-sink docker/kitchen-sink and set the image)"}
}
