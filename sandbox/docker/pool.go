package docker

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/harvest-dev/harvest/sandbox"
)

// Warm boxes
//
// A cold box costs a `docker create` and a `docker start` (runc's
// namespaces, cgroups and mounts; gVisor's sentry and gofer under runsc)
// before its agent listens: about 350 ms here, nearly all of it inside
// dockerd. With Config.PoolSize > 0 the provider keeps that many boxes
// started ahead of demand, with their agents listening and connected
// (--warm: no identity yet, every request but a claiming hello refused),
// so a create costs a claim: a few milliseconds of host mounts and two
// small dockerd calls.
//
// What a container is made with is fixed at `docker create`: its mounts,
// labels, hostname, user, image and runtime. So a warm box is made for
// the default box user and HOME, the provider's image and runtime, and
// with its changing mounts in a slot (slot.go): /workspace, /tmp and HOME
// are bound from a host directory with rslave propagation, and the claim
// mounts the box's workspaces and /tmp and HOME (from its disk, or fresh
// tmpfs) there, on the host, where they show up in the running box. The
// rest is set at the claim:
//
//   - limits with `docker update` (memory, memory+swap, pids, CPUs): the
//     request's, as a cold box's. Not under runsc, which has no update
//     (dockerd's call fails): there warm boxes are made with the default
//     limits (warmLimits) and serve only boxes asking for those, which is
//     what sessions ask for unless told otherwise; others start cold;
//   - the name with `docker rename` to harvest-ID: dockerd's names are
//     unique, so a box id in use is refused as a cold create refuses it;
//   - the environment, workdir, id and deadline through the claiming hello
//     (sandbox.ConnectClaim); the environment is the image's merged with
//     the spec's, as dockerd merges a cold box's, plus HOSTNAME;
//   - the owner in the box's run dir (owner.RecordFile): labels cannot change, so
//     a warm container is labelled with the provider's instance (LabelPool
//     and LabelOwner) and its owner file, once claimed, names the owner it
//     was claimed for (ListOwned reads it).
//
// A spec the pool cannot serve goes cold: another image, user or HOME,
// read-only Mounts (their box paths are anywhere: a session of a CLI
// agent has one, the CLI's prefix), under runsc limits other than
// warmLimits or a disk (Spec.DiskDir: see lateRoots), or a box id a warm
// box could be confused with (pool-...). A claim that fails for any reason
// other than the caller's (an id in use, ctx) is logged, its warm box
// destroyed, and the box started cold.
//
// What differs from a cold box, none of it isolation: the host name is
// "box" (a running container's cannot be changed; HOSTNAME in the
// environment is the box's own name all the same); the container does not
// carry Spec.Labels (its handle does); /workspace is the slot's, so the
// pool refuses an image whose own /workspace is not empty (checked once,
// poolCheck) rather than hide its files.
//
// A warm box is used once: it is claimed by exactly one Start (the agent
// refuses a second claim) and destroyed with its box. Nothing of a
// previous box can be in it.
//
// # Never outliving the server
//
// Close destroys the idle warm boxes, and those being made: it waits for
// a `docker create` in flight rather than cancel it (a cancelled create
// can still make its container after the cleanup looked for it). After a
// kill -9 the warm containers' instance has no holder (package owner):
// the next provider with a pool on the run dir destroys them when its
// pool starts (reapDead), and `harvest sandbox prune` does (ListOwned
// lists them Warm, owned by the dead instance); their slots go with them
// (Destroy), and slots no container uses any more are released by
// reapDead. The image probe (poolCheck: a container created, never
// started, for a few milliseconds) is labelled with the instance too: one
// a kill -9 leaves is removed by the next pool on the run dir (reapDead),
// not by prune (it is no box).

const (
	poolPrefix  = "pool-"
	warmHost    = "box"
	defaultHome = "/home/user"
	// LabelPool marks a container made warm, with the instance that made
	// it: its LabelBox is then the warm name and its box id, once claimed,
	// is its container name's.
	LabelPool = "dev.harvest.pool"
)

var defaultUser = sandbox.User{UID: sandbox.DefaultUID, GID: sandbox.DefaultGID}

// warmBox is a started container whose agent waits for its claim.
type warmBox struct {
	name        string // the warm name: pool-INSTANCE-N
	containerID string
	pid         int
	conn        *net.UnixConn // to its agent, peer-checked
	boxDir      string
	slot        string
	created     time.Time
	unenforced  []string // limits dockerd said it dropped at create
}

// pool keeps warm boxes. Its goroutines are owned by the provider (Close).
type pool struct {
	p     *Provider
	owner string // the provider's instance: it names the warm boxes
	size  int

	idle    chan *warmBox
	refill  chan struct{}
	stop    chan struct{}
	checked chan struct{} // closed once poolCheck is done
	wg      sync.WaitGroup

	mu       sync.Mutex
	seq      int
	inflight int
	env      []string // the image's environment (poolCheck)
	disabled error    // why the pool serves nothing (poolCheck)

	hits, misses atomic.Uint64
}

