// Package local is the default sandbox backend: Linux namespaces through
// bubblewrap, limits through cgroups (v1 or v2), no daemon to run.
//
// # Process tree of one box
//
//	harvest ──exec──► harvest-agent sandbox-shim   (root, own session, private
//	                       │                        mount namespace; outlives
//	                       │                        harvest; see package shim)
//	                       └─► bwrap (box user, --die-with-parent)
//	                              └─► harvest-agent sandbox-agent  (PID 1 in the box)
//	                                     └─► commands (own process groups)
//
// Harvest talks to the agent over a unix socket it creates itself in the box's
// run dir (root-only) and hands to the agent as fd 3 through shim and bwrap: the
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
// filesystem is a read-only tmpfs root with read-only /usr (and the merged-/usr
// symlinks), a curated read-only /etc with generated passwd/group/hosts, own
// /proc and minimal /dev, tmpfs /tmp, /dev/shm and HOME, the workspaces
// read-write at /workspace/NAME, the agent binary read-only, and the box's own
// memory cgroup read-only (so the agent can report OOM kills). The agent adds
// its seccomp filter (package agentd).
//
// # Limits and cleanup
//
// Each box has its own cgroup (package cgroups) for memory, pids (plus a reserve
// for the agent's threads), CPU and the freezer. The shim joins it before
// starting bwrap, so nothing in the box ever runs outside it. Destroy freezes
// and kills the whole cgroup (no fork can race it), waits for the shim, removes
// the cgroup and the run dir: no process, mount or cgroup is left behind.
//
// Requirements: root (cgroups and the shim's private mounts), bubblewrap 0.8 or
// newer (--disable-userns), unprivileged user namespaces enabled. `harvest doctor` checks each and says how to fix it.
package local

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/internal/procutil"
	"github.com/harvest-dev/harvest/internal/unixsock"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local/cgroups"
	"github.com/harvest-dev/harvest/sandbox/local/shim"
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
	// CgroupParent names the parent cgroup of all boxes (default "harvest").
	CgroupParent string
}

// Provider runs boxes with bubblewrap.
type Provider struct {
	cfg Config

	readyOnce sync.Once
	readyErr  error
	bwrap     string
	agent     string
	cg        *cgroups.Manager

	mu    sync.Mutex
	shims map[string]chan struct{} // shims we started: closed when reaped
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
		cfg.CgroupParent = "harvest"
	}
	return &Provider{cfg: cfg, shims: map[string]chan struct{}{}}
}

// Name implements sandbox.Provider.
func (p *Provider) Name() string { return Name }

// handleData is the local part of a Handle.
type handleData struct {
	BoxDir string         `json:"box_dir"`
	Cgroup cgroups.Cgroup `json:"cgroup"`
	Shim   procutil.ID    `json:"shim"`
	Agent  procutil.ID    `json:"agent"` // host pid of the box's PID 1
}

func (p *Provider) boxDir(id string) string { return filepath.Join(p.cfg.RunDir, id) }

// ready resolves bwrap, the agent binary and cgroups once.
func (p *Provider) ready() error {
	p.readyOnce.Do(func() { p.readyErr = p.check(false) })
	return p.readyErr
}

