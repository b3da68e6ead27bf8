// Package cgroups creates, limits, kills and removes the per-box cgroups of the
// local backend, on cgroup v1 and v2.
//
// Detection (Detect): if the memory controller is mounted as a v1 hierarchy
// (this machine: v1 for memory, pids, cpu, freezer, with cgroup2 at
// /sys/fs/cgroup/unified and no controllers on it), use v1 hierarchies;
// otherwise use the cgroup2 mount and the controllers it offers.
//
// Layout: every box gets PARENT/BOXID in each hierarchy it needs, where PARENT
// is "harvest" under the hierarchy's root (v2: with memory, pids and cpu enabled
// in the parent's cgroup.subtree_control). Limits:
//
//	memory  v1 memory.limit_in_bytes (+ memsw when swap accounting exists)
//	        v2 memory.max, memory.swap.max=0
//	pids    v1/v2 pids.max
//	cpu     v1 cpu.cfs_quota_us/cpu.cfs_period_us, v2 cpu.max
//
// Killing (Kill) is race-free against forks: v2 writes cgroup.kill; v1
// freezes the box (freezer.state FROZEN), SIGKILLs every task and thaws.
//
// This package only uses the standard library: it is linked into the small
// harvest-agent binary, whose shim joins the cgroups.
package cgroups

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Limits are what a box's cgroup enforces. Zero means unlimited.
type Limits struct {
	MemoryBytes int64
	Pids        int
	CPUs        float64
}

// Cgroup is one box's cgroup(s). It is plain JSON so the local backend can
// persist it in a box's handle.
type Cgroup struct {
	Version int `json:"version"`
	// Dirs maps controller → directory (v1), or "" → the directory (v2).
	Dirs map[string]string `json:"dirs"`
}

// Manager creates box cgroups under one parent.
type Manager struct {
	Version int
	// Roots maps controller → v1 hierarchy root, or "" → the v2 root.
	Roots  map[string]string
	Parent string // relative, "harvest" by default
}

// v1Controllers are the hierarchies a v1 box uses.
var v1Controllers = []string{"memory", "pids", "cpu", "freezer"}

// ErrUnsupported: this machine's cgroups cannot enforce the limits.
var ErrUnsupported = errors.New("cgroups: memory and pids controllers are not available")

