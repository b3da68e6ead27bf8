// Package local is the default sandbox backend: Linux namespaces through
// bubblewrap, limits through cgroups (v1 or v2), no daemon to run.
//
// # Process tree of one box
//
//	harvest ──exec──► harvest-agent sandbox-shim   (root, own session, in the
//	                       │                        box's cgroup; outlives
//	                       │                        harvest; see package shim)
//	                       └─► bwrap (box user, --die-with-parent)
//	                              └─► harvest-agent sandbox-agent  (PID 1 in the box)
//	                                     └─► commands (own process groups)
//
// # Prepare, then claim
//
// A box is made in two steps (pool.go, package shim). Prepare starts the shim
// in the box's cgroup, and bwrap and the agent with no identity and no
// workspaces. Claim gives it its hostname, mounts its workspaces into its
// mount namespace from outside (open_tree, setns, move_mount; done in
// Harvest's own process, shim.Enter, so the shim never locks a thread),
// and tells the agent its id, environment, workdir and deadline. Prepare costs 10-20 ms
// (mostly bwrap's namespaces and two process starts); a claim about one. A
// server keeps a few prepared boxes for the default box user (Config.PoolSize)
// so creating a box costs a claim; otherwise Start does both steps at once.
//
// Harvest talks to the agent over a unix socket that the shim creates in the
// box's run dir (root-only) and hands to the agent as fd 3 through bwrap: the
// box never sees the socket's path and cannot replace it.
//
// # Isolation
//
// bwrap runs as the unprivileged box user (never as root: with --unshare-user a
// root-run bwrap maps the box user onto host root, which could then read
// root-owned files such as /etc/shadow). Flags: --unshare-all (user, pid, net,
// ipc, uts, cgroup namespaces), --disable-userns (no nested user namespaces),
// --die-with-parent, --new-session (no controlling terminal to inject into),
// --as-pid-1 (our agent reaps), --cap-drop ALL; bwrap sets no_new_privs. The
// root filesystem is a read-only directory Harvest builds per box user (see
// root.go): a curated /etc with generated passwd/group/hosts and a copy of the
// agent; on it, /usr read-only, own /proc, minimal /dev, tmpfs /tmp, /dev/shm
// and HOME, the workspaces read-write at /workspace/NAME (nosuid, nodev) in an
// otherwise read-only /workspace, the spec's read-only mounts (mounts.go), and
// the box's own memory cgroup read-only (so the agent can report OOM kills).
// A box with a disk (Spec.DiskDir, package sandbox/disk) gets DiskDir/tmp and
// DiskDir/home mounted over its tmpfs /tmp and HOME by the claim, like its
// workspaces, so what it writes there counts against the disk's limits.
// The agent adds its seccomp filter (package agentd). Nothing is mounted in the
// host's mount namespace.
//
// # Limits and cleanup
//
// Each box has its own cgroup (package cgroups) for memory, pids (plus a
// reserve for the agent's and shim's threads), CPU and the freezer, under a
// parent named after the run dir (Harvests with different run dirs never see
// each other's boxes). The shim joins it before starting bwrap, so nothing in
// the box ever runs outside it. Destroy SIGKILLs the box's PID 1, which ends
// its PID namespace (no fork can race it), waits for the shim to reap bwrap
// and the agent and exit, kills whatever is left in the cgroup, removes the
// cgroup and the run dir: no process, zombie, mount or cgroup is left behind
// (see endBox for why the shim must outlive its box).
//
// An idle box is three processes and 7 to 9 kernel tasks, which is what
// bounds the idle boxes a node holds (pid_max): bwrap (one thread), the
// shim and the agent (Go, GOMAXPROCS=1: the main thread, sysmon and the
// one or two threads the scheduler started on a syscall; neither parks a
// thread in a blocking call, catches a signal through os/signal or locks
// a thread, see packages shim and agentd). So Stop asks the agent to end
// the box through its socket (shutdown): it catches no signal.
//
// Each box records its owner (package owner, owners.go): the server that
// made it, whose next start reattaches it, or the provider's own instance.
// Boxes whose owner no longer runs are what `harvest sandbox prune`
// destroys; warm boxes are named for the instance that prepared them and
// die with it (pool.go).
//
// Requirements: root (cgroups, and the shim's mounts into boxes), bubblewrap
// 0.8 or newer (--disable-userns), unprivileged user namespaces, Linux 5.12 or
// newer (mount_setattr). `harvest doctor` checks each and says how to fix it.
package local

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/base/procutil"
	"github.com/harvest-dev/harvest/base/unixsock"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local/cgroups"
	"github.com/harvest-dev/harvest/sandbox/local/shim"
	"github.com/harvest-dev/harvest/sandbox/owner"
)

