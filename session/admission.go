package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/disk"
)

// Admission: a node keeps a floor of free space on its data directory's
// filesystem (Config.MinFree, harvest serve --min-free), and refuses the
// work that would take more of it while it is below:
//
//   - a new session (Create), before anything of it is stored or made;
//   - a message that resumes a suspended session (Send), before it is
//     stored: the resumed session would unpack its environment, start a
//     box and write to its disk;
//   - an environment's build (Prepare), and the refresh loop's rebuilds
//     (skipped, logged, until there is room).
//
// The refusal is ErrInsufficientStorage (a *StorageError saying the data
// directory, its free space and the floor), 507 Insufficient Storage on
// the API, never a raw ENOSPC from halfway through. 507 rather than 503 +
// Retry-After: retrying in a few seconds does not help, someone has to
// free space (or lower the floor), and clients retry 503s on their own.
// With several nodes, a node below its floor advertises itself full
// (store.NodeFull): others place no new session there, and it takes none
// over (nodes_place.go); a create it receives goes to a node with room, if any.
//
// What is admitted is overcommitted on purpose (sparse disks; see package
// sandbox/disk): live sessions go on writing below the floor, up to their
// own limits. The floor is what keeps new work from eating the host's last
// gigabytes; DiskUsage shows how much the live sessions were promised
// against what is free.

// The default floor: the smaller of DefaultMinFreePercent of the data
// directory's filesystem and DefaultMinFreeMax, but at least
// DefaultMinFreeMin (the host's last gigabyte is never handed out).
const (
	DefaultMinFreePercent = 10
	DefaultMinFreeMax     = 5 << 30
	DefaultMinFreeMin     = 1 << 30
)

// MinFree is the floor of free space kept on the data directory's
// filesystem. The zero value is the default: the smaller of 10% of the
// filesystem and 5 GiB, at least 1 GiB.
type MinFree struct {
	// Bytes, when set, is the floor.
	Bytes int64
	// Percent, when set (and Bytes is not), is the floor as a share of
	// the filesystem's size.
	Percent float64
	// Off turns admission off: new work is taken whatever is free.
	Off bool
}

// ParseMinFree reads --min-free: "" for the default, a size ("5g",
// "512m"), a share of the filesystem ("10%"), or "0" for none.
func ParseMinFree(s string) (MinFree, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return MinFree{}, nil
	case strings.HasSuffix(s, "%"):
		p, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
		if err != nil || math.IsNaN(p) || p < 0 || p >= 100 {
			return MinFree{}, fmt.Errorf("--min-free %q: give a share of the data directory's filesystem below 100%%, like 10%%, a size like 5g, or 0 for no floor", s)
		}
		if p == 0 {
			return MinFree{Off: true}, nil
		}
		return MinFree{Percent: p}, nil
	}
	n, err := sandbox.ParseSize(s)
	if err != nil {
		return MinFree{}, fmt.Errorf("--min-free %q: %v; give a size like 5g, a share like 10%%, or 0 for no floor", s, err)
	}
	if n == 0 {
		return MinFree{Off: true}, nil
	}
	return MinFree{Bytes: n}, nil
}

// String is f as --min-free takes it.
func (f MinFree) String() string {
	switch {
	case f.Off:
		return "0"
	case f.Bytes > 0:
		return sandbox.FormatSize(f.Bytes)
	case f.Percent > 0:
		return strconv.FormatFloat(f.Percent, 'f', -1, 64) + "%"
	}
	return fmt.Sprintf("default: %d%% of the filesystem, at least %s, at most %s", DefaultMinFreePercent, sandbox.FormatSize(DefaultMinFreeMin), sandbox.FormatSize(DefaultMinFreeMax))
}

// Floor is the floor on a filesystem of size bytes (0: none).
func (f MinFree) Floor(size int64) int64 {
	switch {
	case f.Off:
		return 0
	case f.Bytes > 0:
		return f.Bytes
	case f.Percent > 0:
		return int64(float64(size) * f.Percent / 100)
	}
	return max(min(size*DefaultMinFreePercent/100, DefaultMinFreeMax), DefaultMinFreeMin)
}

