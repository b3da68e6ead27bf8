package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/harvest-dev/harvest/base/unixsock"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/owner"
)

// startWarm makes warm box name for instance own: its run dir and slot, its
// container started with an unclaimed agent, a peer-checked connection to
// it (see pool.go).
func (p *Provider) startWarm(ctx context.Context, name, own string) (_ *warmBox, err error) {
	bin, err := p.agentBinary()
	if err != nil {
		return nil, err
	}
	cli, err := p.connectDaemon(ctx)
	if err != nil {
		return nil, err
	}
	spec, err := sandbox.PrepareSpec(sandbox.Spec{ID: name, Image: p.cfg.Image})
	if err != nil {
		return nil, err
	}
	boxDir, runDir, err := p.makeBoxDir(spec)
	if err != nil {
		return nil, err
	}
	w := &warmBox{name: name, boxDir: boxDir, created: time.Now()}
	defer func() {
		if err != nil {
			p.discard(w)
		}
	}()
	if w.slot, err = p.makeSlot(name); err != nil {
		return nil, err
	}
	cfg, hostCfg := p.containerConfig(spec, bin, runDir, w.created, w.created, slotMounts(w.slot, p.lateRoots()))
	cfg.Hostname = warmHost
	cfg.Cmd = []string{"sandbox-agent", "--listen", runMount + "/" + sockName, "--warm"}
	delete(cfg.Labels, LabelDeadline)
	cfg.Labels[LabelOwner] = own
	cfg.Labels[LabelPool] = own
	if p.lateRoots() {
		hostCfg.Tmpfs = nil // the slot's
	}
	// Not cancelled by Close (only bounded): a create whose request is
	// cancelled may still make its container after a removal by name
	// looked for it, and leave it behind.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	res, err := cli.ContainerCreate(cctx, client.ContainerCreateOptions{Name: containerName(name), Config: cfg, HostConfig: hostCfg})
	ccancel()
	if err != nil {
		return nil, fmt.Errorf("creating warm box %s: %w", name, err)
	}
	w.containerID = res.ID
	for _, warn := range res.Warnings { // kept by a claim that cannot update
		p.log.Warn("dockerd warning creating a warm box", "box", name, "warning", warn)
		w.unenforced = append(w.unenforced, discardedLimits(warn)...)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("creating warm box %s: %w", name, err)
	}
	if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		return nil, fmt.Errorf("starting warm box %s: %w", name, err)
	}
	if w.pid, err = p.runningPID(ctx, cli, res.ID); err != nil {
		return nil, fmt.Errorf("starting warm box %s: %w", name, err)
	}
	if w.conn, err = p.waitDial(ctx, cli, res.ID, sockPath(boxDir)); err != nil {
		return nil, fmt.Errorf("connecting to warm box %s: %w", name, err)
	}
	peer, err := unixsock.PeerPID(w.conn)
	if err != nil {
		return nil, fmt.Errorf("connecting to warm box %s: reading the socket's peer: %w", name, err)
	}
	if peer != w.pid && !gVisorGofer(peer, w.pid) {
		return nil, &peerError{box: name, sock: sockPath(boxDir), peer: peer, want: w.pid}
	}
	return w, nil
}

// discard destroys a warm box that will not be used (or whose claim
// failed): its container, its slot, its run dir.
func (p *Provider) discard(w *warmBox) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if w.conn != nil {
		w.conn.Close()
	}
	if cli, err := p.client(); err == nil {
		id := w.containerID
		if id == "" {
			id = containerName(w.name) // the name is this instance's alone
		}
		if err := removeContainer(ctx, cli, id); err != nil {
			p.log.Warn("removing a warm box's container", "box", w.name, "err", err)
		}
	}
	if w.slot != "" {
		if err := releaseSlot(w.slot); err != nil {
			p.log.Warn("releasing a warm box's slot", "box", w.name, "err", err)
		}
	}
	if err := os.RemoveAll(w.boxDir); err != nil {
		p.log.Warn("removing a warm box's run dir", "box", w.name, "err", err)
	}
}

