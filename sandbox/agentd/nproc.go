package agentd

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A fork bomb in a box takes every pid its cgroup allows, and the Go
// runtime aborts the agent when it needs an OS thread and cannot create
// one. Two ways to keep the agent alive:
//
//   - prewarm: create spare threads at start and keep them parked (see
//     prewarm in main.go). Each is a kernel task every idle box holds, and
//     pid_max bounds a node's tasks.
//   - --nproc (the local backend): give each command RLIMIT_NPROC at the
//     box's pids limit (the claim's Pids) plus NProcAgentShare, below the
//     cgroup's limit, which is Pids plus sandbox.AgentPidsReserve. The
//     commands then stop short of the cgroup's limit and the agent creates
//     the threads it needs when it needs them: no spare threads.
//
// RLIMIT_NPROC counts the tasks of a real uid in one user namespace (Linux
// 5.14 and newer: ucounts), here the box's own (bwrap --unshare-user): the
// commands' and the agent's, nobody else's. On an older kernel it counts
// the uid's tasks on the whole host, every box of the same user: --nproc is
// then ignored (prewarm instead), as outside a user namespace of its own.
//
// The limit is set on each command right after it was forked and exec'd
// (prlimit, soft and hard, which the command cannot raise again): it is
// not inherited from the agent, whose own limit must stay high. A command
// that forks within those microseconds has children without the cap; the
// cgroup's limit still holds them, only the agent's reserve is then not
// guaranteed.

// NProcAgentShare is added to a command's RLIMIT_NPROC for the agent's own
// idle threads, which the count includes: the commands get at least the
// pids they were promised.
const NProcAgentShare = 8

// nprocLimit is the RLIMIT_NPROC to give commands; 0: none.
func (s *Server) nprocLimit() int {
	if !s.cfg.NProc {
		return 0
	}
	if n := s.id().pids; n > 0 {
		return n + NProcAgentShare
	}
	return 0
}

func capNProc(pid, n int) {
	lim := unix.Rlimit{Cur: uint64(n), Max: uint64(n)}
	_ = unix.Prlimit(pid, unix.RLIMIT_NPROC, &lim, nil)
}

// nprocPerUserNS says whether RLIMIT_NPROC counts only the tasks of this
// process's user namespace: Linux 5.14 or newer, and a user namespace that
// is not the host's.
func nprocPerUserNS() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	major, minor, ok := kernelVersion(unix.ByteSliceToString(u.Release[:]))
	if !ok || major < 5 || major == 5 && minor < 14 {
		return false
	}
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	// The initial user namespace maps every uid onto itself.
	return strings.Join(strings.Fields(string(b)), " ") != "0 0 4294967295"
}

// kernelVersion parses "6.1.0-18-amd64" as 6, 1.
func kernelVersion(release string) (major, minor int, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minorStr := parts[1]
	if i := strings.IndexFunc(minorStr, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorStr = minorStr[:i]
	}
	minor, err2 := strconv.Atoi(minorStr)
	return major, minor, err1 == nil && err2 == nil
}