// Detect inspects /proc/self/mountinfo and returns a Manager for this machine.
func Detect(parent string) (*Manager, error) {
	if parent == "" {
		parent = "harvest"
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v1 := map[string]string{}
	v2 := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint options [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(fields) < sep+4 || len(fields) < 5 {
			continue
		}
		mnt, fstype, super := fields[4], fields[sep+1], fields[sep+3]
		switch fstype {
		case "cgroup2":
			if v2 == "" {
				v2 = mnt
			}
		case "cgroup":
			for _, opt := range strings.Split(super, ",") {
				for _, c := range v1Controllers {
					if opt == c {
						if _, ok := v1[c]; !ok {
							v1[c] = mnt
						}
					}
				}
			}
		}
	}
	if _, ok := v1["memory"]; ok {
		for _, c := range []string{"pids", "freezer"} {
			if _, ok := v1[c]; !ok {
				return nil, fmt.Errorf("%w: cgroup v1 %s controller is not mounted", ErrUnsupported, c)
			}
		}
		return &Manager{Version: 1, Roots: v1, Parent: parent}, nil
	}
	if v2 == "" {
		return nil, fmt.Errorf("%w: no cgroup mounts found", ErrUnsupported)
	}
	ctrls, err := os.ReadFile(filepath.Join(v2, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	have := strings.Fields(string(ctrls))
	for _, need := range []string{"memory", "pids"} {
		if !contains(have, need) {
			return nil, fmt.Errorf("%w: cgroup v2 at %s offers %q, need memory and pids", ErrUnsupported, v2, have)
		}
	}
	return &Manager{Version: 2, Roots: map[string]string{"": v2}, Parent: parent}, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Check verifies we may create cgroups (root, or a delegated parent).
func (m *Manager) Check() error {
	for c, root := range m.Roots {
		dir := filepath.Join(root, m.Parent)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
			return fmt.Errorf("cgroup %s (%s) is not writable: %w", dir, c, err)
		}
		if m.Version == 2 {
			if err := m.enableV2(); err != nil {
				return err
			}
		}
	}
	return nil
}

// enableV2 turns on the controllers boxes need at every level from the root
// down to the parent (v2 delegates controllers one level at a time).
func (m *Manager) enableV2() error {
	root := m.Roots[""]
	avail, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return err
	}
	var want []string
	for _, c := range []string{"memory", "pids", "cpu"} {
		if contains(strings.Fields(string(avail)), c) {
			want = append(want, "+"+c)
		}
	}
	ctl := strings.Join(want, " ")
	dir := root
	for _, part := range append([]string{""}, strings.Split(m.Parent, "/")...) {
		dir = filepath.Join(dir, part)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		cur, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		missing := false
		for _, w := range want {
			if !contains(strings.Fields(string(cur)), w[1:]) {
				missing = true
			}
		}
		if missing {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(ctl), 0); err != nil {
				return fmt.Errorf("enabling %s in %s: %w", ctl, dir, err)
			}
		}
	}
	return nil
}

// Create makes the box's cgroup(s) and applies the limits. On error nothing is
// left behind.
//
// The parent may vanish between its creation and the box's: another
// process with the same run dir removes it when it is empty (RemoveParent,
// after its last box, or at its start). Create then makes it again.
func (m *Manager) Create(id string, lim Limits) (*Cgroup, error) {
	if id == "" || strings.ContainsAny(id, "/.") {
		return nil, fmt.Errorf("cgroups: bad box id %q", id)
	}
	for attempt := 1; ; attempt++ {
		cg, err := m.create(id, lim)
		if err == nil || !errors.Is(err, os.ErrNotExist) || attempt == 3 {
			return cg, err
		}
	}
}

func (m *Manager) create(id string, lim Limits) (*Cgroup, error) {
	cg := &Cgroup{Version: m.Version, Dirs: map[string]string{}}
	if m.Version == 2 {
		if err := m.enableV2(); err != nil {
			return nil, err
		}
	}
	undo := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = cg.Remove(ctx)
	}
	for c, root := range m.Roots {
		dir := filepath.Join(root, m.Parent, id)
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			undo()
			return nil, err
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			undo()
			return nil, fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		cg.Dirs[c] = dir
	}
	if err := cg.SetLimits(lim); err != nil {
		undo()
		return nil, err
	}
	return cg, nil
}

// Rename renames the cgroup (in every hierarchy) to newID under the same
// parent. Processes stay in it. The local backend's pool renames a waiting
// shim's cgroup to the box it is given.
func (cg *Cgroup) Rename(newID string) error {
	if newID == "" || strings.ContainsAny(newID, "/.") {
		return fmt.Errorf("cgroups: bad box id %q", newID)
	}
	done := map[string]string{}
	for c, dir := range cg.Dirs {
		to := filepath.Join(filepath.Dir(dir), newID)
		if err := os.Rename(dir, to); err != nil {
			for c2, old := range done { // undo
				_ = os.Rename(cg.Dirs[c2], old)
			}
			return fmt.Errorf("renaming cgroup %s: %w", dir, err)
		}
		done[c] = dir
		cg.Dirs[c] = to
	}
	return nil
}

