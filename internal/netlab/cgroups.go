package netlab

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// cgroupMounts lists the cgroup hierarchies mounted below /sys/fs/cgroup
// (each v1 controller's, and the v2 one), from this process's mountinfo.
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		if t := fields[sep+1]; (t == "cgroup" || t == "cgroup2") && strings.HasPrefix(fields[4], "/sys/fs/cgroup") {
			out = append(out, fields[4])
		}
	}
	return out, sc.Err()
}

// nodeCgroups makes a cgroup of the node's in every hierarchy and returns
// the bind mounts (source, target pairs) that make it the root of that
// hierarchy in the node's view: cgroups are not namespaced by the mount
// namespace, and a node that saw the host's would see (and try to
// destroy) another node's boxes' cgroups, which on separate machines it
// cannot. A v1 cpuset cgroup gets its parent's cpus and mems (a new one
// has none, and takes no process).
func (l *Lab) nodeCgroups(node string) ([]string, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	var binds []string
	for _, m := range mounts {
		dir := filepath.Join(m, l.prefix+"-"+node)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("netlab: making node %s's cgroup: %w", node, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(m, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), b, 0); err != nil {
					return nil, fmt.Errorf("netlab: node %s's cgroup: %w", node, err)
				}
			}
		}
		binds = append(binds, dir, m)
	}
	return binds, nil
}

// removeCgroups removes the cgroups named with prefix (theirs and
// whatever the nodes made below them), deepest first; their processes
// must be gone.
func removeCgroups(prefix string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		tops, _ := filepath.Glob(filepath.Join(m, prefix+"*"))
		for _, top := range tops {
			var dirs []string
			filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for _, d := range slices.Backward(dirs) {
				if err := rmdirCgroup(d); err != nil {
					errs = append(errs, fmt.Errorf("netlab: removing cgroup %s: %w", d, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// rmdirCgroup removes an empty cgroup, waiting up to 10 s while it is
// busy: the kernel lets go of a cgroup whose last process just exited a
// little later.
func rmdirCgroup(d string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := os.Remove(d)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cgroupPids lists the pids named by the cgroups of labs ("hl<pid>…").
func cgroupPids() []int {
	mounts, _ := cgroupMounts()
	var pids []int
	for _, m := range mounts {
		tops, _ := filepath.Glob(filepath.Join(m, "hl*"))
		for _, top := range tops {
			if pid, ok := pidOf(filepath.Base(top)); ok && !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
