package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/session"
)

// diskFlags are --disk and --disk-inodes: the size of a box's disk
// (package sandbox/disk), which holds its workspaces, /tmp and HOME.
type diskFlags struct {
	size   string
	inodes string
}

func (f *diskFlags) add(fl *pflag.FlagSet, dflt string) {
	fl.StringVar(&f.size, "disk", "", "disk limit of the sandbox: its workspaces, /tmp and HOME together, like 10g (default "+dflt+")")
	fl.StringVar(&f.inodes, "disk-inodes", "", "most files on the sandbox's disk (default: one per 16 KiB of --disk)")
}

// size returns the flags' disk size; zero fields take the defaults of the
// caller (a server's, or disk.Size.WithDefaults).
func (f *diskFlags) limits() (disk.Size, error) {
	var s disk.Size
	if f.size != "" {
		n, err := sandbox.ParseSize(f.size)
		if err != nil {
			return s, fmt.Errorf("--disk: %w", err)
		}
		if n == 0 {
			return s, fmt.Errorf("--disk 0: give a size like 10g (there is no unlimited disk)")
		}
		s.Bytes = n
	}
	if f.inodes != "" {
		n, err := strconv.ParseInt(f.inodes, 10, 64)
		if err != nil || n <= 0 {
			return s, fmt.Errorf("--disk-inodes %q: give a positive number of files, like 1000000", f.inodes)
		}
		s.Inodes = n
	}
	if s != (disk.Size{}) {
		if err := s.WithDefaults().Validate(); err != nil {
			return s, fmt.Errorf("--disk: %w", err)
		}
	}
	return s, nil
}

// runDisk makes the disk of a `harvest run`: RUN/disk.img mounted at
// RUN/disk, the workspaces under it and the box's /tmp and HOME in its
// .box. It stays mounted after the run, so the workspaces can be looked at
// where the run said they are, until a reboot or `umount`.
func runDisk(ctx context.Context, runDir string, size disk.Size, stderr io.Writer) (wsDir, boxDir string, err error) {
	if err := disk.Check(ctx, ""); err != nil {
		return "", "", fmt.Errorf("--disk: %w", err)
	}
	d := disk.Disk{Image: filepath.Join(runDir, "disk.img"), Dir: filepath.Join(runDir, "disk")}
	if err := disk.Create(ctx, d, size); err != nil {
		return "", "", fmt.Errorf("--disk: %w", err)
	}
	boxDir = filepath.Join(d.Dir, ".box")
	if err := os.Mkdir(boxDir, 0o700); err != nil {
		return "", "", fmt.Errorf("--disk: %w", err)
	}
	fmt.Fprintf(stderr, "harvest: the workspaces are on a %s disk mounted at %s until reboot (free it with: umount %s && rm %s)\n",
		sandbox.FormatSize(size.WithDefaults().Bytes), d.Dir, d.Dir, d.Image)
	return d.Dir, boxDir, nil
}

// boxDisk makes a disk for one `harvest sandbox run` box, in a directory
// of its own, and returns its DiskDir and what removes it.
func boxDisk(ctx context.Context, size disk.Size) (string, func(), error) {
	if err := disk.Check(ctx, ""); err != nil {
		return "", nil, fmt.Errorf("--disk: %w", err)
	}
	dir, err := os.MkdirTemp("", "harvest-disk-")
	if err != nil {
		return "", nil, fmt.Errorf("--disk: %w", err)
	}
	d := disk.Disk{Image: filepath.Join(dir, "disk.img"), Dir: filepath.Join(dir, "disk")}
	remove := func() {
		if err := d.Remove(); err == nil {
			os.RemoveAll(dir)
		}
	}
	if err := disk.Create(ctx, d, size); err != nil {
		remove()
		return "", nil, fmt.Errorf("--disk: %w", err)
	}
	return d.Dir, remove, nil
}