// Name is the backend's name.
const Name = "local"

// Config configures the local backend.
type Config struct {
	// RunDir holds per-box state (default sandbox.DefaultRunDir("local")).
	RunDir string
	// AgentBinary is the harvest-agent binary (default sandbox.AgentBinary).
	AgentBinary string
	// Bwrap is the bubblewrap binary (default: bwrap in PATH).
	Bwrap string
	// CgroupParent names the parent cgroup of this provider's boxes. Default:
	// "harvest/" and a hash of RunDir, so Harvests with different run dirs on
	// one machine never list (or reap) each other's boxes.
	CgroupParent string
	// PoolSize is how many idle shims to keep ready (see pool.go). 0: none,
	// every Start spawns its own (right for one-shot use like `harvest
	// sandbox run`); a server sets a few. Close releases them.
	PoolSize int
	// Logger receives background errors (refilling the pool). Default: none.
	Logger *slog.Logger
	// Owner is the owner (package owner) every box this provider starts is
	// recorded with, which the caller holds: a server's shared owner, so
	// that its next start owns the boxes it reattaches. Default: the
	// provider's own instance, which ends with Close (a one-shot command's
	// boxes). Warm boxes are always the instance's (pool.go).
	Owner string
	// OwnersDir holds the owners' lock files (package owner). Default:
	// owner.DirFor(RunDir): with the default run dirs, the one every
	// backend shares and harvest sandbox prune looks in.
	OwnersDir string
}

// Provider runs boxes with bubblewrap.
type Provider struct {
	cfg Config

	readyOnce sync.Once
	readyErr  error
	// resolved: bwrap, agent and cg are set (by ready, once; read-only
	// after that).
	resolved atomic.Bool
	bwrap    string
	agent    string
	cg       *cgroups.Manager

	root rootCache
	pool *pool

	mu     sync.Mutex
	shims  map[string]<-chan struct{} // shims we started: closed when reaped
	closed bool
	inst   *owner.Hold // this provider's instance, made on first need (instance)
}

var (
	_ sandbox.Provider = (*Provider)(nil)
	_ sandbox.Lister   = (*Provider)(nil)
)

// New returns a local provider. Nothing is checked until first use; call
// Available for a diagnosis.
func New(cfg Config) *Provider {
	if cfg.RunDir == "" {
		cfg.RunDir = sandbox.DefaultRunDir(Name)
	}
	if cfg.CgroupParent == "" {
		abs, err := filepath.Abs(cfg.RunDir)
		if err != nil {
			abs = cfg.RunDir
		}
		sum := sha256.Sum256([]byte(abs))
		cfg.CgroupParent = "harvest/" + hex.EncodeToString(sum[:])[:12]
	}
	if cfg.OwnersDir == "" {
		cfg.OwnersDir = owner.DirFor(cfg.RunDir, Name)
	}
	return &Provider{cfg: cfg, shims: map[string]<-chan struct{}{}}
}

// Name implements sandbox.Provider.
func (p *Provider) Name() string { return Name }

