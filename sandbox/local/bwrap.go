package local

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/harvest-dev/harvest/sandbox"
)

// Paths inside a box.
const (
	boxAgentPath = "/.harvest/bin/harvest-agent"
	boxCgroupV1  = "/sys/fs/cgroup/memory"
	boxCgroupV2  = "/sys/fs/cgroup"
)

// systemDirs are top-level host directories shared read-only with boxes, as
// the symlinks they are on merged-/usr systems or as binds otherwise.
var systemDirs = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// etcEntries are the host /etc entries a box gets, copied (see etc.go).
// Everything else in /etc stays out: no users, no shadow, no gitconfig, no
// credentials of host services. passwd, group and hosts are generated.
var etcEntries = []string{
	"alternatives", "bash.bashrc", "ca-certificates", "ca-certificates.conf",
	"debian_version", "inputrc", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
	"locale.alias", "localtime", "magic", "magic.mime", "mime.types",
	"nsswitch.conf", "os-release", "profile", "profile.d", "protocols",
	"services", "ssl", "terminfo", "timezone", "vim", "xdg",
}

// goMaxProcs is the environment of the shim (and, through bwrap's
// --setenv, of the agent): one P from the runtime's start, not only from
// the runtime.GOMAXPROCS(1) in their Main. While the runtime initializes
// (package init, the GC's background goroutines) it runs with one P per
// CPU: each goroutine started then wakes an OS thread for an idle P, and
// the main goroutine, locked to the main thread during init, hands its P
// to yet another when it waits. Those threads are never given back: two
// or three kernel tasks more in every idle box, for good (pid_max bounds
// a node's tasks).
const goMaxProcs = "GOMAXPROCS=1"

// warmArgs returns bwrap's arguments for a warm box (fd 3: the agent's
// listener, 4: bwrap's info pipe, 5: the agent's ready pipe): everything but the
// box's identity (hostname, environment, workdir, deadline) and workspaces,
// which a claim adds (see package shim). name is its hostname until then.
// mounts are the spec's read-only mounts (none for the pool's boxes: see
// mounts.go).
func warmArgs(name, root string, u sandbox.User, home string, cgroupDir string, cgroupV2 bool, mounts []boxMount) []string {
	a := []string{
		"--unshare-all", "--unshare-user", "--disable-userns",
		"--die-with-parent", "--new-session", "--as-pid-1",
		"--cap-drop", "ALL",
		"--uid", strconv.Itoa(u.UID), "--gid", strconv.Itoa(u.GID),
		"--hostname", name,
		"--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
		// One P from the runtime's first instruction (see goMaxProcs). The
		// agent's own environment reaches no command: a claim sets theirs.
		"--setenv", "GOMAXPROCS", "1",
		"--ro-bind", root, "/",
		"--ro-bind", "/usr", "/usr",
	}
	for _, d := range systemDirs {
		if fi, err := os.Lstat("/" + d); err == nil && fi.IsDir() {
			a = append(a, "--ro-bind", "/"+d, "/"+d) // no merged /usr here
		}
	}
	a = append(a,
		"--proc", "/proc",
		"--dev", "/dev",
		"--tmpfs", "/dev/shm",
		"--perms", "1777", "--tmpfs", "/tmp",
		"--perms", "0700", "--tmpfs", home,
		"--tmpfs", sandbox.WorkspaceRoot, // the claim mounts workspaces here, then makes it read-only
	)
	if cgroupDir != "" {
		dst := boxCgroupV1
		if cgroupV2 {
			dst = boxCgroupV2
		}
		a = append(a, "--ro-bind", cgroupDir, dst)
	}
	a = append(a, bwrapMountArgs(mounts)...) // after the tmpfs mounts they may lie in
	return append(a,
		"--chdir", "/",
		"--info-fd", "4",
		boxAgentPath, "sandbox-agent", "--listen-fd", "3", "--ready-fd", "5", "--warm", "--no-signals", "--nproc", "--id", name,
	)
}

func homeOf(s sandbox.Spec) string {
	if h := s.Env["HOME"]; strings.HasPrefix(h, "/") && h != "/" && !strings.Contains(h, "..") {
		return filepath.Clean(h)
	}
	return "/home/user"
}