// ErrInsufficientStorage: the data directory's filesystem has less free
// space than the server's floor, so new work is refused (507). Someone
// frees space on it (deleting ended sessions, say), or lowers the floor.
var ErrInsufficientStorage = errors.New("insufficient storage")

// StorageError is the refusal of work below the floor. It unwraps to
// ErrInsufficientStorage.
type StorageError struct {
	Doing string // what was refused: "creating a session", ...
	Dir   string // the data directory
	Free  int64  // bytes free there (for unprivileged use: statfs f_bavail)
	Size  int64  // its filesystem's size
	Floor int64  // the floor
}

func (e *StorageError) Error() string { return e.Message(true) }

func (e *StorageError) Unwrap() error { return ErrInsufficientStorage }

// Message is the refusal as a caller reads it; the data directory's path
// only with showDir (it is the server's operator's business, as in
// Manager.hideDataDir).
func (e *StorageError) Message(showDir bool) string {
	where, fix := "the server's data directory", "ask the server's operator to free space"
	if showDir {
		where = "the data directory " + e.Dir
		fix = "free space on that filesystem (`harvest session cleanup --older-than 7d` deletes ended sessions and their disks), or lower harvest serve --min-free"
	}
	return fmt.Sprintf("%s: %s has %s free of %s, below this server's floor of %s (--min-free): it takes no new sessions, resumes or environment builds until there is more; %s",
		e.Doing, where, Approx(e.Free), Approx(e.Size), Approx(e.Floor), fix)
}

// DiskUsage is the data directory's filesystem against what the sessions'
// disks were promised (Manager.DiskUsage, harvest doctor).
type DiskUsage struct {
	// Dir is the data directory; Size, Free and Floor its filesystem's
	// size, free space (statfs f_bavail: what anyone but root may still
	// use) and the floor below which new work is refused (0: none).
	Dir   string `json:"dir"`
	Size  int64  `json:"size_bytes"`
	Free  int64  `json:"free_bytes"`
	Floor int64  `json:"floor_bytes"`
	// Disks counts the session disks' images in the data directory
	// (DataDir/disks: sessions' and workflows'), and Allocated is the
	// host space they take now.
	Disks     int   `json:"disks"`
	Allocated int64 `json:"allocated_bytes"`
	// Live counts the disks that can still be written (mounted, or still
	// held by a box): the live and suspended sessions'. Promised is the
	// sum of their limits, PromisedFree what they may still take
	// (Promised less what they hold). An ended session's disk is
	// unmounted: it holds what it holds and is promised nothing more.
	Live         int   `json:"live"`
	Promised     int64 `json:"promised_bytes"`
	PromisedFree int64 `json:"promised_free_bytes"`
}

// Below reports whether the free space is below the floor: new work is
// refused.
func (u DiskUsage) Below() bool { return u.Floor > 0 && u.Free < u.Floor }

// DiskUsage measures the data directory's filesystem and the session
// disks in it. Cheap enough to call per metrics scrape: one statfs, a
// directory walk of DataDir/disks and a stat per image, and the loop
// devices' backing files read once.
func (m *Manager) DiskUsage(ctx context.Context) (DiskUsage, error) {
	return ReadDiskUsage(ctx, m.cfg.DataDir, m.cfg.MinFree)
}

// ReadDiskUsage is DiskUsage for the data directory dir and floor f,
// without a Manager (harvest doctor).
func ReadDiskUsage(ctx context.Context, dir string, f MinFree) (DiskUsage, error) {
	u := DiskUsage{Dir: dir}
	size, free, err := fsSpace(dir)
	if err != nil {
		return u, err
	}
	u.Size, u.Free, u.Floor = size, free, f.Floor(size)
	live, err := disk.Attached()
	if err != nil {
		return u, fmt.Errorf("listing the loop devices: %w", err)
	}
	root := filepath.Join(realPath(dir), "disks") // as the loop devices name their files
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // no disks yet, or one deleted meanwhile
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".img") {
			return nil // the .img.new of a disk being made is counted once made
		}
		st, err := disk.StatImage(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		} else if err != nil {
			return err
		}
		u.Disks++
		u.Allocated += st.Allocated
		if _, ok := live[p]; ok {
			u.Live++
			u.Promised += st.Size
			u.PromisedFree += max(st.Size-st.Allocated, 0)
		}
		return nil
	})
	if err != nil {
		return u, fmt.Errorf("measuring the session disks in %s: %w", root, err)
	}
	return u, nil
}