// WorkspaceLayers implements sandbox.LayerProvider: a workspace's layer is
// an overlay, like HOME's.
func (p *Provider) WorkspaceLayers() bool { return true }

// CgroupParent is the cgroup (relative to each hierarchy's root) that holds
// this provider's boxes.
func (p *Provider) CgroupParent() string { return p.cfg.CgroupParent }

// handleData is the local part of a Handle.
type handleData struct {
	BoxDir string         `json:"box_dir"`
	Cgroup cgroups.Cgroup `json:"cgroup"`
	Shim   procutil.ID    `json:"shim"`
	Agent  procutil.ID    `json:"agent"` // host pid of the box's PID 1
	Root   string         `json:"root"`  // the read-only root it runs on
}

func (p *Provider) boxDir(id string) string { return filepath.Join(p.cfg.RunDir, id) }

// ready resolves bwrap, the agent binary and cgroups, creates the run dir,
// reaps pools of dead Harvests and starts this provider's pool, once.
func (p *Provider) ready() error {
	p.readyOnce.Do(func() {
		r, err := p.resolve()
		if err != nil {
			p.readyErr = err
			return
		}
		p.bwrap, p.agent, p.cg = r.bwrap, r.agent, r.cg
		p.resolved.Store(true)
		if err := sandbox.MkdirRunDir(p.cfg.RunDir); err != nil {
			p.readyErr = fmt.Errorf("local backend run dir: %w", err)
			return
		}
		p.reapDeadWarm()
		// The parent cgroups of a Harvest killed (SIGKILL) with no box
		// left but its warm ones: nothing else removes them (Close never
		// ran). A no-op while any box is there; Create makes them again.
		p.cg.RemoveParent()
		p.pruneRoots()
		if p.cfg.PoolSize > 0 {
			inst, err := p.instance()
			p.mu.Lock()
			switch {
			case err != nil:
				p.log("keeping warm boxes", err)
			case !p.closed:
				p.pool = newPool(p, p.cfg.PoolSize, inst.ID())
			}
			p.mu.Unlock()
		}
	})
	return p.readyErr
}

// Close releases the provider's warm boxes (ended) and its instance.
// Boxes it started keep running: owned by Config.Owner, or by no one (the
// instance's: harvest sandbox prune removes them).
func (p *Provider) Close() error {
	p.mu.Lock()
	p.closed = true
	pl := p.pool
	p.pool = nil
	p.mu.Unlock()
	pl.close()
	p.mu.Lock()
	inst := p.inst
	p.inst = nil
	p.mu.Unlock()
	inst.Release()
	if p.resolved.Load() {
		p.cg.RemoveParent()
	}
	return nil
}

func (p *Provider) log(msg string, err error) {
	if p.cfg.Logger != nil {
		p.cfg.Logger.Warn(msg, "backend", Name, "err", err)
	}
}

