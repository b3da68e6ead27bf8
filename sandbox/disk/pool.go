package disk

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/owner"
)

// Disks ready ahead of demand
//
// Making a disk costs a mkfs.ext4 process, a loop device and a mount:
// 15-60 ms depending on load (BENCHMARKS.md), against about 4 ms for a
// warm box. A Pool keeps a few disks of one size (a server's default)
// made and mounted ahead of demand, in a directory of the data
// directory's filesystem (Dir: DataDir/disks/pool), and Take gives one to
// a session in O(1): its image is renamed to the session's image path (a
// loop device names its backing file by path, and follows the rename),
// its mount is bound at the session's mount point (a bind copies the
// mount's nosuid, nodev and noatime), and the pool's mount point is let
// go. No process, no mkfs, no loop setup: two syscalls and a rename. A
// request for another size, or an empty pool, makes its disk as before
// (Create); the pool makes a replacement in the background, one at a
// time.
//
// Pool disks are Harvest's like any session disk: they sit in the data
// directory, so DiskUsage and admission count them (mounted: promised),
// and the pool makes none while Room says there is no room (the data
// directory below its floor).
//
// They never outlive their server. Each is named "pool-OWNER-N" (its
// image pool-OWNER-N.img, its mount point pool-OWNER-N), OWNER being an
// instance (package owner) the pool's process holds for its life: Close
// removes them; a server killed (kill -9, a crash) leaves them, and the
// next pool on the directory (the next start), or `harvest sandbox
// prune` (PrunePools), removes those whose owner no process holds. For
// prune to find the directory, a pool records it in the owners directory
// (OWNERS/disk-pools/HASH): prune knows no data directory.

// PoolConfig configures a Pool.
type PoolConfig struct {
	// Dir holds the pool's disks: a directory on the filesystem of the
	// disks Take gives (a rename cannot cross filesystems).
	Dir string
	// Size is the size of the pool's disks (WithDefaults); Take serves
	// only that size.
	Size Size
	// Count is how many disks to keep ready (at least 1).
	Count int
	// Owner is the instance (package owner) that names the pool's disks,
	// held by this process (owner.NewInstance) for as long as the pool.
	Owner string
	// OwnersDir holds the owners' lock files: the pool records Dir there
	// for PrunePools, and reclaims the disks of dead owners it finds in
	// Dir.
	OwnersDir string
	// Room, when set, is asked before each disk is made: an error means
	// there is no room for one now (admission); the pool tries again
	// later.
	Room func() error
	// Logger receives the errors of making disks in the background.
	Logger *slog.Logger
}

// Pool keeps disks of one size made and mounted ahead of demand. Its one
// goroutine is owned by Close.
type Pool struct {
	cfg    PoolConfig
	ready  chan Disk
	refill chan struct{}
	// release: the pool's mount points of disks given by a bind, for run
	// to unmount (give).
	release chan string
	stop    chan struct{}
	done    chan struct{}
	ctx     context.Context // cancelled by Close: a disk being made is dropped
	cancel  context.CancelFunc

	closeOnce sync.Once

	mu     sync.Mutex
	closed bool
	seq    int
	hits   int
	misses int
}

// poolRetry is how often a pool short of disks tries again when making
// one failed, or there was no room.
const poolRetry = 30 * time.Second

// PoolPrefix starts the name of every pool disk.
const PoolPrefix = "pool-"