// Start implements sandbox.Provider.
func (p *Provider) Start(ctx context.Context, spec sandbox.Spec) (_ *sandbox.Sandbox, err error) {
	spec, err = sandbox.PrepareSpec(spec)
	if err != nil {
		return nil, err
	}
	if err := p.ready(); err != nil {
		return nil, err
	}
	if err := sandbox.MkdirRunDir(p.cfg.RunDir); err != nil {
		return nil, fmt.Errorf("local backend run dir: %w", err)
	}
	dir := p.boxDir(spec.ID)
	if err := os.Mkdir(dir, 0o711); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("box %s already exists: choose another id or destroy it first", spec.ID)
		}
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	var cg *cgroups.Cgroup
	var shimCmd *exec.Cmd
	defer func() {
		if err == nil {
			return
		}
		if shimCmd != nil && shimCmd.Process != nil {
			_ = shimCmd.Process.Kill() // bwrap and the box die with it
		}
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if cg != nil {
			_ = cg.Kill(cctx)
			p.waitShim(cctx, spec.ID, procutil.ID{})
			_ = cg.Remove(cctx)
		}
		_ = removeBoxDir(dir)
	}()

	stage := filepath.Join(dir, "stage")
	agentStage := filepath.Join(stage, "harvest-agent")
	if err := os.Mkdir(stage, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(agentStage, nil, 0o755); err != nil {
		return nil, err
	}
	binds := []shim.Bind{{Source: p.agent, Target: agentStage, ReadOnly: true}}
	for _, w := range spec.Workspaces {
		t := stagedWorkspace(stage, w.Name)
		if err := os.MkdirAll(t, 0o755); err != nil {
			return nil, err
		}
		binds = append(binds, shim.Bind{Source: w.HostPath, Target: t})
	}
	etcDir := filepath.Join(p.cfg.RunDir, "etc", fmt.Sprintf("%d-%d", spec.User.UID, spec.User.GID))
	if err := writeEtc(etcDir, spec); err != nil {
		return nil, fmt.Errorf("writing the box's /etc files: %w", err)
	}

	cg, err = p.cg.Create(spec.ID, cgroups.Limits{
		MemoryBytes: spec.Limits.MemoryBytes,
		Pids:        spec.Limits.Pids + sandbox.AgentPidsReserve,
		CPUs:        spec.Limits.CPUs,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the box's cgroup: %w", err)
	}

	sockPath := filepath.Join(dir, "agent.sock")
	l, err := unixsock.Listen(sockPath)
	if err != nil {
		return nil, fmt.Errorf("creating the agent socket: %w", err)
	}
	lf, err := l.File()
	l.Close()
	if err != nil {
		return nil, err
	}
	// Closed as soon as the shim has its copy: if the box dies, nobody may
	// hold the listener, or a hello would wait in its backlog forever.
	defer lf.Close()

	now := time.Now()
	deadline := now.Add(spec.Timeout)
	layout := &bwrapLayout{
		spec: spec, etcDir: etcDir, stageDir: stage, agentStage: agentStage,
		cgroupDir: cg.MemoryDir(), cgroupV2: cg.Version == 2,
		listenFD: 3, infoFD: 4, deadline: deadline.UnixMilli(),
	}
	cfg := shim.Config{
		BoxDir: dir, Bwrap: p.bwrap, Args: layout.args(), ExtraFDs: 1,
		UID: spec.User.UID, GID: spec.User.GID, Cgroup: *cg, Binds: binds,
		Deadline: deadline.Unix(), LogLimit: 1 << 20,
	}
	cfgPath := filepath.Join(dir, "shim.json")
	if err := writeFile(cfgPath, cfg); err != nil {
		return nil, err
	}

	shimLog, err := os.OpenFile(filepath.Join(dir, "shim.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer shimLog.Close()
	shimCmd = exec.Command(p.agent, "sandbox-shim", "--config", cfgPath)
	shimCmd.ExtraFiles = []*os.File{lf}
	shimCmd.Stderr = shimLog
	shimCmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	shimCmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Unshareflags: syscall.CLONE_NEWNS}
	// Our own pipe, not StdoutPipe: Wait (in the reaper below) would close
	// that under the reader when a failing shim exits right after reporting.
	out, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer out.Close()
	shimCmd.Stdout = outW
	err = shimCmd.Start()
	outW.Close()
	lf.Close()
	if err != nil {
		return nil, fmt.Errorf("starting the box's shim: %w", err)
	}
	reaped := make(chan struct{})
	p.mu.Lock()
	p.shims[spec.ID] = reaped
	p.mu.Unlock()
	cmd := shimCmd
	go func() { // owned by the box: ends when the shim exits
		_ = cmd.Wait()
		close(reaped)
	}()

	// Read the shim's report and say hello to the agent at the same time: the
	// socket already exists, so the hello waits in its backlog until the agent
	// accepts.
	type stateResult struct {
		st  shim.State
		err error
	}
	stateCh := make(chan stateResult, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadBytes('\n')
		var st shim.State
		if err == nil {
			err = json.Unmarshal(line, &st)
		}
		if err != nil {
			err = fmt.Errorf("the box's shim exited without reporting (see %s): %w", filepath.Join(dir, "shim.log"), err)
		} else if st.Error != "" {
			err = fmt.Errorf("starting box %s: %s", spec.ID, st.Error)
		}
		stateCh <- stateResult{st, err}
	}()
	h := sandbox.Handle{ID: spec.ID, Backend: Name, Created: now, Deadline: deadline, Spec: spec}
	type connResult struct {
		sb  *sandbox.Sandbox
		err error
	}
	connCh := make(chan connResult, 1)
	cctx, cancelConn := context.WithCancel(ctx)
	defer cancelConn()
	go func() {
		sb, err := p.connect(cctx, h, sockPath)
		connCh <- connResult{sb, err}
	}()
	var st stateResult
	select {
	case st = <-stateCh:
	case <-ctx.Done():
		cancelConn()
		if r := <-connCh; r.sb != nil {
			r.sb.Close()
		}
		return nil, ctx.Err()
	}
	if st.err != nil {
		cancelConn()
		if r := <-connCh; r.sb != nil {
			r.sb.Close()
		}
		return nil, st.err
	}
	var r connResult
	select {
	case r = <-connCh:
	case <-reaped:
		// The shim exits when bwrap does: the box died while starting.
		cancelConn()
		if r := <-connCh; r.sb != nil {
			r.sb.Close()
		}
		return nil, fmt.Errorf("box %s exited while starting: %s", spec.ID, logTail(filepath.Join(dir, "agent.log")))
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w (agent log: %s)", r.err, logTail(filepath.Join(dir, "agent.log")))
	}
	data := handleData{
		BoxDir: dir, Cgroup: *cg,
		Shim:  procutil.ID{PID: st.st.Shim.PID, Start: st.st.Shim.Start},
		Agent: procutil.ID{PID: st.st.Agent.PID, Start: st.st.Agent.Start},
	}
	h.Data, _ = json.Marshal(data)
	if err := writeFile(filepath.Join(dir, "handle.json"), h); err != nil {
		r.sb.Close()
		return nil, err
	}
	r.sb.SetHandle(h)
	return r.sb, nil
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

func (p *Provider) connect(ctx context.Context, h sandbox.Handle, sock string) (*sandbox.Sandbox, error) {
	nc, err := unixsock.Dial(ctx, sock)
	if err != nil {
		return nil, fmt.Errorf("connecting to the agent of box %s: %w", h.ID, err)
	}
	return sandbox.Connect(ctx, p, h, nc)
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
	if !d.Agent.Alive() {
		return nil, fmt.Errorf("box %s: %w", h.ID, sandbox.ErrNotFound)
	}
	sb, err := p.connect(ctx, h, filepath.Join(d.BoxDir, "agent.sock"))
	if err != nil && boxEnding(ctx, d.Agent) {
		return nil, fmt.Errorf("box %s has ended: %w", h.ID, sandbox.ErrNotFound)
	}
	return sb, err
}

// Stop implements sandbox.Provider.
func (p *Provider) Stop(ctx context.Context, h sandbox.Handle, grace time.Duration) error {
	d, err := p.decode(h)
	if err != nil {
		return err
	}
	if d.Agent.Alive() {
		// The agent SIGTERMs every process in the box and exits when they are
		// gone; the box (a pid namespace) ends with it.
		_ = d.Agent.Signal(syscall.SIGTERM)
		gctx, cancel := context.WithTimeout(ctx, grace)
		_ = d.Agent.WaitGone(gctx)
		cancel()
	}
	cg := d.Cgroup
	if !cg.Empty() {
		if err := cg.Kill(ctx); err != nil {
			return fmt.Errorf("killing box %s: %w", h.ID, err)
		}
	}
	p.waitShim(ctx, h.ID, d.Shim)
	return nil
}

// waitShim waits (briefly) for a box's shim to exit after its box ended,
// killing it if it lingers.
func (p *Provider) waitShim(ctx context.Context, id string, shimID procutil.ID) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p.mu.Lock()
	reaped := p.shims[id]
	p.mu.Unlock()
	if reaped != nil {
		select {
		case <-reaped:
			p.mu.Lock()
			delete(p.shims, id)
			p.mu.Unlock()
			return
		case <-ctx.Done():
		}
	}
	if shimID.PID > 0 && shimID.WaitGone(ctx) != nil {
		_ = shimID.Signal(syscall.SIGKILL)
	}
}

// Destroy implements sandbox.Provider.
func (p *Provider) Destroy(ctx context.Context, h sandbox.Handle) error {
	d, err := p.decode(h)
	if err != nil {
		return err
	}
	cg := d.Cgroup
	if err := cg.Kill(ctx); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("killing box %s: %w", h.ID, err)
	}
	p.waitShim(ctx, h.ID, d.Shim)
	if err := cg.Remove(ctx); err != nil {
		return fmt.Errorf("destroying box %s: %w", h.ID, err)
	}
	if err := removeBoxDir(d.BoxDir); err != nil {
		return fmt.Errorf("destroying box %s: %w", h.ID, err)
	}
	return nil
}

// removeBoxDir removes a box's run dir, refusing if anything in its staging
// area is a mount point in our mount namespace: a workspace mounted there
// would otherwise be deleted with it. (The shim's mounts live only in its own
// namespace; this guards against that ever changing.)
func removeBoxDir(dir string) error {
	if dir == "" {
		return nil
	}
	stage := filepath.Join(dir, "stage")
	var parentDev uint64
	if st, err := os.Stat(dir); err == nil {
		parentDev = st.Sys().(*syscall.Stat_t).Dev
	} else if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var mounted []string
	_ = filepath.WalkDir(stage, func(path string, de os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Lstat(path, &st) == nil && st.Dev != parentDev {
			mounted = append(mounted, path)
			return filepath.SkipDir
		}
		return nil
	})
	if len(mounted) > 0 {
		return fmt.Errorf("refusing to remove %s: %v are mount points in harvest's own mount namespace", dir, mounted)
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
		if !e.IsDir() || e.Name() == "etc" {
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
			if !seen[id] {
				out = append(out, sandbox.Handle{ID: id, Backend: Name})
			}
		}
	}
	return out, nil
}

func writeFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// boxEnding reports whether a box whose agent could not be reached is going
// away: a box at its time limit or being stopped closes its socket a moment
// before its agent exits.
func boxEnding(ctx context.Context, agent procutil.ID) bool {
	return agent.GoneWithin(ctx, 2*time.Second)
}
