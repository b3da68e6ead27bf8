package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/harvest-dev/harvest/sandbox"
)

// handleData is the docker part of a Handle.
type handleData struct {
	// ContainerID is the container's full id.
	ContainerID string `json:"container_id"`
	// RunDir is the box's directory on the host, <Config.RunDir>/<id>.
	RunDir string `json:"run_dir"`
	// InitPID is the agent's host pid when the box started (it is checked
	// against dockerd's current one on every connection, not this).
	InitPID int `json:"init_pid"`
	// Pool is the warm name of a box that was made warm (pool.go): its
	// container's LabelBox, and its slot's name.
	Pool string `json:"pool,omitempty"`
}

// cleanupTimeout bounds removing a half-created box after Start failed.
const cleanupTimeout = 30 * time.Second

// Start implements sandbox.Provider.
func (p *Provider) Start(ctx context.Context, spec sandbox.Spec) (_ *sandbox.Sandbox, err error) {
	spec, err = sandbox.PrepareSpec(spec)
	if err != nil {
		return nil, err
	}
	if err := sandbox.RefuseLayers(spec, Name); err != nil {
		return nil, err
	}
	if spec.Image == "" {
		spec.Image = p.cfg.Image
	}
	if strings.HasPrefix(spec.ID, poolPrefix) {
		return nil, fmt.Errorf("box id %q: ids starting with %q name the docker backend's warm boxes; choose another", spec.ID, poolPrefix)
	}
	ro, err := readOnlyMounts(spec)
	if err != nil {
		return nil, err
	}
	var disk []mount.Mount
	if spec.DiskDir != "" {
		if disk, err = diskMounts(spec); err != nil {
			return nil, err
		}
	}
	bin, err := p.agentBinary()
	if err != nil {
		return nil, err
	}
	cli, err := p.connectDaemon(ctx)
	if err != nil {
		return nil, err
	}
	own, err := p.boxOwner()
	if err != nil {
		return nil, err
	}
	if pl := p.warmPool(); pl != nil && p.serves(spec) {
		w := pl.take(ctx)
		if w == nil {
			pl.misses.Add(1)
		} else {
			sb, err := p.claim(ctx, cli, w, spec, own, disk, claimEnv(pl.imageEnv(), spec))
			if err == nil {
				pl.hits.Add(1)
				return sb, nil
			}
			pl.misses.Add(1)
			p.discard(w)
			var refused *refusedError
			if errors.As(err, &refused) || ctx.Err() != nil {
				return nil, err
			}
			p.log.Warn("claiming a warm box failed; starting the box cold", "box", spec.ID, "err", err)
		}
	}
	return p.startCold(ctx, cli, spec, bin, own, append(ro, disk...))
}