// NewPool reclaims the disks of dead owners in cfg.Dir, records the
// directory for PrunePools and starts making cfg.Count disks.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if !filepath.IsAbs(cfg.Dir) {
		return nil, fmt.Errorf("disk pool %q: use an absolute path", cfg.Dir)
	}
	if err := owner.CheckID(cfg.Owner); err != nil {
		return nil, fmt.Errorf("disk pool: %w", err)
	}
	cfg.Size = cfg.Size.WithDefaults()
	if err := cfg.Size.Validate(); err != nil {
		return nil, fmt.Errorf("disk pool: %w", err)
	}
	cfg.Count = max(cfg.Count, 1)
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("disk pool: %w", err)
	}
	if err := recordPoolDir(cfg.OwnersDir, cfg.Dir); err != nil {
		return nil, fmt.Errorf("disk pool: recording %s for harvest sandbox prune: %w", cfg.Dir, err)
	}
	if _, err := prunePoolDir(cfg.OwnersDir, cfg.Dir, false); err != nil && cfg.Logger != nil {
		cfg.Logger.Warn("removing the pool disks of a Harvest that died", "dir", cfg.Dir, "err", err)
	}
	p := &Pool{cfg: cfg, ready: make(chan Disk, cfg.Count), release: make(chan string, 64), refill: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	go p.run()
	p.kick()
	return p, nil
}

// Size is the size of the pool's disks.
func (p *Pool) Size() Size { return p.cfg.Size }

// PoolStats counts what a pool did.
type PoolStats struct {
	Ready  int // disks ready now
	Hits   int // Takes served from the pool
	Misses int // Takes of the pool's size that found none ready
}

// Stats says how many disks are ready and how Takes fared.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStats{Ready: len(p.ready), Hits: p.hits, Misses: p.misses}
}

func (p *Pool) kick() {
	select {
	case p.refill <- struct{}{}:
	default:
	}
}

func (p *Pool) run() {
	defer close(p.done)
	ctx := p.ctx
	retry := time.NewTimer(poolRetry)
	defer retry.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-p.refill:
		case <-retry.C:
		case dir := <-p.release:
			releaseMountPoint(dir)
			continue
		}
		for len(p.ready) < cap(p.ready) {
			select {
			case <-p.stop:
				return
			default:
			}
			if p.cfg.Room != nil {
				if err := p.cfg.Room(); err != nil {
					p.log("no room for a pool disk", err)
					break
				}
			}
			p.mu.Lock()
			p.seq++
			name := PoolPrefix + p.cfg.Owner + "-" + strconv.Itoa(p.seq)
			p.mu.Unlock()
			d := Disk{Image: filepath.Join(p.cfg.Dir, name+".img"), Dir: filepath.Join(p.cfg.Dir, name)}
			if err := Create(ctx, d, p.cfg.Size); err != nil {
				if ctx.Err() == nil {
					p.log("making a pool disk", err)
				}
				removePoolDisk(d)
				break
			}
			settle(d.Dir)
			p.ready <- d // never blocks: only run sends, below cap
		}
		retry.Reset(poolRetry)
	}
}

func (p *Pool) log(msg string, err error) {
	if p.cfg.Logger != nil {
		p.cfg.Logger.Warn(msg, "dir", p.cfg.Dir, "err", err)
	}
}

// Take gives d a disk from the pool when size (WithDefaults) is the
// pool's and one is ready: its image renamed to d.Image (which must not
// exist) and mounted at d.Dir (which must be empty or missing). It
// reports false, having done nothing, when it cannot: the caller makes
// the disk itself (Create). A nil Pool takes nothing.
func (p *Pool) Take(ctx context.Context, d Disk, size Size) (bool, error) {
	if p == nil || size.WithDefaults() != p.cfg.Size {
		return false, nil
	}
	if err := d.check(); err != nil {
		return false, err
	}
	var pd Disk
	select {
	case pd = <-p.ready:
	default:
		p.mu.Lock()
		p.misses++
		p.mu.Unlock()
		p.kick()
		return false, nil
	}
	p.kick()
	if err := p.give(pd, d); err != nil {
		removePoolDisk(pd)
		if errors.Is(err, errNotGiven) {
			p.log("giving a pool disk", err)
			return false, nil
		}
		return false, err
	}
	p.mu.Lock()
	p.hits++
	p.mu.Unlock()
	return true, nil
}

// errNotGiven: a pool disk could not be given (it is removed); the
// caller makes its own.
var errNotGiven = errors.New("pool disk not given")

