// Package host is the "host" sandbox backend: the in-box agent runs as a plain
// process on this machine, with NO isolation. Commands see the whole host
// filesystem, network and processes. It exists for development and for
// machines where no isolating backend works, is refused unless the caller opts
// in (Config.AllowUnsafe, the CLI's --unsafe-host), and every Handle it makes is
// marked Unsafe so every output can say so.
//
// What it does keep: a clean environment (nothing inherited from Harvest), a
// per-box empty HOME, the box user when Harvest runs as root, process groups
// and process-tree cleanup through the same agent as every other backend.
// Workspaces are used in place: WorkspacePath returns the host directory.
//
// Mounts (sandbox.Spec.Mounts) have no box filesystem to go into: a mount is
// accepted only where its box path is its host path, and then it is simply
// that host path, NOT read-only (nothing here is). A spec that would need the
// path to move is refused, so code written for isolating backends that
// mounts tools at their host paths runs unchanged here.
package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/base/procutil"
	"github.com/harvest-dev/harvest/base/unixsock"
	"github.com/harvest-dev/harvest/sandbox"
)

// Name is the backend's name.
const Name = "host"

// Config configures the host backend.
type Config struct {
	// AllowUnsafe must be true: the caller acknowledges there is no isolation.
	AllowUnsafe bool
	// RunDir holds per-box sockets, homes and logs (default sandbox.DefaultRunDir).
	RunDir string
	// AgentBinary is the harvest-agent binary (default sandbox.AgentBinary).
	AgentBinary string
}

// Provider runs boxes as host processes.
type Provider struct {
	cfg Config

	mu      sync.Mutex
	waiters map[string]<-chan struct{} // agents we started: closed when reaped
}

var _ sandbox.Provider = (*Provider)(nil)
var _ sandbox.Lister = (*Provider)(nil)

// New returns a host provider.
func New(cfg Config) *Provider {
	if cfg.RunDir == "" {
		cfg.RunDir = sandbox.DefaultRunDir(Name)
	}
	return &Provider{cfg: cfg, waiters: map[string]<-chan struct{}{}}
}

// Name implements sandbox.Provider.
func (p *Provider) Name() string { return Name }

// Available implements sandbox.Provider. The host backend works wherever the
// agent binary is found; it is still refused without AllowUnsafe.
func (p *Provider) Available(ctx context.Context) error {
	if _, err := sandbox.AgentBinary(p.cfg.AgentBinary); err != nil {
		return &sandbox.UnavailableError{Backend: Name, Reason: err.Error(), Fix: "build it: CGO_ENABLED=0 go install ./cmd/..."}
	}
	return nil
}

type handleData struct {
	Agent  procutil.ID `json:"agent"`
	RunDir string      `json:"run_dir"`
}

func (p *Provider) boxDir(id string) string { return filepath.Join(p.cfg.RunDir, id) }

// Start implements sandbox.Provider.
func (p *Provider) Start(ctx context.Context, spec sandbox.Spec) (_ *sandbox.Sandbox, err error) {
	if !p.cfg.AllowUnsafe {
		return nil, sandbox.ErrUnsafeNotAllowed
	}
	spec, err = sandbox.PrepareSpec(spec)
	if err != nil {
		return nil, err
	}
	if err := sandbox.RefuseLayers(spec, Name); err != nil {
		return nil, err
	}
	if err := checkMounts(spec); err != nil {
		return nil, err
	}
	bin, err := sandbox.AgentBinary(p.cfg.AgentBinary)
	if err != nil {
		return nil, err
	}
	dir := p.boxDir(spec.ID)
	if err := sandbox.MkdirRunDir(p.cfg.RunDir); err != nil {
		return nil, fmt.Errorf("host backend run dir: %w", err)
	}
	if err := os.Mkdir(dir, 0o711); err != nil {
		return nil, fmt.Errorf("creating box dir: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		return nil, err
	}
	asRoot := os.Geteuid() == 0
	if asRoot {
		if err := os.Chown(home, spec.User.UID, spec.User.GID); err != nil {
			return nil, err
		}
	}

	sock := filepath.Join(dir, "agent.sock")
	l, err := unixsock.Listen(sock)
	if err != nil {
		return nil, fmt.Errorf("creating the agent socket: %w", err)
	}
	lf, err := l.File()
	l.Close()
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	logf, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()

	env := make(map[string]string, len(spec.Env))
	for k, v := range spec.Env {
		env[k] = v
	}
	if env["HOME"] == "/home/user" {
		env["HOME"] = home
	}
	workdir := p.hostPath(spec, spec.Workdir)
	if workdir == sandbox.WorkspaceRoot {
		workdir = home
	}
	now := time.Now()
	deadline := now.Add(spec.Timeout)
	cmd := exec.Command(bin, "sandbox-agent", "--listen-fd", "3", "--id", spec.ID,
		"--workdir", workdir, "--deadline-ms", strconv.FormatInt(deadline.UnixMilli(), 10))
	cmd.Env = sandbox.EnvList(env)
	cmd.Dir = workdir
	cmd.ExtraFiles = []*os.File{lf}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if asRoot {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(spec.User.UID), Gid: uint32(spec.User.GID), Groups: []uint32{}}
	}
	err = cmd.Start()
	// Only the agent may hold the listener: if it dies, a hello must fail,
	// not wait in the backlog.
	lf.Close()
	if err != nil {
		return nil, fmt.Errorf("starting the agent: %w", err)
	}
	agent, err := procutil.Lookup(cmd.Process.Pid)
	if err != nil {
		agent = procutil.ID{PID: cmd.Process.Pid}
	}
	p.mu.Lock()
	p.waiters[spec.ID] = procutil.StartReaper(cmd)
	p.mu.Unlock()

	data, _ := json.Marshal(handleData{Agent: agent, RunDir: dir})
	h := sandbox.Handle{ID: spec.ID, Backend: Name, Created: now, Deadline: deadline, Spec: spec, Unsafe: true, Data: data}
	if err := os.WriteFile(filepath.Join(dir, "handle.json"), mustJSON(h), 0o600); err != nil {
		p.kill(h, agent)
		return nil, err
	}
	sb, err := sandbox.DialUnix(ctx, p, h, sock)
	if err != nil {
		p.kill(h, agent)
		log, _ := os.ReadFile(filepath.Join(dir, "agent.log"))
		return nil, fmt.Errorf("%w (agent log: %q)", err, strings.TrimSpace(string(log)))
	}
	return sb, nil
}