// refusedError is a claim refused for the caller's reason (the box id is
// in use): Start returns it rather than trying cold.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// claim makes warm box w the box spec asks for, owned by own: its name,
// owner, limits, mounts, then the claiming hello (see pool.go). On error
// the caller discards w.
func (p *Provider) claim(ctx context.Context, cli *client.Client, w *warmBox, spec sandbox.Spec, own string, disk []mount.Mount, env []string) (*sandbox.Sandbox, error) {
	dir := filepath.Join(p.cfg.RunDir, spec.ID)
	if _, err := os.Lstat(dir); err == nil {
		return nil, &refusedError{fmt.Errorf("starting box %s: %s already exists: a box with this id exists (or was not destroyed)", spec.ID, dir)}
	}
	if _, err := cli.ContainerRename(ctx, w.containerID, client.ContainerRenameOptions{NewName: containerName(spec.ID)}); err != nil {
		if cerrdefs.IsConflict(err) {
			return nil, &refusedError{fmt.Errorf("starting box %s: a container named %s already exists (box ids must be unique): %w", spec.ID, containerName(spec.ID), err)}
		}
		return nil, fmt.Errorf("naming warm box %s: %w", w.name, err)
	}
	// The owner is recorded before the run dir takes the box's name: a
	// claimed box's owner file is always there (ListOwned).
	if err := owner.Record(w.boxDir, own); err != nil {
		return nil, err
	}
	if err := os.Rename(w.boxDir, dir); err != nil {
		return nil, fmt.Errorf("starting box %s: %w", spec.ID, err)
	}
	w.boxDir = dir
	unenforced := w.unenforced
	if !p.canUpdate() {
		// Made with them (serves): nothing to change, and no way to.
		if spec.Limits != warmLimits {
			return nil, fmt.Errorf("warm box %s has limits %+v, box %s asks for %+v: under runtime %s they cannot be changed", w.name, warmLimits, spec.ID, spec.Limits, p.cfg.Runtime)
		}
	} else {
		pids := int64(spec.Limits.Pids + sandbox.AgentPidsReserve)
		upd, err := cli.ContainerUpdate(ctx, w.containerID, client.ContainerUpdateOptions{Resources: &container.Resources{
			Memory: spec.Limits.MemoryBytes, MemorySwap: spec.Limits.MemoryBytes, PidsLimit: &pids, NanoCPUs: nanoCPUs(spec.Limits.CPUs),
		}})
		if err != nil {
			return nil, fmt.Errorf("setting the limits of warm box %s: %w", w.name, err)
		}
		unenforced = nil
		for _, warn := range upd.Warnings {
			p.log.Warn("dockerd warning setting a box's limits", "box", spec.ID, "warning", warn)
			unenforced = append(unenforced, discardedLimits(warn)...)
		}
	}
	if err := fillSlot(w.slot, spec, disk, p.lateRoots()); err != nil {
		return nil, err
	}
	if err := p.checkMounted(w, spec); err != nil {
		return nil, err
	}

	now := time.Now()
	deadline := now.Add(spec.Timeout)
	d := handleData{ContainerID: w.containerID, RunDir: dir, InitPID: w.pid, Pool: w.name}
	data, _ := json.Marshal(d)
	h := sandbox.Handle{ID: spec.ID, Backend: Name, Created: now, Deadline: deadline, Spec: spec, Data: data, Unenforced: unenforced}
	// The agent's environment is what dockerd would have given it.
	hello := h
	hello.Spec.Env = map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		hello.Spec.Env[k] = v
	}
	conn := w.conn
	w.conn = nil // the Sandbox's (or closed by a failed handshake)
	sb, err := sandbox.ConnectClaim(ctx, p, hello, conn)
	if err != nil {
		return nil, fmt.Errorf("starting box %s: %w", spec.ID, err)
	}
	sb.SetHandle(h)
	if err := checkWorkdir(ctx, sb, spec); err != nil {
		sb.Close()
		return nil, &refusedError{err}
	}
	if err := writeHandle(dir, h); err != nil {
		sb.Close()
		return nil, fmt.Errorf("starting box %s: %w", spec.ID, err)
	}
	return sb, nil
}