// give moves the pool disk pd to d: rename the image, move its mount. On error everything of pd is left
// for removePoolDisk, and d as it was, except for d.Dir made.
func (p *Pool) give(pd, d Disk) error {
	// Each step on the host's filesystem is a journaled metadata change
	// (milliseconds on a busy host): none that is not needed.
	if err := os.Mkdir(d.Dir, 0o711); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(d.Dir, 0o711); err != nil {
			return fmt.Errorf("creating the disk's mount point: %w", err)
		}
	} else if errors.Is(err, os.ErrExist) {
		if ents, err := os.ReadDir(d.Dir); err != nil {
			return fmt.Errorf("disk mount point %s: %w", d.Dir, err)
		} else if len(ents) > 0 {
			return fmt.Errorf("disk mount point %s is not empty (it holds %s): its files would be hidden under the disk; move them away", d.Dir, ents[0].Name())
		}
	} else if err != nil {
		return fmt.Errorf("creating the disk's mount point: %w", err)
	}
	// RENAME_NOREPLACE: never over another disk's image.
	rename := func() error {
		return unix.Renameat2(unix.AT_FDCWD, pd.Image, unix.AT_FDCWD, d.Image, unix.RENAME_NOREPLACE)
	}
	err := rename()
	if errors.Is(err, unix.ENOENT) {
		if err := os.MkdirAll(filepath.Dir(d.Image), 0o700); err != nil {
			return fmt.Errorf("creating the disk image's directory: %w", err)
		}
		err = rename()
	}
	if errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("disk image %s exists already", d.Image)
	} else if err != nil {
		return fmt.Errorf("%w: renaming %s to %s: %v", errNotGiven, pd.Image, d.Image, err)
	}
	// The mount moves to d.Dir: one mount, no second one to let go of.
	// The kernel refuses to move a mount whose parent is shared (a
	// systemd host's /): then it is bound there (a bind copies the
	// mount's nosuid, nodev and noatime) and the pool's mount point is
	// unmounted in the background (an unmount waits out an RCU grace
	// period: milliseconds under load). Its directory is removed in the
	// background either way.
	if err := unix.Mount(pd.Dir, d.Dir, "", unix.MS_MOVE, ""); err != nil {
		if err := unix.Mount(pd.Dir, d.Dir, "", unix.MS_BIND, ""); err != nil {
			_ = os.Rename(d.Image, pd.Image) // back to the pool's name, for removePoolDisk
			return fmt.Errorf("%w: binding %s at %s: %v", errNotGiven, pd.Dir, d.Dir, err)
		}
	}
	p.mu.Lock()
	queued := false
	if !p.closed {
		select {
		case p.release <- pd.Dir:
			queued = true
		default: // a burst of takes: the taker does it
		}
	}
	p.mu.Unlock()
	if !queued {
		releaseMountPoint(pd.Dir)
	}
	return nil
}

// settle readies a new disk for its taker: the first write to a new
// filesystem reads its group's bitmaps and an inode table block (through
// the loop device, in direct I/O: ~9 ms measured), and a write's journal
// commit can hold up the next writer; both are paid here, in the
// background, rather than by the session that takes the disk.
func settle(dir string) {
	warm := filepath.Join(dir, ".warm")
	if err := os.Mkdir(warm, 0o700); err == nil {
		os.Remove(warm)
	}
	if f, err := os.Open(dir); err == nil {
		_ = unix.Syncfs(int(f.Fd()))
		f.Close()
	}
}

// releaseMountPoint unmounts a given pool disk's mount point if its disk
// was bound elsewhere (the bind holds the filesystem), and removes it. A
// mount point whose mount moved away has nothing mounted: the unmount is
// EINVAL, and harmless.
func releaseMountPoint(dir string) {
	_ = unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	_ = os.Remove(dir)
}

// Close stops making disks and removes the ready ones.
func (p *Pool) Close() error {
	if p == nil {
		return nil
	}
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true // no more releases queued: Close drains them all
		p.mu.Unlock()
		close(p.stop)
		p.cancel()
	})
	<-p.done
	var errs []error
	for {
		select {
		case dir := <-p.release:
			releaseMountPoint(dir)
		case d := <-p.ready:
			errs = append(errs, removePoolDisk(d))
		default:
			return errors.Join(errs...)
		}
	}
}

