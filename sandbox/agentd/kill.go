package agentd

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"syscall"
)

type procEntry struct {
	pid, ppid, pgrp, sid int
}

// ProcMarkerEnv is set in every command's environment to this agent's id for
// it. Descendants inherit it through setsid and double forks, so a daemonized
// grandchild that left the process tree and group is still found by kill.
const ProcMarkerEnv = "HARVEST_AGENT_PROC"

// instance makes this agent's markers its own: an agent that is not PID 1
// of a namespace (the host backend) sees every process on the machine,
// other agents' commands included (a local box's processes are host
// processes too), and proc ids alone (1, 2, 3, ...) repeat across agents.
var instance = func() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return strconv.Itoa(os.Getpid()) // never: crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}()

func marker(proc uint64) []byte {
	return []byte(ProcMarkerEnv + "=" + instance + "-" + strconv.FormatUint(proc, 10) + "\x00")
}

// hasMarker reports whether pid's environment carries m.
func hasMarker(pid int, m []byte) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	return err == nil && bytes.Contains(append([]byte{0}, b...), append([]byte{0}, m...))
}

// scanProcs reads pid, parent, process group and session of every process
// visible in /proc.
func scanProcs() []procEntry {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make([]procEntry, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid pgrp session ..."; comm may hold spaces and
		// parentheses, so parse from the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 4 {
			continue
		}
		if f[0][0] == 'Z' { // zombies are dead already
			continue
		}
		ppid, _ := strconv.Atoi(string(f[1]))
		pgrp, _ := strconv.Atoi(string(f[2]))
		sid, _ := strconv.Atoi(string(f[3]))
		out = append(out, procEntry{pid: pid, ppid: ppid, pgrp: pgrp, sid: sid})
	}
	return out
}

// treeOf returns root, every descendant of root, every member of group pgid
// (or session pgid, for terminal sessions), and every process carrying the
// marker m (and their descendants).
func treeOf(all []procEntry, root, pgid int, m []byte) []int {
	children := map[int][]int{}
	for _, e := range all {
		children[e.ppid] = append(children[e.ppid], e.pid)
	}
	seen := map[int]bool{}
	var walk func(int)
	walk = func(p int) {
		if seen[p] {
			return
		}
		seen[p] = true
		for _, c := range children[p] {
			walk(c)
		}
	}
	alive := false
	for _, e := range all {
		if e.pid == root {
			alive = true
		}
	}
	if alive {
		walk(root)
	}
	self := os.Getpid()
	for _, e := range all {
		if e.pgrp == pgid || e.sid == pgid || (m != nil && e.pid != self && !seen[e.pid] && hasMarker(e.pid, m)) {
			walk(e.pid)
		}
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		if p != self && p > 1 {
			out = append(out, p)
		}
	}
	return out
}

// killTree SIGKILLs a process, its process group, every descendant and every
// process carrying its marker,
// repeating until none is left (a process may fork while we look). Killing the
// group first is atomic against a fork bomb that stays in its group: a task
// with SIGKILL pending cannot complete a fork.
func killTree(pid, pgid int, proc uint64) {
	m := marker(proc)
	for i := 0; i < 20; i++ {
		if pgid > 1 {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		victims := treeOf(scanProcs(), pid, pgid, m)
		if len(victims) == 0 {
			return
		}
		for _, v := range victims {
			_ = syscall.Kill(v, syscall.SIGKILL)
		}
	}
}

// hasChildren reports whether any process other than the agent is alive in the
// box (used as PID 1).
func hasChildren() bool {
	self := os.Getpid()
	for _, e := range scanProcs() {
		if e.pid != self {
			return true
		}
	}
	return false
}

func splitLines(b []byte) [][]byte { return bytes.Split(b, []byte{'\n'}) }

func hasPrefix(b []byte, p string) bool { return bytes.HasPrefix(b, []byte(p)) }

func parseLeadingInt(b []byte) int64 {
	f := bytes.Fields(b)
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(string(f[0]), 10, 64)
	return n
}

// oomCounter reads how many processes the kernel OOM-killed in the box's
// memory cgroup. Backends expose the box's own cgroup read-only at
// /sys/fs/cgroup (v2: memory.events; v1: memory/memory.oom_control).
type oomCounter struct{ path string }

func newOOMCounter() *oomCounter {
	for _, p := range []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"} {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte("oom_kill ")) {
			return &oomCounter{path: p}
		}
	}
	return &oomCounter{}
}

func (o *oomCounter) count() uint64 {
	if o.path == "" {
		return 0
	}
	b, err := os.ReadFile(o.path)
	if err != nil {
		return 0
	}
	for _, line := range splitLines(b) {
		if hasPrefix(line, "oom_kill ") {
			return uint64(parseLeadingInt(line[len("oom_kill "):]))
		}
	}
	return 0
}