// startCold makes the box's container on the spot.
func (p *Provider) startCold(ctx context.Context, cli *client.Client, spec sandbox.Spec, bin, own string, ro []mount.Mount) (_ *sandbox.Sandbox, err error) {
	boxDir, runDir, err := p.makeBoxDir(spec)
	if err != nil {
		return nil, err
	}
	// containerID is set once the container exists; until then a create that
	// failed midway (ctx ended, connection lost) may still have made one, and
	// cleanup looks for it by name and labels.
	var containerID string
	created := time.Now()
	defer func() {
		if err != nil {
			p.cleanup(ctx, cli, spec.ID, created, containerID, boxDir)
		}
	}()

	deadline := created.Add(spec.Timeout)
	cfg, hostCfg := p.containerConfig(spec, bin, runDir, created, deadline, ro)
	cfg.Labels[LabelOwner] = own
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: containerName(spec.ID), Config: cfg, HostConfig: hostCfg})
	if err != nil {
		switch {
		case cerrdefs.IsNotFound(err):
			return nil, imageMissing(spec.Image)
		case cerrdefs.IsConflict(err):
			return nil, fmt.Errorf("starting box %s: a container named %s already exists (box ids must be unique): %w", spec.ID, containerName(spec.ID), err)
		case client.IsErrConnectionFailed(err):
			return nil, p.unreachable(err)
		}
		if rerr := p.checkRuntime(ctx, cli); rerr != nil {
			return nil, rerr
		}
		return nil, fmt.Errorf("starting box %s: creating its container: %w", spec.ID, err)
	}
	containerID = res.ID
	var unenforced []string
	for _, w := range res.Warnings {
		p.log.Warn("dockerd warning creating a box", "box", spec.ID, "warning", w)
		unenforced = append(unenforced, discardedLimits(w)...)
	}
	if _, err := cli.ContainerStart(ctx, containerID, client.ContainerStartOptions{}); err != nil {
		return nil, fmt.Errorf("starting box %s: starting container %.12s (image %s): %w", spec.ID, containerID, spec.Image, err)
	}

	pid, err := p.runningPID(ctx, cli, containerID)
	if err != nil {
		return nil, fmt.Errorf("starting box %s: %w", spec.ID, err)
	}
	d := handleData{ContainerID: containerID, RunDir: boxDir, InitPID: pid}
	data, _ := json.Marshal(d)
	h := sandbox.Handle{ID: spec.ID, Backend: Name, Created: created, Deadline: deadline, Spec: spec, Data: data, Unenforced: unenforced}
	sb, err := p.connect(ctx, cli, h, d, pid, true)
	if err != nil {
		return nil, fmt.Errorf("starting box %s: %w", spec.ID, err)
	}
	defer func() {
		if err != nil {
			sb.Close()
		}
	}()
	if err := checkWorkdir(ctx, sb, spec); err != nil {
		return nil, err
	}
	if err := writeHandle(boxDir, h); err != nil {
		return nil, fmt.Errorf("starting box %s: %w", spec.ID, err)
	}
	return sb, nil
}

func containerName(id string) string { return "harvest-" + id }

// makeBoxDir creates <RunDir>/<id> (ours) and its run/ (the box user's).
func (p *Provider) makeBoxDir(spec sandbox.Spec) (boxDir, runDir string, err error) {
	if err := sandbox.MkdirRunDir(p.cfg.RunDir); err != nil {
		return "", "", fmt.Errorf("docker backend run dir: %w", err)
	}
	boxDir = filepath.Join(p.cfg.RunDir, spec.ID)
	if err := os.Mkdir(boxDir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return "", "", fmt.Errorf("starting box %s: %s already exists: a box with this id exists (or was not destroyed)", spec.ID, boxDir)
		}
		return "", "", fmt.Errorf("creating the box's run dir: %w", err)
	}
	runDir = filepath.Join(boxDir, "run")
	err = os.Mkdir(runDir, 0o700)
	if err == nil {
		err = chownToBoxUser(runDir, spec.User)
	}
	if err != nil {
		os.RemoveAll(boxDir)
		return "", "", fmt.Errorf("creating the box's run dir: %w", err)
	}
	return boxDir, runDir, nil
}

// chownToBoxUser gives dir to the box user: the agent, running as that user,
// creates its socket there.
func chownToBoxUser(dir string, u sandbox.User) error {
	if os.Geteuid() == 0 {
		return os.Chown(dir, u.UID, u.GID)
	}
	if os.Geteuid() == u.UID {
		return nil
	}
	return fmt.Errorf("the box runs as %s but harvest runs as uid %d and cannot give it a run dir: run harvest as root, or choose the box user %d:%d",
		u, os.Geteuid(), os.Geteuid(), os.Getegid())
}

// cleanup removes what a failed Start created. It runs even when ctx is done.
// Without a container id it removes the container named for the box if its
// labels say this Start created it.
func (p *Provider) cleanup(ctx context.Context, cli *client.Client, id string, created time.Time, containerID, boxDir string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if containerID == "" {
		res, err := cli.ContainerInspect(cctx, containerName(id), client.ContainerInspectOptions{})
		if err == nil && res.Container.Config != nil {
			l := res.Container.Config.Labels
			if l[LabelBox] == id && l[LabelRunDir] == p.cfg.RunDir && l[LabelCreated] == created.UTC().Format(time.RFC3339Nano) {
				containerID = res.Container.ID
			}
		}
	}
	if containerID != "" {
		if err := removeContainer(cctx, cli, containerID); err != nil {
			p.log.Warn("removing the container of a box that failed to start", "container", containerID, "err", err)
		}
	}
	if err := os.RemoveAll(boxDir); err != nil {
		p.log.Warn("removing the run dir of a box that failed to start", "dir", boxDir, "err", err)
	}
}

