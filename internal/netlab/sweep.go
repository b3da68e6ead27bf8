package netlab

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Where labs keep their files: not below /tmp, which every node has its
// own of (so the nodes' directories stay at the same path in their view
// and the test's).
const (
	labRoot      = "/var/tmp"
	labDirPrefix = "harvest-netlab-"
)

// sweep removes what the labs of test processes that died without
// cleaning up (kill -9, a panic's exit, a power cut) left: their
// namespaces (and the processes in them: the nodes with their boxes,
// nats-server), links, loop devices and directories. A lab is named by
// its process's pid ("hl<pid><letter>-…", "harvest-netlab-<pid>-<n>");
// one whose process is alive is left alone.
func sweep(t testing.TB) {
	t.Helper()
	dead := map[int]bool{}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if pid, ok := pidOf(e.Name()); ok && !alive(pid) {
			dead[pid] = true
		}
	}
	for _, pid := range cgroupPids() {
		if !alive(pid) {
			dead[pid] = true
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(labRoot, labDirPrefix+"*"))
	for _, d := range dirs {
		rest := strings.TrimPrefix(filepath.Base(d), labDirPrefix)
		p, _, _ := strings.Cut(rest, "-")
		if pid, err := strconv.Atoi(p); err == nil && !alive(pid) {
			dead[pid] = true
		}
	}
	for pid := range dead {
		var errs []error
		for i := range 26 {
			errs = append(errs, removeLab("hl"+strconv.Itoa(pid)+string(rune('a'+i)), ""))
		}
		lab, _ := filepath.Glob(filepath.Join(labRoot, labDirPrefix+strconv.Itoa(pid)+"-*"))
		for _, d := range lab {
			errs = append(errs, removeLab("hl"+strconv.Itoa(pid)+"-none", d))
		}
		if err := errors.Join(errs...); err != nil {
			t.Errorf("netlab: sweeping the leftovers of test process %d: %v", pid, err)
		} else {
			t.Logf("netlab: swept the leftovers of test process %d, which died without cleaning up", pid)
		}
	}
}

// pidOf parses the pid out of a name "hl<pid><letter>…".
func pidOf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "hl")
	if !ok {
		return 0, false
	}
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i == 0 || i == len(rest) || rest[i] < 'a' || rest[i] > 'z' {
		return 0, false
	}
	pid, err := strconv.Atoi(rest[:i])
	return pid, err == nil
}

// alive says whether process pid exists.
func alive(pid int) bool {
	if pid == os.Getpid() {
		return true
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// killNetns kills (SIGKILL) every process in the network namespace the
// file nsPath names and waits up to 10 s for them to be gone. A node's
// namespaces hold its PID namespace's first process, whose death takes
// every process of the node along (its boxes in their own namespaces too).
func killNetns(nsPath string) {
	var want syscall.Stat_t
	if err := syscall.Stat(nsPath, &want); err != nil {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := inNamespace(want)
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inNamespace lists the processes whose network namespace is the one
// want is the stat of.
func inNamespace(want syscall.Stat_t) []int {
	procs, _ := os.ReadDir("/proc")
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+p.Name()+"/ns/net", &st) == nil && st.Ino == want.Ino && st.Dev == want.Dev {
			pids = append(pids, pid)
		}
	}
	return pids
}