// checkMounted checks that the workspaces mounted in the slot are what the
// box sees (under runc, through its PID 1's root): a Harvest in another
// mount namespace than dockerd's would mount them where no box sees them.
// Under gVisor the box's files are served by its gofer; not checked.
func (p *Provider) checkMounted(w *warmBox, spec sandbox.Spec) error {
	if p.cfg.Runtime != "" {
		return nil
	}
	for _, ws := range spec.Workspaces {
		var host, box syscall.Stat_t
		if err := syscall.Stat(ws.HostPath, &host); err != nil {
			return fmt.Errorf("workspace %s: %w", ws.Name, err)
		}
		in := fmt.Sprintf("/proc/%d/root%s", w.pid, ws.Path())
		if err := syscall.Stat(in, &box); err != nil || host.Dev != box.Dev || host.Ino != box.Ino {
			return fmt.Errorf("workspace %s mounted in warm box %s does not show in the box (%s: %v): do harvest and dockerd share a mount namespace?", ws.Name, w.name, in, err)
		}
	}
	return nil
}

// instanceOf is the instance a warm name (pool-INSTANCE-N) says, or "".
func instanceOf(name string) string {
	rest, ok := strings.CutPrefix(name, poolPrefix)
	if !ok {
		return ""
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 || owner.CheckID(rest[:i]) != nil {
		return ""
	}
	return rest[:i]
}

// reapDead destroys the warm boxes of instances no process holds (a
// Harvest killed before its Close), removes their image probes
// (poolCheck), and releases the slots and run dirs of theirs that no
// container uses any more. Boxes claimed from a dead
// instance's pool are not its: they have their own owners (ListOwned).
func (p *Provider) reapDead(ctx context.Context) error {
	bs, err := p.ListOwned(ctx)
	if err != nil {
		return err
	}
	claims := map[string]*owner.Claim{}
	defer func() {
		for _, c := range claims {
			c.Release()
		}
	}()
	dead := func(inst string) bool {
		if inst == "" {
			return false
		}
		if _, ok := claims[inst]; ok {
			return true
		}
		c, ok, err := owner.TryClaim(p.cfg.OwnersDir, inst)
		if err != nil || !ok {
			return false
		}
		claims[inst] = c
		return true
	}
	used := map[string]bool{}
	var errs []error
	for _, b := range bs {
		d, err := p.decode(b.Handle)
		if err != nil {
			continue
		}
		if b.Warm && dead(b.Owner) {
			if err := p.Destroy(ctx, b.Handle); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if d.Pool != "" {
			used[d.Pool] = true
		}
	}
	if cli, err := p.client(); err == nil {
		f := make(client.Filters).Add("label", LabelManaged+"="+probeLabel, LabelRunDir+"="+p.cfg.RunDir)
		res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
		if err != nil {
			errs = append(errs, fmt.Errorf("listing image probes: %w", err))
		} else {
			for _, c := range res.Items {
				if dead(c.Labels[LabelPool]) {
					if err := removeContainer(ctx, cli, c.ID); err != nil {
						errs = append(errs, fmt.Errorf("removing image probe %.12s: %w", c.ID, err))
					}
				}
			}
		}
	}
	slots, _ := os.ReadDir(filepath.Join(p.cfg.RunDir, slotsDir))
	for _, e := range slots {
		if n := e.Name(); warmName(n) && !used[n] && dead(instanceOf(n)) {
			if err := releaseSlot(p.slotPath(n)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	dirs, _ := os.ReadDir(p.cfg.RunDir)
	for _, e := range dirs {
		if n := e.Name(); warmName(n) && !used[n] && dead(instanceOf(n)) {
			if err := os.RemoveAll(filepath.Join(p.cfg.RunDir, n)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
