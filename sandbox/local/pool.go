package local

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/base/procutil"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local/cgroups"
	"github.com/harvest-dev/harvest/sandbox/local/shim"
	"github.com/harvest-dev/harvest/sandbox/owner"
)

// Warm boxes
//
// Every box is made in two steps (see package shim): prepare (a shim, its
// cgroups, bwrap and the agent, with no identity and no workspaces) and claim
// (hostname, workspaces mounted in, the agent told its id, environment,
// workdir and deadline). Prepare is nearly all of the cost: about 2.5 ms to
// start the shim, 1 ms for its cgroups, sometimes 6-9 ms more to join them (a
// cgroup migration waits for an RCU grace period), and 5-8 ms for bwrap and
// the agent. A claim costs about a millisecond.
//
// With Config.PoolSize > 0 the provider keeps that many boxes prepared for
// the default box user, each named "pool-INSTANCE-N" (its cgroup and its run
// dir), INSTANCE being the provider's instance owner (package owner): a
// random name held, with a flock, by this process alone and for its life.
// Start takes one, renames its run dir and cgroup to the box id, sets the
// box's limits and claims it; a goroutine prepares a replacement. A spec the
// pool cannot serve (another user or HOME, or read-only mounts: see
// mounts.go), or an empty pool, prepares a box on the spot and claims it at
// once: the same code path.
//
// Warm boxes never outlive their provider. Close ends them. A shim whose
// stdin reaches EOF before a claim (Close, or Harvest died, kill -9
// included) kills its warm box and removes its cgroups and run dir. What a
// shim could not clean (it was killed too: a container stopped, a PID
// namespace ended) is reaped by the next provider on the run dir, or by
// `harvest sandbox prune`: the warm boxes of every instance whose lock no
// process holds (reapDeadWarm). Not by pid: a restarted container's server
// runs under the same pid as the dead one, and would take the dead one's
// boxes for its own (and collide with their names).

const poolPrefix = "pool-"

// warmBox is a shim with a prepared, not yet claimed, box.
type warmBox struct {
	name   string // its cgroup's and run dir's name until claimed
	cmd    *exec.Cmd
	in     *os.File // the shim's stdin
	outF   *os.File // the shim's stdout
	out    *bufio.Reader
	cg     *cgroups.Cgroup
	user   sandbox.User
	home   string
	root   string
	state  shim.State
	reaped <-chan struct{} // closed when the shim exited and was reaped
}

// prepareBox starts a shim in a new cgroup and has it prepare a box, with
// mounts (the pool's boxes have none).
// A box started at once (own: its owner) records its owner in its run dir
// before anything else is made; a warm box's name says its owner.
func (p *Provider) prepareBox(ctx context.Context, name, own string, u sandbox.User, home string, lim cgroups.Limits, mounts []boxMount) (_ *warmBox, err error) {
	root, err := p.root.dir(p.cfg.RunDir, p.agent, p.cg.Version == 2, u, home, rootMountPoints(mounts, home))
	if err != nil {
		return nil, fmt.Errorf("preparing the box's root: %w", err)
	}
	dir := filepath.Join(p.cfg.RunDir, name)
	if err := os.Mkdir(dir, 0o711); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("box %s already exists: choose another id or destroy it first", name)
		}
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	if own != "" {
		if err := owner.Record(dir, own); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	cg, err := p.cg.Create(name, lim)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("creating the box's cgroup: %w", err)
	}
	w := &warmBox{name: name, cg: cg, user: u, home: home, root: root}
	defer func() {
		if err != nil {
			w.discard(filepath.Join(p.cfg.RunDir, name))
		}
	}()
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	w.in, w.outF, w.out = inW, outR, bufio.NewReader(outR)
	cmd := exec.Command(p.agent, "sandbox-shim", "--cgroup", strings.Join(cg.DirList(), ","))
	cmd.Stdin, cmd.Stdout = inR, outW
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", goMaxProcs}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		return nil, fmt.Errorf("starting the box's shim: %w", err)
	}
	w.cmd = cmd
	w.reaped = procutil.StartReaper(cmd)
	st, err := w.exchange(ctx, shim.Prepare{
		Dir: dir, Bwrap: p.bwrap, UID: u.UID, GID: u.GID, LogLimit: 1 << 20,
		Args: warmArgs(name, root, u, home, cg.MemoryDir(), cg.Version == 2, mounts),
	})
	if err != nil {
		return nil, fmt.Errorf("preparing the box: %w (shim log: %s)", err, logTail(filepath.Join(dir, "shim.log")))
	}
	w.state = st
	return w, nil
}