// homeDir is where the box user's tmpfs home goes: HOME when it is a plain
// directory under /home, else /home/user.
func homeDir(env map[string]string) string {
	h := env["HOME"]
	if h != "" && path.Clean(h) == h && strings.HasPrefix(h, "/home/") {
		return h
	}
	return "/home/user"
}

// readOnlyMounts turns the spec's mounts into bind mounts: read-only, and
// not recursive, so that no filesystem mounted below a host path shows up
// writable in the box (a read-only bind is read-only recursively only from
// dockerd 25 with a recent kernel; a non-recursive one is read-only on every
// version, at the cost of showing what lies under such submounts instead).
// Symlinks in host paths are resolved here, so dockerd binds what the spec
// named.
func readOnlyMounts(spec sandbox.Spec) ([]mount.Mount, error) {
	var out []mount.Mount
	var errs []error
	for _, m := range spec.Mounts {
		host, err := filepath.EvalSymlinks(m.HostPath)
		if err != nil {
			errs = append(errs, fmt.Errorf("mount at %s: host path %s: %w", m.BoxPath, m.HostPath, err))
			continue
		}
		out = append(out, mount.Mount{
			Type: mount.TypeBind, Source: host, Target: m.BoxPath, ReadOnly: true,
			BindOptions: &mount.BindOptions{NonRecursive: true, Propagation: mount.PropagationRPrivate},
		})
	}
	if len(errs) > 0 {
		return nil, &sandbox.SpecError{Errs: errs}
	}
	return out, nil
}

func (p *Provider) containerConfig(spec sandbox.Spec, bin, runDir string, created, deadline time.Time, ro []mount.Mount) (*container.Config, *container.HostConfig) {
	labels := make(map[string]string, len(spec.Labels)+5)
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[LabelManaged] = "true"
	labels[LabelBox] = spec.ID
	labels[LabelRunDir] = p.cfg.RunDir
	labels[LabelCreated] = created.UTC().Format(time.RFC3339Nano)
	labels[LabelDeadline] = deadline.UTC().Format(time.RFC3339)

	cfg := &container.Config{
		Image:      spec.Image,
		Hostname:   hostname(spec.ID),
		User:       spec.User.String(),
		Env:        sandbox.EnvList(spec.Env),
		WorkingDir: "/",
		Entrypoint: []string{agentPath},
		Cmd: []string{"sandbox-agent", "--listen", runMount + "/" + sockName, "--id", spec.ID,
			"--workdir", spec.Workdir, "--deadline-ms", strconv.FormatInt(deadline.UnixMilli(), 10)},
		Labels:      labels,
		StopSignal:  "SIGTERM",
		Healthcheck: &container.HealthConfig{Test: []string{"NONE"}},
	}

	mounts := []mount.Mount{
		{Type: mount.TypeBind, Source: bin, Target: agentPath, ReadOnly: true},
		{Type: mount.TypeBind, Source: runDir, Target: runMount},
	}
	for _, w := range spec.Workspaces {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: w.HostPath, Target: w.Path()})
	}
	mounts = append(mounts, ro...)
	pids := int64(spec.Limits.Pids + sandbox.AgentPidsReserve)
	noInit := false
	hostCfg := &container.HostConfig{
		Mounts:         mounts,
		Runtime:        p.cfg.Runtime,
		NetworkMode:    "none",
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges:true"},
		ReadonlyRootfs: true,
		IpcMode:        "private",
		Init:           &noInit,
		// dockerd adds noexec to tmpfs mounts unless told "exec": builds and
		// test runners execute what they write to /tmp and HOME, and the box
		// can execute what it writes to its workspaces anyway.
		Tmpfs: tmpfs(spec),
		// The agent's own log (it logs little): bounded, and readable by
		// Start when the agent fails to come up.
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
		Resources: container.Resources{
			Memory:     spec.Limits.MemoryBytes,
			MemorySwap: spec.Limits.MemoryBytes,
			PidsLimit:  &pids,
			NanoCPUs:   nanoCPUs(spec.Limits.CPUs),
		},
	}
	return cfg, hostCfg
}