// Start implements sandbox.Provider: take a warm box (or prepare one) and
// claim it. See pool.go.
func (p *Provider) Start(ctx context.Context, spec sandbox.Spec) (_ *sandbox.Sandbox, err error) {
	spec, err = sandbox.PrepareSpec(spec)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(spec.ID, poolPrefix) {
		return nil, fmt.Errorf("box id %q: ids starting with %q name the local backend's warm boxes; choose another", spec.ID, poolPrefix)
	}
	if err := p.ready(); err != nil {
		return nil, err
	}
	home := homeOf(spec)
	mounts, err := mountPlan(spec, home)
	if err != nil {
		return nil, err
	}
	var diskMounts []shim.Mount
	if spec.DiskDir != "" {
		if diskMounts, err = diskDirMounts(spec, home, mounts); err != nil {
			return nil, err
		}
	}
	lim := cgroups.Limits{
		MemoryBytes: spec.Limits.MemoryBytes,
		Pids:        spec.Limits.Pids + sandbox.AgentPidsReserve,
		CPUs:        spec.Limits.CPUs,
	}
	dir := p.boxDir(spec.ID)
	own, err := p.boxOwner()
	if err != nil {
		return nil, err
	}
	var w *warmBox
	if len(mounts) == 0 { // warm boxes have no mounts (mounts.go)
		w = p.takeWarm(ctx, spec.User, home)
	}
	if w != nil {
		// Its owner is recorded before it takes the box's name: a box
		// named for no pool is never without one (ListOwned).
		if err := owner.Record(filepath.Join(p.cfg.RunDir, w.name), own); err != nil {
			w.discard(filepath.Join(p.cfg.RunDir, w.name))
			return nil, err
		}
		if err := os.Rename(filepath.Join(p.cfg.RunDir, w.name), dir); err != nil {
			w.discard(filepath.Join(p.cfg.RunDir, w.name))
			if errors.Is(err, os.ErrExist) {
				return nil, fmt.Errorf("box %s already exists: choose another id or destroy it first", spec.ID)
			}
			return nil, err
		}
		if err := w.cg.Rename(spec.ID); err != nil {
			w.discard(dir)
			return nil, err
		}
		if err := w.cg.SetLimits(lim); err != nil {
			w.discard(dir)
			return nil, fmt.Errorf("setting the box's limits: %w", err)
		}
	} else if w, err = p.prepareBox(ctx, spec.ID, own, spec.User, home, lim, mounts); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.discard(dir)
		}
	}()
	p.mu.Lock()
	p.shims[spec.ID] = w.reaped
	p.mu.Unlock()

	now := time.Now()
	deadline := now.Add(spec.Timeout)
	claim := shim.Claim{BoxDir: dir, Hostname: spec.ID, Deadline: deadline.Unix()}
	for _, ws := range spec.Workspaces {
		m := shim.Mount{Source: ws.HostPath, Target: ws.Path()}
		if ws.Layer != "" {
			m.Lower, m.Work = ws.Layer, sandbox.WorkspaceLayerWork(spec, ws)
		}
		claim.Workspaces = append(claim.Workspaces, m)
	}
	claim.Workspaces = append(claim.Workspaces, diskMounts...)
	if err := shim.Enter(w.state.Agent, w.user.UID, w.user.GID, claim); err != nil {
		return nil, fmt.Errorf("starting box %s: %w", spec.ID, err)
	}
	if _, err := w.exchange(ctx, claim); err != nil {
		return nil, fmt.Errorf("starting box %s: %w (shim log: %s)", spec.ID, err, logTail(filepath.Join(dir, "shim.log")))
	}
	w.in.Close()
	w.outF.Close()

	h := sandbox.Handle{ID: spec.ID, Backend: Name, Created: now, Deadline: deadline, Spec: spec}
	data := handleData{
		BoxDir: dir, Cgroup: *w.cg, Root: w.root,
		Shim:  procutil.ID{PID: w.state.Shim.PID, Start: w.state.Shim.Start},
		Agent: procutil.ID{PID: w.state.Agent.PID, Start: w.state.Agent.Start},
	}
	h.Data, _ = json.Marshal(data)
	nc, err := unixsock.Dial(ctx, filepath.Join(dir, "agent.sock"))
	if err != nil {
		return nil, fmt.Errorf("connecting to the agent of box %s: %w", spec.ID, err)
	}
	sb, err := sandbox.ConnectClaim(ctx, p, h, nc)
	if err != nil {
		return nil, fmt.Errorf("%w (agent log: %s)", err, logTail(filepath.Join(dir, "agent.log")))
	}
	if err := writeFile(filepath.Join(dir, "handle.json"), h); err != nil {
		sb.Close()
		return nil, err
	}
	return sb, nil
}

// PoolStats says how the warm pool is doing (sandbox.Pooler): zero
// without one (Config.PoolSize 0, or once closed).
func (p *Provider) PoolStats() sandbox.PoolStats {
	p.mu.Lock()
	pl := p.pool
	p.mu.Unlock()
	if pl == nil {
		return sandbox.PoolStats{}
	}
	return sandbox.PoolStats{Size: pl.size, Ready: len(pl.idle), Hits: pl.hits.Load(), Misses: pl.misses.Load()}
}