// exchange sends the shim one line and reads its one-line reply.
func (w *warmBox) exchange(ctx context.Context, msg any) (shim.State, error) {
	b, err := json.Marshal(msg)
	if err != nil {
		return shim.State{}, err
	}
	if _, err := w.in.Write(append(b, '\n')); err != nil {
		return shim.State{}, fmt.Errorf("the box's shim is gone: %w", err)
	}
	type result struct {
		st  shim.State
		err error
	}
	ch := make(chan result, 1)
	go func() {
		line, err := w.out.ReadBytes('\n')
		var st shim.State
		if err == nil {
			err = json.Unmarshal(line, &st)
		}
		ch <- result{st, err}
	}()
	select {
	case r := <-ch:
		if errors.Is(r.err, io.EOF) {
			return r.st, errors.New("the box's shim exited without replying")
		}
		if r.err == nil && r.st.Error != "" {
			r.err = errors.New(r.st.Error)
		}
		return r.st, r.err
	case <-ctx.Done():
		w.outF.Close() // unblocks the reader
		return shim.State{}, ctx.Err()
	}
}

// discard ends a warm box that will not be used and releases everything it
// had: the shim and its box, the cgroup, the run dir (dir).
func (w *warmBox) discard(dir string) {
	if w.in != nil {
		w.in.Close()
	}
	if w.outF != nil {
		w.outF.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if w.cmd != nil {
		// The shim ends the box and reaps it: a warm one at the EOF on its
		// stdin, a claimed one when its PID 1 dies. Killing the shim first
		// would leave bwrap and the agent as zombies (see endBox).
		agent := procutil.ID{PID: w.state.Agent.PID, Start: w.state.Agent.Start}
		_ = agent.Signal(syscall.SIGKILL)
		gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
		select {
		case <-w.reaped:
		case <-gctx.Done():
			_ = w.cmd.Process.Kill()
		}
		gcancel()
		_ = w.cg.Kill(ctx)
		select {
		case <-w.reaped:
		case <-ctx.Done():
		}
	}
	_ = w.cg.Remove(ctx)
	_ = os.RemoveAll(dir)
}

// pool holds warm boxes for the default box user. Its goroutines are owned
// by the provider (Close).
type pool struct {
	p      *Provider
	owner  string // the provider's instance: it names the warm boxes
	size   int
	idle   chan *warmBox
	refill chan struct{}
	stop   chan struct{}
	wg     sync.WaitGroup

	mu       sync.Mutex
	seq      int
	inflight int

	// hits and misses count the takes a warm box served and those that
	// had to prepare one (PoolStats).
	hits, misses atomic.Uint64
}

// maxPreparing bounds how many warm boxes are prepared at once.
const maxPreparing = 2

// maxPoolWait bounds how long Start waits for a warm box being prepared
// before preparing its own (it only waits when one is on its way).
const maxPoolWait = time.Second

func newPool(p *Provider, size int, owner string) *pool {
	pl := &pool{p: p, owner: owner, size: size, idle: make(chan *warmBox, size), refill: make(chan struct{}, 1), stop: make(chan struct{})}
	pl.wg.Add(1)
	go pl.run()
	pl.kick()
	return pl
}

func (pl *pool) kick() {
	select {
	case pl.refill <- struct{}{}:
	default:
	}
}

// poolLimits are a warm box's limits until its claim sets the box's own.
var poolLimits = cgroups.Limits{MemoryBytes: sandbox.DefaultMemory, Pids: sandbox.DefaultPids + sandbox.AgentPidsReserve}

func (pl *pool) run() {
	defer pl.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-pl.stop; cancel() }()
	for {
		select {
		case <-pl.stop:
			return
		case <-pl.refill:
		}
		pl.mu.Lock()
		for len(pl.idle)+pl.inflight < pl.size && pl.inflight < maxPreparing {
			pl.inflight++
			pl.seq++
			name := poolPrefix + pl.owner + "-" + strconv.Itoa(pl.seq)
			pl.wg.Add(1)
			go func() {
				defer pl.wg.Done()
				w, err := pl.p.prepareBox(ctx, name, "", defaultUser, defaultHome, poolLimits, nil)
				pl.mu.Lock()
				pl.inflight--
				pl.mu.Unlock()
				switch {
				case err != nil:
					if ctx.Err() == nil {
						pl.p.log("preparing a warm box", err)
					}
				case ctx.Err() != nil:
					w.discard(filepath.Join(pl.p.cfg.RunDir, w.name))
				default:
					pl.idle <- w // never blocks: idle+inflight <= size
					pl.kick()
				}
			}()
		}
		pl.mu.Unlock()
	}
}