// fsSpace is the size and the free space (for unprivileged use) of the
// filesystem holding dir.
func fsSpace(dir string) (size, free int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return int64(st.Blocks) * int64(st.Bsize), int64(st.Bavail) * int64(st.Bsize), nil
}

// admit refuses work that would take space (doing says which) when the
// data directory is below its floor. It logs when the data directory
// crosses the floor, either way.
func (m *Manager) admit(doing string) error {
	low, se, err := m.belowFloor()
	if err != nil {
		return fmt.Errorf("%s: checking the data directory's free space: %w", doing, err)
	}
	if !low {
		return nil
	}
	se.Doing = doing
	return se
}

// belowFloor reports whether the data directory is below its floor (with
// the refusal to give when it is), and logs a crossing of the floor.
func (m *Manager) belowFloor() (bool, *StorageError, error) {
	if m.cfg.MinFree.Off {
		return false, nil, nil
	}
	size, free, err := fsSpace(m.cfg.DataDir)
	if err != nil {
		return false, nil, err
	}
	floor := m.cfg.MinFree.Floor(size)
	low := free < floor
	if m.disks.low.Swap(low) != low {
		if low {
			m.log.Warn("the data directory is below its floor of free space: new sessions, resumes and environment builds are refused until there is more",
				"dir", m.cfg.DataDir, "free", Approx(free), "floor", Approx(floor), "min_free", m.cfg.MinFree.String())
		} else {
			m.log.Info("the data directory is above its floor of free space again: new work is taken",
				"dir", m.cfg.DataDir, "free", Approx(free), "floor", Approx(floor))
		}
	}
	if !low {
		return false, nil, nil
	}
	return true, &StorageError{Dir: m.cfg.DataDir, Free: free, Size: size, Floor: floor}, nil
}

// full reports whether this node takes no new sessions for want of space
// (a failure to tell counts as room: the work itself then fails, saying
// why).
func (m *Manager) full() bool {
	low, _, err := m.belowFloor()
	if err != nil {
		m.log.Warn("checking the data directory's free space", "err", err)
	}
	return low
}

// Approx renders a byte count for a person: three significant digits in
// the largest binary unit under it (5GiB, 3.14GiB, 512MiB, 1.5KiB).
func Approx(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size || n <= -u.size {
			v := float64(n) / float64(u.size)
			prec := 2
			switch {
			case math.Abs(v) >= 100:
				prec = 0
			case math.Abs(v) >= 10:
				prec = 1
			}
			t := strconv.FormatFloat(v, 'f', prec, 64)
			if strings.Contains(t, ".") {
				t = strings.TrimRight(strings.TrimRight(t, "0"), ".")
			}
			return t + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// hostFull explains an error that is the host's disk being full — ENOSPC
// from outside a session's own disk: making its image, its box's run
// directory, a copy with no disk — with what is free, so that no one reads
// a bare "no space left on device". Other errors pass unchanged.
func (m *Manager) hostFull(err error) error {
	if err == nil || !(disk.IsFull(err) || strings.Contains(err.Error(), "no space left on device")) {
		return err
	}
	_, free, serr := fsSpace(m.cfg.DataDir)
	if serr != nil {
		return fmt.Errorf("%w (the server's disk is full; its operator frees space)", err)
	}
	return fmt.Errorf("%w (the server's disk is full: its data directory has %s free; its operator frees space, and new sessions are refused meanwhile)", err, Approx(free))
}
