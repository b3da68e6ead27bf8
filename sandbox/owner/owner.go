// Package owner says which running process owns which boxes, so that the
// boxes no running Harvest owns can be found and destroyed (`harvest sandbox
// prune`, a server's warm boxes after a kill -9) without ever touching a
// live one's.
//
// # Owners
//
// An owner is a name (its ID) and a lock file, DIR/ID.lock (DIR is
// DefaultDir, beside the backends' run dirs). A process owns the boxes
// recorded with ID exactly while it holds a flock on that file. The kernel
// drops a flock when its holder exits, however it exits (kill -9 included),
// and no other process inherits it (Go opens files close-on-exec), so a
// lock file that can be locked exclusively belongs to no running process.
// Pids are not used: a container that restarts gives its processes the
// same pids again, and its new server would then adopt the dead one's
// boxes.
//
// Two kinds of owner:
//
//   - An instance (NewInstance): a random ID held exclusively by one process
//     for its life, and by no other process ever. A local provider names its
//     warm boxes with its instance, and a one-shot command (harvest sandbox
//     run, harvest run) owns its boxes as one: they are the process's alone
//     and never outlive it unowned for long.
//   - A shared owner (Share): a stable ID held with a shared lock by every
//     process that serves it: the servers of one data directory (its
//     DATA/server-id), one after the other across restarts (the next one
//     reattaches the boxes), or side by side (nodes sharing the data
//     directory). Its boxes are owned while any of them runs.
//
// To destroy the boxes of an owner, a pruner first takes its lock
// exclusively (Claim), which succeeds only when no process holds it, and
// keeps it until its boxes are gone, so a server of that owner starting
// meanwhile waits (Share) instead of reattaching boxes that are being
// destroyed. Box creation always happens under a held owner, so a claimed
// owner gets no new box.
//
// Lock files are unlinked by the instance that made them (Release) and by
// a pruner that claimed them; a holder checks after locking that its file
// is still the one at the path (a pruner may have unlinked it between the
// open and the lock), else it locks again.
package owner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/base/procutil"
	"github.com/harvest-dev/harvest/sandbox"
)

// DefaultDir is where the owners of the boxes of every backend keep their
// lock files, beside the backends' default run dirs:
// sandbox.DefaultRunDir("owners") (so $HARVEST_RUN_DIR keeps separate
// Harvests apart here too). DirFor gives it for their run dirs.
func DefaultDir() string { return sandbox.DefaultRunDir("owners") }

// DirFor is the owners' directory of the boxes of backend's run dir
// runDir: "owners" beside it when the run dir is named for its backend, as
// the default ones are (BASE/local, BASE/docker: every backend shares
// BASE/owners, where harvest sandbox prune looks), else runDir/.owners. A
// function of the run dir alone: every provider of a run dir, whoever
// opened it, agrees on which of its warm boxes' owners run.
func DirFor(runDir, backend string) string {
	if filepath.Base(runDir) == backend {
		return filepath.Join(filepath.Dir(runDir), "owners")
	}
	return filepath.Join(runDir, ".owners")
}

// instancePrefix starts every instance's ID.
const instancePrefix = "i"

// Hold is an owner a process holds: its boxes are owned while the Hold is
// not released (and the process runs).
type Hold struct {
	id       string
	path     string
	f        *os.File
	instance bool
}

// ID is the owner's name, as boxes record it.
func (h *Hold) ID() string { return h.id }

// NewInstance makes and holds a fresh instance owner in dir: an ID no
// other process will ever hold, for this process's life (or until
// Release).
func NewInstance(dir string) (*Hold, error) {
	if err := mkdir(dir); err != nil {
		return nil, err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	id := instancePrefix + hex.EncodeToString(b[:])
	path := lockPath(dir, id)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating the owner lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("locking the owner lock %s: %w", path, err)
	}
	return &Hold{id: id, path: path, f: f, instance: true}, nil
}

// ErrPruning: the owner's boxes are being destroyed (harvest sandbox
// prune holds it) and did not finish in time; try again when it is done.
var ErrPruning = errors.New("its boxes are being destroyed by harvest sandbox prune")

// Share holds the shared owner id in dir, with any other process that
// shares it. While a pruner has claimed it (its boxes are being
// destroyed) it waits, calling waiting once, until ctx ends (ErrPruning).
func Share(ctx context.Context, dir, id string, waiting func()) (*Hold, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := mkdir(dir); err != nil {
		return nil, err
	}
	path := lockPath(dir, id)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	said := false
	for {
		f, ok, err := lock(path, syscall.LOCK_SH)
		if err != nil {
			return nil, err
		}
		if ok {
			return &Hold{id: id, path: path, f: f}, nil
		}
		if !said && waiting != nil {
			waiting()
			said = true
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("owner %s: %w (%v)", id, ErrPruning, ctx.Err())
		}
	}
}