// checkMounts refuses mounts that would need a box filesystem (see the
// package doc).
func checkMounts(spec sandbox.Spec) error {
	var errs []error
	for _, m := range spec.Mounts {
		if filepath.Clean(m.HostPath) != m.BoxPath {
			errs = append(errs, fmt.Errorf("mount at %s: the host backend has no box filesystem to mount %s into: "+
				"a mount can only be the host path itself (box path %s), and is not read-only there", m.BoxPath, m.HostPath, filepath.Clean(m.HostPath)))
		}
	}
	if len(errs) > 0 {
		return &sandbox.SpecError{Errs: errs}
	}
	return nil
}

// hostPath maps an in-box workspace path to the host directory.
func (p *Provider) hostPath(spec sandbox.Spec, boxPath string) string {
	for _, w := range spec.Workspaces {
		if boxPath == w.Path() {
			return w.HostPath
		}
		if rest, ok := strings.CutPrefix(boxPath, w.Path()+"/"); ok {
			return filepath.Join(w.HostPath, rest)
		}
	}
	return boxPath
}

func decode(h sandbox.Handle) (handleData, error) {
	var d handleData
	if h.Backend != Name {
		return d, fmt.Errorf("handle of box %s is for the %s backend, not %s", h.ID, h.Backend, Name)
	}
	if err := json.Unmarshal(h.Data, &d); err != nil {
		return d, fmt.Errorf("handle of box %s: %w", h.ID, err)
	}
	return d, nil
}

// Recover implements sandbox.Provider.
func (p *Provider) Recover(ctx context.Context, h sandbox.Handle) (*sandbox.Sandbox, error) {
	d, err := decode(h)
	if err != nil {
		return nil, err
	}
	return sandbox.RecoverUnix(ctx, p, h, d.Agent, filepath.Join(d.RunDir, "agent.sock"))
}

// Stop implements sandbox.Provider.
func (p *Provider) Stop(ctx context.Context, h sandbox.Handle, grace time.Duration) error {
	d, err := decode(h)
	if err != nil {
		return err
	}
	if !d.Agent.Alive() {
		return nil
	}
	p.shutdown(ctx, h, d, grace)
	return nil
}

// shutdown asks the agent to end its process trees (SIGTERM, grace, SIGKILL)
// and exit; if it cannot be reached, it is killed outright.
func (p *Provider) shutdown(ctx context.Context, h sandbox.Handle, d handleData, grace time.Duration) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	sb, err := sandbox.DialUnix(cctx, p, h, filepath.Join(d.RunDir, "agent.sock"))
	cancel()
	if err == nil {
		_ = sb.Shutdown(ctx, grace)
		sb.Close()
		wctx, cancel := context.WithTimeout(ctx, grace+5*time.Second)
		_ = p.waitAgent(wctx, h.ID, d.Agent)
		cancel()
	}
	p.kill(h, d.Agent)
}

func (p *Provider) kill(h sandbox.Handle, agent procutil.ID) {
	_ = agent.Signal(syscall.SIGKILL)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.waitAgent(ctx, h.ID, agent)
}

// waitAgent waits for the agent to be gone, and reaped if it is our child.
func (p *Provider) waitAgent(ctx context.Context, id string, agent procutil.ID) error {
	p.mu.Lock()
	reaped := p.waiters[id]
	p.mu.Unlock()
	if err := procutil.WaitChild(ctx, reaped, agent); err != nil {
		return err
	}
	p.mu.Lock()
	delete(p.waiters, id)
	p.mu.Unlock()
	return nil
}

// Destroy implements sandbox.Provider.
func (p *Provider) Destroy(ctx context.Context, h sandbox.Handle) error {
	d, err := decode(h)
	if err != nil {
		return err
	}
	if d.Agent.Alive() {
		p.shutdown(ctx, h, d, 0)
	}
	if err := os.RemoveAll(d.RunDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", d.RunDir, err)
	}
	return nil
}

// List implements sandbox.Lister.
func (p *Provider) List(ctx context.Context) ([]sandbox.Handle, error) {
	entries, err := os.ReadDir(p.cfg.RunDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []sandbox.Handle
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(p.cfg.RunDir, e.Name(), "handle.json"))
		if err != nil {
			continue
		}
		var h sandbox.Handle
		if json.Unmarshal(b, &h) == nil && h.ID == e.Name() {
			out = append(out, h)
		}
	}
	return out, nil
}

func mustJSON(v any) []byte {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		panic(err)
	}
	return b
}