func (p *Provider) takeWarm(ctx context.Context, u sandbox.User, home string) *warmBox {
	p.mu.Lock()
	pl := p.pool
	p.mu.Unlock()
	return pl.take(ctx, u, home)
}

// logTail returns the last lines of a box's agent log, for error messages.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return "empty"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

func (p *Provider) decode(h sandbox.Handle) (handleData, error) {
	var d handleData
	if h.Backend != Name {
		return d, fmt.Errorf("handle of box %s is for the %s backend, not %s", h.ID, h.Backend, Name)
	}
	if len(h.Data) > 0 {
		if err := json.Unmarshal(h.Data, &d); err != nil {
			return d, fmt.Errorf("handle of box %s: %w", h.ID, err)
		}
	}
	if d.BoxDir == "" { // a handle from List for an orphan, or a bare id
		d.BoxDir = p.boxDir(h.ID)
		if b, err := os.ReadFile(filepath.Join(d.BoxDir, "handle.json")); err == nil {
			var full sandbox.Handle
			if json.Unmarshal(b, &full) == nil && full.ID == h.ID {
				_ = json.Unmarshal(full.Data, &d)
			}
		}
	}
	if len(d.Cgroup.Dirs) == 0 && p.ready() == nil {
		d.Cgroup = *p.cg.Open(h.ID)
	}
	return d, nil
}

// Recover implements sandbox.Provider.
func (p *Provider) Recover(ctx context.Context, h sandbox.Handle) (*sandbox.Sandbox, error) {
	d, err := p.decode(h)
	if err != nil {
		return nil, err
	}
	return sandbox.RecoverUnix(ctx, p, h, d.Agent, filepath.Join(d.BoxDir, "agent.sock"))
}

// Stop implements sandbox.Provider.
func (p *Provider) Stop(ctx context.Context, h sandbox.Handle, grace time.Duration) error {
	d, err := p.decode(h)
	if err != nil {
		return err
	}
	if d.Agent.Alive() {
		// The agent SIGTERMs every process in the box and exits when they are
		// gone; the box (a pid namespace) ends with it. Asked through its
		// socket, not by a SIGTERM: it catches no signal (--no-signals, see
		// package agentd). An agent that cannot be reached is killed below.
		gctx, cancel := context.WithTimeout(ctx, grace)
		dctx, dcancel := context.WithTimeout(gctx, 2*time.Second)
		sb, err := sandbox.DialUnix(dctx, p, h, filepath.Join(d.BoxDir, "agent.sock"))
		dcancel()
		if err == nil {
			_ = sb.Shutdown(gctx, grace)
			sb.Close()
			_ = d.Agent.WaitGone(gctx)
		}
		cancel()
	}
	if err := p.endBox(ctx, h.ID, d); err != nil {
		return fmt.Errorf("killing box %s: %w", h.ID, err)
	}
	return nil
}