// DirList returns the cgroup's directories, sorted.
func (cg *Cgroup) DirList() []string {
	out := make([]string, 0, len(cg.Dirs))
	for _, d := range cg.Dirs {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

func write(dir, file, val string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(val), 0); err != nil {
		return fmt.Errorf("setting %s=%s: %w", filepath.Join(dir, file), val, err)
	}
	return nil
}

func exists(dir, file string) bool {
	_, err := os.Stat(filepath.Join(dir, file))
	return err == nil
}

// SetLimits applies lim to the cgroup (a zero field leaves that limit alone).
func (cg *Cgroup) SetLimits(lim Limits) error {
	if cg.Version == 1 {
		if d := cg.Dirs["memory"]; d != "" && lim.MemoryBytes > 0 {
			v := strconv.FormatInt(lim.MemoryBytes, 10)
			if err := write(d, "memory.limit_in_bytes", v); err != nil {
				return err
			}
			if exists(d, "memory.memsw.limit_in_bytes") {
				if err := write(d, "memory.memsw.limit_in_bytes", v); err != nil {
					return err
				}
			}
			_ = write(d, "memory.swappiness", "0")
		}
		if d := cg.Dirs["pids"]; d != "" && lim.Pids > 0 {
			if err := write(d, "pids.max", strconv.Itoa(lim.Pids)); err != nil {
				return err
			}
		}
		if lim.CPUs > 0 && cg.Dirs["cpu"] == "" {
			return fmt.Errorf("a CPU limit needs the cpu cgroup controller, which is not mounted")
		}
		if d := cg.Dirs["cpu"]; d != "" && lim.CPUs > 0 {
			if err := write(d, "cpu.cfs_period_us", "100000"); err != nil {
				return err
			}
			if err := write(d, "cpu.cfs_quota_us", strconv.Itoa(int(lim.CPUs*100000))); err != nil {
				return err
			}
		}
		return nil
	}
	d := cg.Dirs[""]
	if lim.MemoryBytes > 0 {
		if err := write(d, "memory.max", strconv.FormatInt(lim.MemoryBytes, 10)); err != nil {
			return err
		}
		if exists(d, "memory.swap.max") {
			_ = write(d, "memory.swap.max", "0")
		}
	}
	if lim.Pids > 0 {
		if err := write(d, "pids.max", strconv.Itoa(lim.Pids)); err != nil {
			return err
		}
	}
	if lim.CPUs > 0 {
		if !exists(d, "cpu.max") {
			return fmt.Errorf("a CPU limit needs the cpu cgroup controller, which is not enabled in %s", filepath.Dir(d))
		}
		if err := write(d, "cpu.max", fmt.Sprintf("%d 100000", int(lim.CPUs*100000))); err != nil {
			return err
		}
	}
	return nil
}

// procsFiles lists every cgroup.procs file of the box.
func (cg *Cgroup) procsFiles() []string {
	var out []string
	for _, d := range cg.Dirs {
		out = append(out, filepath.Join(d, "cgroup.procs"))
	}
	sort.Strings(out)
	return out
}

// Join moves process pid (0: the caller) into every cgroup of the box.
func (cg *Cgroup) Join(pid int) error {
	for _, f := range cg.procsFiles() {
		if err := os.WriteFile(f, []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("joining %s: %w", f, err)
		}
	}
	return nil
}

// Procs lists the pids in the box's cgroups (the union over controllers).
func (cg *Cgroup) Procs() ([]int, error) {
	seen := map[int]bool{}
	var firstErr error
	for _, f := range cg.procsFiles() {
		b, err := os.ReadFile(f)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) && firstErr == nil {
				firstErr = err
			}
			continue
		}
		for _, line := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(line); err == nil {
				seen[n] = true
			}
		}
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Ints(out)
	return out, firstErr
}

// MemoryDir is the directory holding the box's memory controller files.
func (cg *Cgroup) MemoryDir() string {
	if cg.Version == 1 {
		return cg.Dirs["memory"]
	}
	return cg.Dirs[""]
}