// Sole reports whether this process is the only one holding h, taking it
// exclusively if so (a pruner cannot claim it either way). A shared Hold
// that other processes share stays shared, with a moment in between where
// it is not held at all (flock converts by dropping the old lock first):
// call it only on the way out.
func (h *Hold) Sole() bool {
	if h.instance {
		return true
	}
	if syscall.Flock(int(h.f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
		return true
	}
	_ = syscall.Flock(int(h.f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	return false
}

// Release lets go of the owner: an instance's lock file is removed (no
// process will hold it again); a shared one's stays for the next server.
func (h *Hold) Release() error {
	if h == nil || h.f == nil {
		return nil
	}
	if h.instance {
		os.Remove(h.path) // before the unlock: no one locks a file on its way out
	}
	err := h.f.Close()
	h.f = nil
	return err
}

// Claim is an owner a pruner took from no one: while it is held, no
// process owns the owner's boxes or makes new ones.
type Claim struct {
	id   string
	path string
	f    *os.File
}

// ID is the claimed owner's name.
func (c *Claim) ID() string { return c.id }

// TryClaim takes owner id exclusively if no running process holds it
// (ok false when one does). A legacy id (an older Harvest named warm boxes
// by its pid) is claimed, with no lock file, only when no process has that
// pid.
func TryClaim(dir, id string) (c *Claim, ok bool, err error) {
	if err := checkID(id); err != nil {
		return nil, false, err
	}
	if pid, err := strconv.Atoi(id); err == nil {
		if _, err := procutil.Lookup(pid); err == nil {
			return nil, false, nil
		}
		return &Claim{id: id}, true, nil
	}
	if err := mkdir(dir); err != nil {
		return nil, false, err
	}
	path := lockPath(dir, id)
	f, ok, err := lock(path, syscall.LOCK_EX)
	if err != nil || !ok {
		return nil, false, err
	}
	return &Claim{id: id, path: path, f: f}, true, nil
}

// Release ends the claim and removes the lock file: the owner's boxes are
// gone, and its next server starts afresh.
func (c *Claim) Release() error {
	if c == nil || c.f == nil {
		return nil
	}
	os.Remove(c.path)
	err := c.f.Close()
	c.f = nil
	return err
}

// Stale lists the owners in dir whose lock files no process holds: the
// instances of processes that died, and shared owners whose servers are
// not running.
func Stale(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok || checkID(id) != nil {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			out = append(out, id)
		}
		f.Close()
	}
	return out, nil
}

// lock opens path (creating it) and locks it with how (LOCK_SH or
// LOCK_EX) without waiting: ok false when another process's lock is in the
// way. It makes sure the file locked is still the one at path.
func lock(path string, how int) (f *os.File, ok bool, err error) {
	for range 100 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, false, fmt.Errorf("opening the owner lock %s: %w", path, err)
		}
		if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, false, nil
			}
			return nil, false, fmt.Errorf("locking the owner lock %s: %w", path, err)
		}
		if same(f, path) {
			return f, true, nil
		}
		f.Close() // unlinked by a pruner between the open and the lock
	}
	return nil, false, fmt.Errorf("locking the owner lock %s: it keeps being replaced", path)
}

// same reports whether f is the file at path now.
func same(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

func lockPath(dir, id string) string { return filepath.Join(dir, id+".lock") }

// checkID refuses an ID that is not a plain name.
func checkID(id string) error {
	if id == "" || len(id) > 64 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" || strings.HasPrefix(id, ".") {
		return fmt.Errorf("owner %q: give a name of lower-case letters, digits, '-', '_' and '.'", id)
	}
	return nil
}

func mkdir(dir string) error {
	// Its parent is the run dir the backends share ($HARVEST_RUN_DIR,
	// /run/harvest): made 0711 as sandbox.DefaultRunDir makes it, never
	// 0700 through MkdirAll, or the box user could not reach a box's root
	// below it (bwrap: "Can't find source path ...: Permission denied")
	// when the owners' directory happened to be made first.
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return fmt.Errorf("creating the owners' directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the owners' directory: %w", err)
	}
	return nil
}

// CheckID says whether id can name an owner.
func CheckID(id string) error { return checkID(id) }
