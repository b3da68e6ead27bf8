package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local/shim"
)

// Read-only mounts (sandbox.Spec.Mounts) in a local box.
//
// bwrap makes them: --ro-bind HOST BOX in the box's argument list, after the
// tmpfs mounts. Its binds are recursive, and it remounts every submount
// read-only too, nosuid and nodev: nothing below a mount is writable.
//
// A mount point must exist before bwrap binds onto it, and the box's root is
// a read-only bind of a directory boxes share (root.go). So mount points are
// part of the root: roots are built per box user, HOME and set of mount
// points. A mount point inside one of the box's tmpfs (/tmp, HOME) is made by
// bwrap in that tmpfs instead. A box path in the host's /usr (or /bin, /lib,
// ..., which are /usr or binds of the host's) is refused: that tree is the
// host's own, read-only, and a mount point there would have to exist on the
// host.
//
// The warm pool does not serve specs with mounts: a warm box's bwrap ran
// before its spec was known, on a root without these mount points, and a
// claim cannot add a mount point to a read-only root that other boxes share
// (nor can it create one through a bind from outside: there is no writable
// directory to create it in). Such a spec prepares its box on the spot, the
// same code path as a cold start: 10-20 ms instead of about 1.

// boxMount is one mount, checked for this backend.
type boxMount struct {
	host string // the host path, symlinks resolved
	box  string
	dir  bool
}

// mountPlan resolves and checks spec's mounts for the local backend. Errors
// are a *sandbox.SpecError, like every other bad spec.
func mountPlan(spec sandbox.Spec, home string) ([]boxMount, error) {
	var out []boxMount
	var errs []error
	for _, m := range spec.Mounts {
		host, err := filepath.EvalSymlinks(m.HostPath)
		var fi os.FileInfo
		if err == nil {
			fi, err = os.Stat(host)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("mount at %s: host path %s: %w", m.BoxPath, m.HostPath, err))
			continue
		}
		if !fi.IsDir() && !fi.Mode().IsRegular() {
			errs = append(errs, fmt.Errorf("mount at %s: host path %s is neither a directory nor a regular file", m.BoxPath, m.HostPath))
			continue
		}
		if shared := hostShared(m.BoxPath); shared != "" {
			errs = append(errs, fmt.Errorf("mount at %s: %s in a local box is the host's own, shared read-only: choose a box path outside it, like /opt/NAME", m.BoxPath, shared))
			continue
		}
		out = append(out, boxMount{host: host, box: m.BoxPath, dir: fi.IsDir()})
	}
	if len(errs) > 0 {
		return nil, &sandbox.SpecError{Errs: errs}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].box < out[j].box })
	return out, nil
}

// hostShared returns the host directory a box path lies in ("/usr", "/lib",
// ...), or "".
func hostShared(p string) string {
	for _, d := range append([]string{"usr"}, systemDirs...) {
		if p == "/"+d || strings.HasPrefix(p, "/"+d+"/") {
			return "/" + d
		}
	}
	return ""
}

// inTmpfs reports whether a box path lies in one of the box's tmpfs mounts,
// where bwrap makes the mount point itself.
func inTmpfs(p, home string) bool {
	for _, d := range []string{"/tmp", home} {
		if strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// mountPoint is a mount point the root must have.
type mountPoint struct {
	path string
	dir  bool
}

// rootMountPoints lists the mount points mounts need in the root, sorted.
func rootMountPoints(mounts []boxMount, home string) []mountPoint {
	var out []mountPoint
	for _, m := range mounts {
		if !inTmpfs(m.box, home) {
			out = append(out, mountPoint{m.box, m.dir})
		}
	}
	return out
}

func mountPointsKey(mps []mountPoint) string {
	var b strings.Builder
	for _, mp := range mps {
		fmt.Fprintf(&b, "mount %s dir=%v\n", mp.path, mp.dir)
	}
	return b.String()
}

// makeMountPoint creates mount point mp (and its parents) in a root being
// built. It refuses to go through a symlink: bwrap would follow it outside
// the root.
func makeMountPoint(root string, mp mountPoint) error {
	parts := strings.Split(strings.TrimPrefix(mp.path, "/"), "/")
	cur, shown := root, ""
	for i, part := range parts {
		cur, shown = filepath.Join(cur, part), shown+"/"+part
		last := i == len(parts)-1
		fi, err := os.Lstat(cur)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if last && !mp.dir {
				err = os.WriteFile(cur, nil, 0o644)
			} else {
				err = os.Mkdir(cur, 0o755)
			}
			if err != nil {
				return err
			}
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("mount at %s: %s is a symlink in the box: mount at the path it points to", mp.path, shown)
		case last && fi.IsDir() != mp.dir:
			return fmt.Errorf("mount at %s: the box has a %s there and the host path is a %s", mp.path, kind(fi.IsDir()), kind(mp.dir))
		case !last && !fi.IsDir():
			return fmt.Errorf("mount at %s: %s is a file in the box", mp.path, shown)
		}
	}
	return nil
}

func kind(dir bool) string {
	if dir {
		return "directory"
	}
	return "file"
}

// bwrapMountArgs are the --ro-bind arguments for mounts.
func bwrapMountArgs(mounts []boxMount) []string {
	var a []string
	for _, m := range mounts {
		a = append(a, "--ro-bind", m.host, m.box)
	}
	return a
}

// diskDirMounts are the claim's mounts of a box with a disk
// (sandbox.Spec.DiskDir): its /tmp and HOME, bound from the disk over the
// warm box's tmpfs ones, so what the box writes there counts against the
// disk's limits. A read-only mount inside /tmp or HOME would be hidden by
// them, so that combination is refused.
func diskDirMounts(spec sandbox.Spec, home string, mounts []boxMount) ([]shim.Mount, error) {
	for _, m := range mounts {
		if inTmpfs(m.box, home) {
			return nil, &sandbox.SpecError{Errs: []error{fmt.Errorf("mount at %s: a box with a disk has /tmp and HOME on it, and a mount inside them is not supported: choose a box path like /opt/NAME", m.box)}}
		}
	}
	tmp, homeDir, err := sandbox.PrepareDiskDir(spec)
	if err != nil {
		return nil, err
	}
	hm := shim.Mount{Source: homeDir, Target: home, Over: true}
	if spec.HomeLayer != "" {
		hm.Lower, hm.Work = spec.HomeLayer, sandbox.HomeLayerWork(spec)
	}
	return []shim.Mount{{Source: tmp, Target: "/tmp", Over: true}, hm}, nil
}