// OOMKills returns how many processes the kernel OOM-killed in the box.
func (cg *Cgroup) OOMKills() uint64 {
	file := "memory.events"
	if cg.Version == 1 {
		file = "memory.oom_control"
	}
	b, err := os.ReadFile(filepath.Join(cg.MemoryDir(), file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// Kill SIGKILLs every process in the box, atomically with respect to forks.
func (cg *Cgroup) Kill(ctx context.Context) error {
	if cg.Version == 2 {
		d := cg.Dirs[""]
		if exists(d, "cgroup.kill") {
			if err := write(d, "cgroup.kill", "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			return nil
		}
		return cg.freezeKill(ctx, d, "cgroup.freeze", "1", "0")
	}
	d := cg.Dirs["freezer"]
	if d == "" {
		return cg.killAll()
	}
	return cg.freezeKill(ctx, d, "freezer.state", "FROZEN", "THAWED")
}

func (cg *Cgroup) freezeKill(ctx context.Context, dir, file, frozen, thawed string) error {
	if err := write(dir, file, frozen); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // already removed
		}
		return err
	}
	// Wait until the freeze took (v1 passes through FREEZING).
	for i := 0; i < 1000; i++ {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil || strings.TrimSpace(string(b)) == frozen || (cg.Version == 2 && frozenV2(dir)) {
			break
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	err := cg.killAll()
	if werr := write(dir, file, thawed); werr != nil && err == nil && !errors.Is(werr, os.ErrNotExist) {
		err = werr
	}
	return err
}

func frozenV2(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	return err == nil && strings.Contains(string(b), "frozen 1")
}

// killAll SIGKILLs every process listed in the box's cgroups. A pid read
// from cgroup.procs may be gone and reused by a process elsewhere by the
// time it is signalled (pids wrap fast on a busy host: 32768 by default),
// so each process is pinned with a pidfd first and signalled only if its
// pid is still in the box after that: a pidfd names one process, so a
// pinned process that is in the box now is the box's.
func (cg *Cgroup) killAll() error {
	pids, err := cg.Procs()
	if len(pids) == 0 {
		return err
	}
	fds := make(map[int]int, len(pids))
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, p := range pids {
		fd, e := unix.PidfdOpen(p, 0)
		switch {
		case e == nil:
			fds[p] = fd
		case e == unix.ESRCH:
			// gone already
		case e == unix.ENOSYS:
			// A kernel before 5.3: no way to pin it; signal by pid.
			if e := syscall.Kill(p, syscall.SIGKILL); e != nil && e != syscall.ESRCH && err == nil {
				err = e
			}
		default:
			if err == nil {
				err = fmt.Errorf("pinning process %d of the box: %w", p, e)
			}
		}
	}
	still, e := cg.Procs()
	if e != nil && err == nil {
		err = e
	}
	for _, p := range still {
		fd, ok := fds[p]
		if !ok {
			continue // not pinned (new since the first read): the caller's next round
		}
		if e := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); e != nil && e != unix.ESRCH && err == nil {
			err = e
		}
	}
	return err
}

// Empty reports whether no process is left in the box's cgroups.
func (cg *Cgroup) Empty() bool {
	pids, _ := cg.Procs()
	return len(pids) == 0
}

// Remove kills what is left and removes the box's cgroup directories, waiting
// (until ctx ends) for exiting processes to leave them. Missing directories are
// fine: Remove is idempotent.
func (cg *Cgroup) Remove(ctx context.Context) error {
	if cg == nil {
		return nil
	}
	var lastErr error
	for d := time.Millisecond / 2; ; d = min(d*2, 20*time.Millisecond) {
		lastErr = nil
		busy := false
		for _, dir := range cg.Dirs {
			if err := syscall.Rmdir(dir); err != nil && err != syscall.ENOENT {
				lastErr = fmt.Errorf("removing cgroup %s: %w", dir, err)
				busy = busy || err == syscall.EBUSY
			}
		}
		if lastErr == nil {
			return nil
		}
		if !busy {
			return lastErr // only "still has processes" is worth waiting for
		}
		if !cg.Empty() {
			_ = cg.Kill(ctx)
		}
		select {
		case <-ctx.Done():
			return lastErr
		case <-time.After(d):
		}
	}
}

// RemoveParent removes the parent cgroup, and the empty ones above it, where
// no box is left (best effort: a busy cgroup stays). The local backend calls
// it after a box is destroyed, at Close, and when it starts: a Harvest
// killed with SIGKILL never reaches its Close.
func (m *Manager) RemoveParent() {
	for _, root := range m.Roots {
		dir := filepath.Join(root, m.Parent)
		for dir != root && strings.HasPrefix(dir, root) {
			if err := syscall.Rmdir(dir); err != nil {
				break
			}
			dir = filepath.Dir(dir)
		}
	}
}

// List returns the ids of the boxes that have a cgroup under the parent.
func (m *Manager) List() ([]string, error) {
	seen := map[string]bool{}
	for _, root := range m.Roots {
		entries, err := os.ReadDir(filepath.Join(root, m.Parent))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.IsDir() {
				seen[e.Name()] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	sort.Strings(out)
	return out, nil
}

// Open returns the Cgroup of an existing box id (it may be partly gone).
func (m *Manager) Open(id string) *Cgroup {
	cg := &Cgroup{Version: m.Version, Dirs: map[string]string{}}
	for c, root := range m.Roots {
		cg.Dirs[c] = filepath.Join(root, m.Parent, id)
	}
	return cg
}