// removePoolDisk unmounts and deletes a pool disk, whatever is left of
// it (a disk being made: its .new image too).
func removePoolDisk(d Disk) error {
	err := d.Remove()
	os.Remove(d.Image + ".new")
	if rerr := os.Remove(d.Dir); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}

// poolsDir is where pools record their directories, in the owners
// directory.
func poolsDir(ownersDir string) string { return filepath.Join(ownersDir, "disk-pools") }

func recordPoolDir(ownersDir, dir string) error {
	if ownersDir == "" {
		return errors.New("no owners directory")
	}
	rd := poolsDir(ownersDir)
	if err := os.MkdirAll(rd, 0o700); err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(dir))
	path := filepath.Join(rd, hex.EncodeToString(sum[:])[:16])
	if b, err := os.ReadFile(path); err == nil && string(b) == dir {
		return nil
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(dir), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// poolDiskOwner is the owner a pool disk's file name says
// ("pool-OWNER-N", ".img" or ".img.new" after it), or "".
func poolDiskOwner(name string) (own, base string) {
	rest, ok := strings.CutPrefix(name, PoolPrefix)
	if !ok {
		return "", ""
	}
	own, n, ok := strings.Cut(rest, "-")
	if !ok || owner.CheckID(own) != nil {
		return "", ""
	}
	n, _, _ = strings.Cut(n, ".")
	if _, err := strconv.Atoi(n); err != nil {
		return "", ""
	}
	return own, PoolPrefix + own + "-" + n
}

// prunePoolDir removes (dryRun: lists) the pool disks in dir whose owner
// no process holds, each owner claimed meanwhile.
func prunePoolDir(ownersDir, dir string, dryRun bool) ([]owner.Result, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	byOwner := map[string][]string{}
	var owners []string
	for _, e := range ents {
		own, base := poolDiskOwner(e.Name())
		if own == "" || slices.Contains(byOwner[own], base) {
			continue
		}
		if byOwner[own] == nil {
			owners = append(owners, own)
		}
		byOwner[own] = append(byOwner[own], base)
	}
	slices.Sort(owners)
	var out []owner.Result
	var errs []error
	for _, own := range owners {
		c, ok, err := owner.TryClaim(ownersDir, own)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, base := range byOwner[own] {
			r := owner.Result{Backend: "disk", Box: owner.Box{Handle: sandbox.Handle{ID: filepath.Join(dir, base) + ".img"}, Owner: own, Warm: true}}
			switch {
			case !ok:
				r.Action = owner.Owned
			case dryRun:
				r.Action = owner.WouldDestroy
			default:
				r.Action = owner.Destroyed
				if err := removePoolDisk(Disk{Image: filepath.Join(dir, base+".img"), Dir: filepath.Join(dir, base)}); err != nil {
					r.Action, r.Err = owner.Failed, err
				}
			}
			out = append(out, r)
		}
		if ok {
			c.Release()
		}
	}
	return out, errors.Join(errs...)
}

// PrunePools removes (dryRun: lists) the pool disks no running Harvest
// owns, in every pool directory recorded in ownersDir: the disks a killed
// server left (`harvest sandbox prune`). A recorded directory that is
// gone is forgotten.
func PrunePools(ownersDir string, dryRun bool) ([]owner.Result, error) {
	rd := poolsDir(ownersDir)
	ents, err := os.ReadDir(rd)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out []owner.Result
	var errs []error
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".new") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(rd, e.Name()))
		if err != nil {
			continue
		}
		dir := string(b)
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			if !dryRun {
				os.Remove(filepath.Join(rd, e.Name()))
			}
			continue
		}
		rs, err := prunePoolDir(ownersDir, dir, dryRun)
		out = append(out, rs...)
		if err != nil {
			errs = append(errs, fmt.Errorf("pool disks in %s: %w", dir, err))
		}
	}
	return out, errors.Join(errs...)
}