// maxPreparing bounds how many warm boxes are made at once.
const maxPreparing = 2

// maxPoolWait bounds how long Start waits for a warm box being made (it
// waits only when one is on its way: never slower than a cold start).
const maxPoolWait = 2 * time.Second

// warmTimeout bounds making one warm box.
const warmTimeout = time.Minute

// createTimeout bounds one `docker create` of the pool's, which Close
// waits for rather than cancels.
const createTimeout = 30 * time.Second

// probeLabel is LabelManaged of the container poolCheck creates (never
// started) to look into the image.
const probeLabel = "probe"

func newPool(p *Provider, size int, owner string) *pool {
	pl := &pool{p: p, owner: owner, size: size, idle: make(chan *warmBox, size), refill: make(chan struct{}, 1), stop: make(chan struct{}), checked: make(chan struct{})}
	pl.wg.Add(1)
	go pl.run()
	return pl
}

func (pl *pool) kick() {
	select {
	case pl.refill <- struct{}{}:
	default:
	}
}

func (pl *pool) run() {
	defer pl.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pl.wg.Add(1)
	go func() { defer pl.wg.Done(); <-pl.stop; cancel() }()

	// The dead's warm boxes are reaped and the image checked while the
	// first warm boxes are made: a take waits for both (checked).
	pl.wg.Add(1)
	go func() {
		defer pl.wg.Done()
		defer close(pl.checked)
		cctx, ccancel := context.WithTimeout(ctx, warmTimeout)
		defer ccancel()
		if err := pl.p.reapDead(cctx); err != nil && ctx.Err() == nil {
			pl.p.log.Warn("removing the warm boxes of a Harvest that died", "err", err)
		}
		env, err := pl.p.poolCheck(cctx, pl.owner)
		pl.mu.Lock()
		pl.env, pl.disabled = env, err
		pl.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			pl.p.log.Warn("the docker backend keeps no warm boxes: every box starts cold", "err", err)
		}
		for err != nil { // the warm boxes made meanwhile go
			select {
			case w := <-pl.idle:
				pl.p.discard(w)
			default:
				return
			}
		}
	}()
	pl.kick()
	for {
		select {
		case <-pl.stop:
			return
		case <-pl.refill:
		}
		pl.mu.Lock()
		for pl.disabled == nil && len(pl.idle)+pl.inflight < pl.size && pl.inflight < maxPreparing {
			pl.inflight++
			pl.seq++
			name := poolPrefix + pl.owner + "-" + strconv.Itoa(pl.seq)
			pl.wg.Add(1)
			go func() {
				defer pl.wg.Done()
				wctx, wcancel := context.WithTimeout(ctx, warmTimeout)
				w, err := pl.p.startWarm(wctx, name, pl.owner)
				wcancel()
				pl.mu.Lock()
				pl.inflight--
				// Under mu with the check's verdict: a box kept here is
				// one the check, if it failed, discards.
				keep := err == nil && ctx.Err() == nil && pl.disabled == nil
				if keep {
					pl.idle <- w // never blocks: idle+inflight <= size
				}
				pl.mu.Unlock()
				switch {
				case err != nil:
					if ctx.Err() == nil {
						pl.p.log.Warn("making a warm box", "err", err)
					}
				case !keep:
					pl.p.discard(w)
				default:
					pl.kick()
				}
			}()
		}
		pl.mu.Unlock()
	}
}

// take returns a warm box, or nil (start one cold). When none is ready
// but one is being made, it waits for that one (up to maxPoolWait). The
// caller counts the outcome (hits: boxes claimed; misses: boxes the pool
// could have served that started cold, a failed claim's included).
func (pl *pool) take(ctx context.Context) *warmBox {
	t := time.NewTimer(maxPoolWait)
	defer t.Stop()
	select {
	case <-pl.checked:
	case <-t.C:
		return nil
	case <-ctx.Done():
		return nil
	case <-pl.stop:
		return nil
	}
	pl.mu.Lock()
	disabled := pl.disabled
	pl.mu.Unlock()
	if disabled != nil {
		return nil
	}
	select {
	case w := <-pl.idle:
		pl.kick()
		return w
	default:
	}
	pl.mu.Lock()
	preparing := pl.inflight > 0
	pl.mu.Unlock()
	if !preparing {
		pl.kick()
		return nil
	}
	select {
	case w := <-pl.idle:
		pl.kick()
		return w
	case <-t.C:
	case <-ctx.Done():
	case <-pl.stop:
	}
	return nil
}

// imageEnv is the image's environment, for a claim (nil before poolCheck).
func (pl *pool) imageEnv() []string {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.env
}

// close stops making warm boxes and destroys the idle ones.
func (pl *pool) close() {
	if pl == nil {
		return
	}
	close(pl.stop)
	pl.wg.Wait()
	for {
		select {
		case w := <-pl.idle:
			pl.p.discard(w)
		default:
			return
		}
	}
}

