package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

func checkDiskDir(dir string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return fmt.Errorf("disk dir %q: use a clean absolute path", dir)
	}
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("disk dir %s does not exist: create the box's disk first (package sandbox/disk)", dir)
	case err != nil:
		return fmt.Errorf("disk dir %s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("disk dir %s is not a directory", dir)
	}
	return nil
}

// PrepareDiskDir makes the host directories a box with a DiskDir binds at
// /tmp and HOME, and returns them: DiskDir/tmp (mode 1777, emptied: a new
// box starts with an empty /tmp, as after a reboot) and DiskDir/home (mode
// 0700, owned by the box user, created once and kept). Backends call it
// from Start. DiskDir itself is Harvest's: the box never sees it, only
// these two directories, so it cannot plant a symlink where this function
// works (and RemoveAll does not follow the ones it finds inside tmp).
func PrepareDiskDir(s Spec) (tmp, home string, err error) {
	if err := checkDiskDir(s.DiskDir); err != nil {
		return "", "", err
	}
	tmp, home = filepath.Join(s.DiskDir, "tmp"), filepath.Join(s.DiskDir, "home")
	if err := os.RemoveAll(tmp); err != nil {
		return "", "", fmt.Errorf("emptying the box's /tmp (%s): %w", tmp, err)
	}
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return "", "", fmt.Errorf("creating the box's /tmp: %w", diskErr(s.DiskDir, err))
	}
	if err := os.Chmod(tmp, 0o777|os.ModeSticky); err != nil {
		return "", "", err
	}
	fi, err := os.Lstat(home)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(home, 0o700); err != nil {
			return "", "", fmt.Errorf("creating the box's HOME: %w", diskErr(s.DiskDir, err))
		}
		if err := os.Chown(home, s.User.UID, s.User.GID); err != nil {
			return "", "", err
		}
	case err != nil:
		return "", "", err
	case !fi.IsDir():
		return "", "", fmt.Errorf("the box's HOME %s is not a directory", home)
	}
	for _, w := range s.Workspaces {
		if w.Layer == "" {
			continue
		}
		// The workspace overlay's work directory, as HOME's below.
		work := WorkspaceLayerWork(s, w)
		if err := os.RemoveAll(work); err != nil {
			return "", "", err
		}
		if err := os.MkdirAll(work, 0o700); err != nil {
			return "", "", fmt.Errorf("creating the work dir of workspace %s's layer: %w", w.Name, diskErr(s.DiskDir, err))
		}
	}
	if s.HomeLayer != "" {
		// The overlay's work directory: on the same filesystem as its
		// upper (HOME), empty, the kernel's.
		work := HomeLayerWork(s)
		if err := os.RemoveAll(work); err != nil {
			return "", "", err
		}
		if err := os.Mkdir(work, 0o700); err != nil {
			return "", "", fmt.Errorf("creating the box's HOME layer work dir: %w", diskErr(s.DiskDir, err))
		}
	}
	return tmp, home, nil
}

// FillHome copies Spec.HomeLayer into the box's HOME on its disk, once:
// the way a backend without overlays gives a box its prepared HOME. A
// marker (DiskDir/.home-layer) records which layer was copied; a HOME that
// has one already is left as it is (the box's own changes since are kept).
func FillHome(s Spec) error {
	marker := filepath.Join(s.DiskDir, ".home-layer")
	if b, err := os.ReadFile(marker); err == nil && string(b) != "" {
		return nil
	}
	home := filepath.Join(s.DiskDir, "home")
	cmd := exec.Command("cp", "-a", "--reflink=auto", "--", s.HomeLayer+"/.", home+"/")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("filling the box's HOME from %s: %v: %s", s.HomeLayer, diskErr(s.DiskDir, err), out)
	}
	return os.WriteFile(marker, []byte(s.HomeLayer), 0o600)
}

// HomeLayerWork is the work directory of a box's HOME overlay
// (Spec.HomeLayer): DiskDir/.home-work.
func HomeLayerWork(s Spec) string { return filepath.Join(s.DiskDir, ".home-work") }

// diskErr explains ENOSPC on a box's disk.
func diskErr(dir string, err error) error {
	if errors.Is(err, fs.ErrExist) {
		return err
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: the box's disk (%s) is full: free space in it, or raise its limit", err, dir)
	}
	return err
}