var (
	defaultUser = sandbox.User{UID: sandbox.DefaultUID, GID: sandbox.DefaultGID}
	defaultHome = "/home/user"
)

// take returns a warm box for user and home, or nil (prepare one yourself).
// When none is ready but one is being prepared, it waits for that one (up to
// maxPoolWait): that is never slower than preparing another beside it.
func (pl *pool) take(ctx context.Context, u sandbox.User, home string) *warmBox {
	if pl == nil {
		return nil
	}
	w := pl.takeWarm(ctx, u, home)
	if w == nil {
		pl.misses.Add(1)
	} else {
		pl.hits.Add(1)
	}
	return w
}

func (pl *pool) takeWarm(ctx context.Context, u sandbox.User, home string) *warmBox {
	if u != defaultUser || home != defaultHome {
		return nil
	}
	var timeout <-chan time.Time
	for {
		var w *warmBox
		select {
		case w = <-pl.idle:
		default:
			pl.mu.Lock()
			preparing := pl.inflight > 0
			pl.mu.Unlock()
			if !preparing {
				pl.kick()
				return nil
			}
			if timeout == nil {
				t := time.NewTimer(maxPoolWait)
				defer t.Stop()
				timeout = t.C
			}
			select {
			case w = <-pl.idle:
			case <-timeout:
				return nil
			case <-ctx.Done():
				return nil
			case <-pl.stop:
				return nil
			}
		}
		pl.kick()
		select {
		case <-w.reaped: // died while waiting: skip it
			w.discard(filepath.Join(pl.p.cfg.RunDir, w.name))
			continue
		default:
		}
		return w
	}
}

// close stops preparing and dismisses every warm box (their shims kill them
// and clean up on EOF).
func (pl *pool) close() {
	if pl == nil {
		return
	}
	close(pl.stop)
	pl.wg.Wait()
	for {
		select {
		case w := <-pl.idle:
			w.in.Close()
			select {
			case <-w.reaped:
			case <-time.After(10 * time.Second):
			}
			w.discard(filepath.Join(pl.p.cfg.RunDir, w.name)) // normally all gone already
		default:
			return
		}
	}
}

// warmOwner is the owner a warm box's name says ("pool-OWNER-N"), or "".
func warmOwner(name string) string {
	rest, ok := strings.CutPrefix(name, poolPrefix)
	if !ok {
		return ""
	}
	own, _, ok := strings.Cut(rest, "-")
	if !ok || owner.CheckID(own) != nil {
		return ""
	}
	return own
}

// reapDeadWarm removes the warm boxes of instances no process holds (a
// Harvest that died, and whose shims could not clean up): processes,
// cgroups and run dirs. An instance another process holds is left alone,
// whatever its pid.
func (p *Provider) reapDeadWarm() {
	byOwner := map[string][]string{}
	ids, _ := p.cg.List()
	ents, _ := os.ReadDir(p.cfg.RunDir)
	for _, e := range ents {
		ids = append(ids, e.Name())
	}
	for _, id := range ids {
		if own := warmOwner(id); own != "" && !slices.Contains(byOwner[own], id) {
			byOwner[own] = append(byOwner[own], id)
		}
	}
	for own, names := range byOwner {
		c, ok, err := owner.TryClaim(p.cfg.OwnersDir, own)
		if err != nil {
			p.log("looking for dead warm boxes", err)
			continue
		}
		if !ok {
			continue
		}
		for _, id := range names {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := p.destroyWarm(ctx, id); err != nil {
				p.log("removing a dead Harvest's warm box", err)
			}
			cancel()
		}
		c.Release()
	}
}

// destroyWarm kills and removes the warm box name of an instance that is
// gone (its shim with it, or there is nothing left but its cgroup and run
// dir).
func (p *Provider) destroyWarm(ctx context.Context, name string) error {
	cg := p.cg.Open(name)
	if err := cg.Kill(ctx); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("warm box %s: %w", name, err)
	}
	if err := cg.Remove(ctx); err != nil {
		return fmt.Errorf("warm box %s: %w", name, err)
	}
	if err := os.RemoveAll(filepath.Join(p.cfg.RunDir, name)); err != nil {
		return fmt.Errorf("warm box %s: %w", name, err)
	}
	return nil
}
