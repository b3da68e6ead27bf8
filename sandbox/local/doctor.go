package local

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local/cgroups"
)

func unavailable(reason, fix string) error {
	return &sandbox.UnavailableError{Backend: Name, Reason: reason, Fix: fix}
}

// Available implements sandbox.Provider: every requirement, then a real bwrap
// run as an unprivileged user. It may run at any time (GET /readyz runs it
// while boxes start): it checks again, and changes nothing the provider
// runs on (those are resolved once, by ready).
func (p *Provider) Available(ctx context.Context) error {
	r, err := p.resolve()
	if err != nil {
		return err
	}
	if !p.resolved.Load() {
		// resolve's Check made the parent cgroups: Create makes them
		// again when needed. Not once the provider runs: a box being
		// created between its parent and its own cgroup would lose the
		// parent.
		r.cg.RemoveParent()
	}
	return smokeTest(r.bwrap)
}

// requirements are what a provider runs on: bwrap, the agent binary and
// the cgroups.
type requirements struct {
	bwrap, agent string
	cg           *cgroups.Manager
}

// resolve finds and verifies the backend's requirements.
func (p *Provider) resolve() (requirements, error) {
	var none requirements
	if os.Geteuid() != 0 {
		return none, unavailable("it needs root (per-box cgroups, and mounting workspaces into boxes)",
			"run harvest as root, or use --backend docker")
	}
	bw := p.cfg.Bwrap
	if bw == "" {
		bw = "bwrap"
	}
	path, err := exec.LookPath(bw)
	if err != nil {
		return none, unavailable(fmt.Sprintf("bubblewrap (%s) not found", bw), "install it: apt-get install -y bubblewrap")
	}
	help, _ := exec.Command(path, "--help").CombinedOutput()
	if !bytes.Contains(help, []byte("--disable-userns")) {
		return none, unavailable(fmt.Sprintf("%s is too old (no --disable-userns)", path), "install bubblewrap 0.8 or newer")
	}
	if err := userNamespaces(); err != nil {
		return none, err
	}
	if err := mountAPI(); err != nil {
		return none, err
	}
	mgr, err := cgroups.Detect(p.cfg.CgroupParent)
	if err != nil {
		return none, unavailable(err.Error(), "mount the memory and pids cgroup controllers (v1) or use cgroup v2 with them enabled")
	}
	if err := mgr.Check(); err != nil {
		return none, unavailable(err.Error(), "run harvest as root on a machine where it may create cgroups")
	}
	agent, err := sandbox.AgentBinary(p.cfg.AgentBinary)
	if err != nil {
		return none, unavailable(err.Error(), "build it: CGO_ENABLED=0 go install ./cmd/...")
	}
	return requirements{bwrap: path, agent: agent, cg: mgr}, nil
}

func userNamespaces() error {
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil {
		if n, _ := strconv.Atoi(strings.TrimSpace(string(b))); n == 0 {
			return unavailable("user namespaces are disabled (user.max_user_namespaces=0)", "sysctl -w user.max_user_namespaces=15000")
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return unavailable("unprivileged user namespaces are disabled", "sysctl -w kernel.unprivileged_userns_clone=1")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); err == nil && strings.TrimSpace(string(b)) == "1" {
		return unavailable("AppArmor restricts unprivileged user namespaces",
			"sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or add an AppArmor profile allowing userns for bwrap")
	}
	return nil
}

// mountAPI checks for the syscalls claims use to mount workspaces into a
// running box: open_tree and move_mount (Linux 5.2), mount_setattr (5.12).
func mountAPI() error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLOEXEC)
	if err == unix.ENOSYS {
		return unavailable("this kernel has no open_tree (Linux 5.2+)", "upgrade the kernel to Linux 5.12 or newer")
	}
	if err == nil {
		unix.Close(fd)
	}
	if err := unix.MountSetattr(-1, "", 0, &unix.MountAttr{}); err == unix.ENOSYS {
		return unavailable("this kernel has no mount_setattr (Linux 5.12+)", "upgrade the kernel to Linux 5.12 or newer")
	}
	return nil
}

// smokeTest runs the same namespace set a box uses, as the default box user.
func smokeTest(bwrap string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bwrap, "--unshare-all", "--unshare-user", "--disable-userns",
		"--die-with-parent", "--new-session", "--as-pid-1", "--cap-drop", "ALL",
		"--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: sandbox.DefaultUID, Gid: sandbox.DefaultGID, Groups: []uint32{}}}
	if out, err := cmd.CombinedOutput(); err != nil {
		return unavailable(fmt.Sprintf("a test sandbox failed: %v: %s", err, strings.TrimSpace(string(out))),
			"check that unprivileged user namespaces work here (bwrap --unshare-user true as a normal user)")
	}
	return nil
}