// serves reports whether a warm box can become the box spec (prepared)
// asks for.
func (p *Provider) serves(spec sandbox.Spec) bool {
	return spec.Image == p.cfg.Image && spec.User == defaultUser && homeDir(spec.Env) == defaultHome &&
		len(spec.Mounts) == 0 && !strings.HasPrefix(spec.ID, poolPrefix) &&
		(p.canUpdate() || spec.Limits == warmLimits) && (p.lateRoots() || spec.DiskDir == "")
}

// canUpdate reports whether `docker update` can change a running box's
// limits under the provider's runtime. runsc has no update command:
// dockerd's call fails, so under gVisor a warm box keeps the limits it
// was made with (warmLimits) and serves only boxes that ask for those.
func (p *Provider) canUpdate() bool { return p.cfg.Runtime != "runsc" }

// warmLimits are the limits warm boxes are made with: a spec's defaults
// (sandbox.PrepareSpec), which is what sessions ask for unless told
// otherwise.
var warmLimits = func() sandbox.Limits {
	s, err := sandbox.PrepareSpec(sandbox.Spec{ID: "limits"})
	if err != nil {
		panic(err)
	}
	return s.Limits
}()

// poolCheck reads the image's environment and checks that its /workspace
// is empty (a warm box's /workspace is its slot's: see above), with a
// container created, never started, and removed.
func (p *Provider) poolCheck(ctx context.Context, inst string) ([]string, error) {
	cli, err := p.connectDaemon(ctx)
	if err != nil {
		return nil, err
	}
	img, err := cli.ImageInspect(ctx, p.cfg.Image)
	if err != nil {
		return nil, fmt.Errorf("inspecting image %s: %w", p.cfg.Image, err)
	}
	var env []string
	if img.Config != nil {
		env = img.Config.Env
	}
	// The probe is labelled with the instance and run dir: one a kill -9
	// leaves behind is removed by the next pool (reapDead). Its create is
	// not cancelled by Close (only bounded), as a warm box's (startWarm).
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	res, err := cli.ContainerCreate(cctx, client.ContainerCreateOptions{
		Config: &container.Config{Image: p.cfg.Image, Entrypoint: []string{"/nonexistent"},
			Labels: map[string]string{LabelManaged: probeLabel, LabelPool: inst, LabelRunDir: p.cfg.RunDir}},
		HostConfig: &container.HostConfig{NetworkMode: "none", Runtime: p.cfg.Runtime},
	})
	ccancel()
	if err != nil {
		return nil, fmt.Errorf("looking into image %s: %w", p.cfg.Image, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_ = removeContainer(rctx, cli, res.ID)
	}()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cp, err := cli.CopyFromContainer(ctx, res.ID, client.CopyFromContainerOptions{SourcePath: sandbox.WorkspaceRoot})
	if err != nil {
		return nil, fmt.Errorf("looking into image %s's %s: %w", p.cfg.Image, sandbox.WorkspaceRoot, err)
	}
	defer cp.Content.Close()
	tr := tar.NewReader(cp.Content)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return env, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading image %s's %s: %w", p.cfg.Image, sandbox.WorkspaceRoot, err)
		}
		if name := strings.Trim(hdr.Name, "/"); name != "workspace" && name != "" {
			return nil, fmt.Errorf("image %s has files in %s (%s): a warm box's %s would hide them", p.cfg.Image, sandbox.WorkspaceRoot, hdr.Name, sandbox.WorkspaceRoot)
		}
	}
}

// claimEnv is what dockerd would give a cold box's PID 1: the image's
// environment with the spec's over it, and HOSTNAME.
func claimEnv(image []string, spec sandbox.Spec) []string {
	out := []string{"HOSTNAME=" + hostname(spec.ID)}
	seen := map[string]bool{"HOSTNAME": true}
	for _, kv := range sandbox.EnvList(spec.Env) {
		k, _, _ := strings.Cut(kv, "=")
		seen[k] = true
	}
	for _, kv := range image {
		k, _, _ := strings.Cut(kv, "=")
		if !seen[k] {
			out = append(out, kv)
			seen[k] = true
		}
	}
	return append(out, sandbox.EnvList(spec.Env)...)
}

// PoolStats says how the warm pool is doing (sandbox.Pooler): zero
// without one (Config.PoolSize 0, before the first Start, once closed).
func (p *Provider) PoolStats() sandbox.PoolStats {
	p.mu.Lock()
	pl := p.pool
	p.mu.Unlock()
	if pl == nil {
		return sandbox.PoolStats{}
	}
	return sandbox.PoolStats{Size: pl.size, Ready: len(pl.idle), Hits: pl.hits.Load(), Misses: pl.misses.Load()}
}

var _ sandbox.Pooler = (*Provider)(nil)

// warmName reports whether name is a warm box's (pool-INSTANCE-N).
func warmName(name string) bool {
	rest, ok := strings.CutPrefix(name, poolPrefix)
	return ok && rest != "" && !strings.ContainsAny(rest, "/\x00") && filepath.Base(name) == name
}