// endBox kills what is left of a box so that its shim reaps it, and waits
// for the shim. SIGKILL to the box's PID 1 (the agent) ends its whole PID
// namespace: no fork can race it, as the kernel gives no new pid in a
// namespace whose init is dying. bwrap exits with it, and the shim,
// bwrap's parent and the agent's subreaper, reaps both, writes exit.json
// and exits. Only then is the cgroup killed, for anything left (normally
// nothing; all of it if the agent was not known).
//
// The cgroup is not killed first: it holds the shim too, and a shim killed
// with its box never reaps bwrap and the agent. The kernel hands them to
// PID 1 of Harvest's PID namespace as zombies: an init reaps them, but
// `harvest serve` as PID 1 (a container without an init) does not, and they
// piled up, two per box.
func (p *Provider) endBox(ctx context.Context, id string, d handleData) error {
	_ = d.Agent.Signal(syscall.SIGKILL) // ErrGone: it has ended already
	p.waitShim(ctx, id, d.Shim)
	if cg := d.Cgroup; !cg.Empty() {
		if err := cg.Kill(ctx); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// waitShim waits (briefly) for a box's shim to exit after its box ended,
// killing it if it lingers (which orphans whatever it did not reap).
func (p *Provider) waitShim(ctx context.Context, id string, shimID procutil.ID) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p.mu.Lock()
	reaped := p.shims[id]
	delete(p.shims, id)
	p.mu.Unlock()
	if procutil.WaitChild(ctx, reaped, shimID) != nil && shimID.PID > 0 {
		_ = shimID.Signal(syscall.SIGKILL)
	}
}

// Destroy implements sandbox.Provider. It takes warm boxes' handles too
// (ListOwned).
func (p *Provider) Destroy(ctx context.Context, h sandbox.Handle) error {
	if warmOwner(h.ID) != "" && len(h.Data) == 0 {
		if err := p.ready(); err != nil {
			return err
		}
		return p.destroyWarm(ctx, h.ID)
	}
	d, err := p.decode(h)
	if err != nil {
		return err
	}
	if err := p.endBox(ctx, h.ID, d); err != nil {
		return fmt.Errorf("killing box %s: %w", h.ID, err)
	}
	cg := d.Cgroup
	if err := cg.Remove(ctx); err != nil {
		return fmt.Errorf("destroying box %s: %w", h.ID, err)
	}
	if err := removeBoxDir(d.BoxDir); err != nil {
		return fmt.Errorf("destroying box %s: %w", h.ID, err)
	}
	if p.ready() == nil {
		p.cg.RemoveParent() // a no-op while other boxes (or warm ones) remain
	}
	return nil
}

// removeBoxDir removes a box's run dir. (Nothing is ever mounted there on the
// host: workspaces are mounted inside the box's own mount namespace.)
func removeBoxDir(dir string) error {
	if dir == "" {
		return nil
	}
	return os.RemoveAll(dir)
}

// List implements sandbox.Lister: boxes with a run dir, and cgroups left
// without one.
func (p *Provider) List(ctx context.Context) ([]sandbox.Handle, error) {
	seen := map[string]bool{}
	var out []sandbox.Handle
	entries, err := os.ReadDir(p.cfg.RunDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "etc" || e.Name() == "root" || strings.HasPrefix(e.Name(), ".") || strings.HasPrefix(e.Name(), poolPrefix) {
			continue
		}
		h := sandbox.Handle{ID: e.Name(), Backend: Name}
		if b, err := os.ReadFile(filepath.Join(p.cfg.RunDir, e.Name(), "handle.json")); err == nil {
			var full sandbox.Handle
			if json.Unmarshal(b, &full) == nil && full.ID == e.Name() {
				h = full
			}
		}
		seen[h.ID] = true
		out = append(out, h)
	}
	if p.ready() == nil {
		ids, err := p.cg.List()
		if err != nil {
			return out, err
		}
		for _, id := range ids {
			if !seen[id] && !strings.HasPrefix(id, poolPrefix) {
				out = append(out, sandbox.Handle{ID: id, Backend: Name})
			}
		}
	}
	return out, nil
}

// pruneRoots removes built roots no box of this run dir uses any more.
func (p *Provider) pruneRoots() {
	inUse := map[string]bool{}
	ents, _ := os.ReadDir(p.cfg.RunDir)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(p.cfg.RunDir, e.Name(), "handle.json"))
		if err != nil {
			continue
		}
		var h sandbox.Handle
		var d handleData
		if json.Unmarshal(b, &h) == nil && json.Unmarshal(h.Data, &d) == nil && d.Root != "" {
			inUse[d.Root] = true
		}
	}
	pruneRoots(p.cfg.RunDir, inUse)
}

func writeFile(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}