// serveDisks is harvest serve's check of its sessions' disks: a trial
// disk in the data directory, before anything else starts. Where disks
// cannot be made it refuses to start, saying what failed and how to fix
// it, unless told --no-disk-limits: a server that runs its sessions
// without the limit they show only does so when asked.
func serveDisks(ctx context.Context, data string, f serveFlags, stderr io.Writer) error {
	if f.noDisks {
		if f.disk.size != "" || f.disk.inodes != "" {
			return exitCode(2, fmt.Errorf("--no-disk-limits with --disk or --disk-inodes: give one or the other"))
		}
		fmt.Fprintln(stderr, "harvest: --no-disk-limits: sessions run without disk limits: their workspaces, /tmp and HOME can fill the host's disk (they say limits_enforced.disk false)")
		return nil
	}
	if err := disk.Check(ctx, data); err != nil {
		return exitCode(exitHarvestError, fmt.Errorf("disk limits cannot be enforced here: %w\n"+
			"  every session's workspaces, /tmp and HOME live on a disk image of its own (limits.disk_bytes), which needs root,\n"+
			"  the loop devices (/dev/loop-control; modprobe loop, or give a container the loop devices) and mkfs.ext4 (apt-get install e2fsprogs);\n"+
			"  `harvest doctor` checks them. Or pass --no-disk-limits to run the sessions without disk limits", err))
	}
	return nil
}

// diskReport says whether disk limits can be enforced here (`harvest
// doctor`), and what the data directory holds against what its sessions'
// disks were promised.
type diskReport struct {
	Available bool   `json:"available"`
	Mechanism string `json:"mechanism"`
	Dir       string `json:"dir"` // where a disk was tried
	Reason    string `json:"reason,omitempty"`
	CreateMS  int64  `json:"create_ms,omitempty"` // making, mounting and removing the trial disk
	// Space is the data directory's free space, floor and session disks
	// (absent when there is no data directory yet); SpaceError why it
	// could not be measured.
	Space      *session.DiskUsage `json:"space,omitempty"`
	SpaceError string             `json:"space_error,omitempty"`
}

// checkDisks tries a small disk in the server's data directory (or, when
// it does not exist yet, in the temporary directory), and measures the
// data directory's space with the floor minFree.
func checkDisks(ctx context.Context, data string, minFree session.MinFree) diskReport {
	r := diskReport{Mechanism: "a sparse ext4 image per session, loop-mounted (bytes and inodes enforced by the kernel)"}
	dir, err := serverDataDir(data)
	exists := err == nil && isDir(dir)
	if exists {
		u, err := session.ReadDiskUsage(ctx, dir, minFree)
		if err != nil {
			r.SpaceError = err.Error()
		} else {
			r.Space = &u
		}
	} else {
		dir = os.TempDir()
	}
	r.Dir = dir
	start := time.Now()
	if err := disk.Check(ctx, dir); err != nil {
		r.Reason = err.Error()
		return r
	}
	r.Available, r.CreateMS = true, time.Since(start).Milliseconds()
	return r
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func printDiskReport(w io.Writer, r diskReport, minFree session.MinFree) {
	if r.Available {
		fmt.Fprintf(w, "\ndisk limits: ok: %s; a trial disk in %s took %d ms\n", r.Mechanism, r.Dir, r.CreateMS)
	} else {
		fmt.Fprintf(w, "\ndisk limits: UNAVAILABLE: %s\n  harvest serve then refuses to start, unless given --no-disk-limits (the sessions' workspaces, /tmp and HOME can then fill the host's disk)\n", r.Reason)
	}
	if r.SpaceError != "" {
		fmt.Fprintf(w, "data directory: cannot measure its space: %s\n", r.SpaceError)
	}
	u := r.Space
	if u == nil {
		return
	}
	fmt.Fprintf(w, "data directory %s: %s free of %s", u.Dir, session.Approx(u.Free), session.Approx(u.Size))
	switch {
	case u.Floor == 0:
		fmt.Fprintf(w, "; no floor (--min-free 0): new work is taken whatever is free\n")
	case u.Below():
		fmt.Fprintf(w, "; BELOW the floor of %s (--min-free %s): harvest serve refuses new sessions, resumes and environment builds (507) until space is freed\n", session.Approx(u.Floor), minFree)
	default:
		fmt.Fprintf(w, "; floor %s (--min-free %s): %s before harvest serve refuses new work\n", session.Approx(u.Floor), minFree, session.Approx(u.Free-u.Floor))
	}
	fmt.Fprintf(w, "session disks: %d, holding %s of the host; %d live (mounted) ones were promised %s in all, %s more than they hold",
		u.Disks, session.Approx(u.Allocated), u.Live, session.Approx(u.Promised), session.Approx(u.PromisedFree))
	if u.PromisedFree > u.Free {
		fmt.Fprintf(w, ": %.1f× the free space (disks are sparse: each session is bounded by its limit, not their sum)", float64(u.PromisedFree)/float64(max(u.Free, 1)))
	}
	fmt.Fprintln(w)
}