// tmpfs are the box's /tmp and HOME when it has no disk (Spec.DiskDir): in
// memory, charged to its memory limit.
func tmpfs(spec sandbox.Spec) map[string]string {
	if spec.DiskDir != "" {
		return nil // bound from the disk: diskMounts
	}
	return map[string]string{
		"/tmp":            "rw,exec,nosuid,nodev,mode=1777",
		homeDir(spec.Env): fmt.Sprintf("rw,exec,nosuid,nodev,uid=%d,gid=%d,mode=0700", spec.User.UID, spec.User.GID),
	}
}

// diskMounts bind the box's /tmp and HOME from its disk (Spec.DiskDir), so
// what it writes there counts against the disk's limits. A read-only mount
// inside them is refused: it would have no mount point on the disk.
func diskMounts(spec sandbox.Spec) ([]mount.Mount, error) {
	home := homeDir(spec.Env)
	for _, m := range spec.Mounts {
		if strings.HasPrefix(m.BoxPath, "/tmp/") || strings.HasPrefix(m.BoxPath, home+"/") {
			return nil, &sandbox.SpecError{Errs: []error{fmt.Errorf("mount at %s: a box with a disk has /tmp and HOME on it, and a mount inside them is not supported: choose a box path like /opt/NAME", m.BoxPath)}}
		}
	}
	tmp, homeHost, err := sandbox.PrepareDiskDir(spec)
	if err != nil {
		return nil, err
	}
	if spec.HomeLayer != "" {
		// No overlay without privileges in a container: HOME is a copy of
		// the layer, made once per disk.
		if err := sandbox.FillHome(spec); err != nil {
			return nil, err
		}
	}
	bind := func(src, dst string) mount.Mount {
		return mount.Mount{Type: mount.TypeBind, Source: src, Target: dst,
			BindOptions: &mount.BindOptions{NonRecursive: true, Propagation: mount.PropagationRPrivate}}
	}
	return []mount.Mount{bind(tmp, "/tmp"), bind(homeHost, home)}, nil
}

// nanoCPUs converts a CPU cap; a cap of every CPU or more is no cap (dockerd
// refuses one above the CPU count).
func nanoCPUs(cpus float64) int64 {
	if cpus <= 0 || cpus >= float64(runtime.NumCPU()) {
		return 0
	}
	return max(int64(cpus*1e9), 1e7) // dockerd's minimum is 0.01 CPU
}

// hostname is the box id made a valid host name ('_' is not allowed).
func hostname(id string) string { return strings.ReplaceAll(id, "_", "-") }

// checkWorkdir makes a missing default workdir a clear error: the image must
// provide /workspace.
func checkWorkdir(ctx context.Context, sb *sandbox.Sandbox, spec sandbox.Spec) error {
	fi, err := sb.Stat(ctx, spec.Workdir)
	if err == nil && fi.IsDir() {
		return nil
	}
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		fix := "choose a workdir that exists in the image"
		if spec.Workdir == sandbox.WorkspaceRoot {
			fix = "the image must provide /workspace (see docker/kitchen-sink/Dockerfile)"
		}
		return fmt.Errorf("starting box %s: the working directory %s is not a directory in image %s: %s", spec.ID, spec.Workdir, spec.Image, fix)
	}
	return fmt.Errorf("starting box %s: checking the working directory %s: %w", spec.ID, spec.Workdir, err)
}

func writeHandle(boxDir string, h sandbox.Handle) error {
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(boxDir, ".handle.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(boxDir, "handle.json"))
}

// discardedLimits reads a warning dockerd gave when creating a container
// for the limits it discarded ("Your kernel does not support memory limit
// capabilities or the cgroup is not mounted. Limit discarded."; likewise
// for PIDs): the box runs without them, and its Handle says so.
func discardedLimits(warning string) []string {
	w := strings.ToLower(warning)
	if !strings.Contains(w, "discarded") {
		return nil
	}
	var out []string
	for _, l := range []string{"memory", "pids"} {
		if strings.Contains(w, l+" limit") {
			out = append(out, l)
		}
	}
	return out
}
