package sandboxtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
)

// canaryEnv is set in Harvest's own environment during the battery; it must
// never appear inside a box.
const canaryEnv = "HARVEST_TEST_CANARY_TOKEN"

func randHex() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// RunIsolation runs the isolation battery against an isolating backend.
func RunIsolation(t *testing.T, b Backend) {
	if !b.Isolated {
		t.Fatalf("%s is not an isolating backend", b.Name)
	}
	secret := "sk-canary-" + randHex()
	t.Setenv(canaryEnv, secret)
	s := newSuite(t, b)
	spec, ws := withWorkspace(t)
	sb := s.start(t, spec)
	pr := installProbe(t, sb)

	t.Run("HostFiles", func(t *testing.T) { testHostFiles(t, sb, pr, ws) })
	t.Run("HostProcesses", func(t *testing.T) { testHostProcesses(t, sb, pr) })
	t.Run("Network", func(t *testing.T) { testNetwork(t, sb, pr) })
	t.Run("Credentials", func(t *testing.T) { testCredentials(t, sb, pr, secret) })
	t.Run("Hardening", func(t *testing.T) { testHardening(t, sb, pr) })
	t.Run("Fence", func(t *testing.T) { testFenceFromBox(t, sb, pr) })
	t.Run("OutputFlood", func(t *testing.T) { testFlood(t, sb) })
	t.Run("ForkBomb", func(t *testing.T) { s.testForkBomb(t) })
	t.Run("MemoryBomb", func(t *testing.T) { s.testMemoryBomb(t) })
	t.Run("DiskFull", func(t *testing.T) { s.testDiskFull(t) })
	t.Run("HomeLayer", func(t *testing.T) { s.testHomeLayer(t) })
	t.Run("WorkspaceLayer", func(t *testing.T) { s.testWorkspaceLayer(t) })
	t.Run("DestroyLeavesNothing", func(t *testing.T) { s.testDestroyClean(t) })
}

func testHostFiles(t *testing.T, sb *sandbox.Sandbox, pr, hostWS string) {
	ctx := ctxFor(t)
	// A host file outside every workspace, readable by anyone on the host.
	dir := testbin.TempDir(t)
	canary := filepath.Join(dir, "canary-"+randHex())
	if err := os.WriteFile(canary, []byte("host secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w := sb.WorkspacePath("w")
	targets := []string{canary, "/etc/shadow", "/root/.ssh/id_rsa", "/root/.bash_history", "/var/run/docker.sock"}
	for _, target := range targets {
		denied(t, "read "+target, probe(t, sb, pr, "read", target))
		denied(t, "read /proc/self/root"+target, probe(t, sb, pr, "read", "/proc/self/root"+target))
		denied(t, "read /proc/1/root"+target, probe(t, sb, pr, "read", "/proc/1/root"+target))
		link := w + "/link-" + filepath.Base(target)
		mustOK(t, sb, "ln", "-sf", target, link)
		denied(t, "read through a symlink to "+target, probe(t, sb, pr, "read", link))
		if _, err := sb.ReadFile(ctx, link); err == nil {
			t.Errorf("the file API followed a symlink to host %s", target)
		}
		if _, err := sb.ReadFile(ctx, w+"/../.."+target); err == nil {
			t.Errorf("the file API reached host %s through ..", target)
		}
	}
	// The symlinks exist on the host now; the host side never follows them.
	if fi, err := os.Lstat(filepath.Join(hostWS, "link-"+filepath.Base(canary))); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("expected the box's symlink in the host workspace: %v", err)
	}

	// Hard links from the workspace to files outside it cross mounts: refused.
	var st syscall.Stat_t
	syscall.Stat("/etc/passwd", &st)
	nlink := st.Nlink
	for _, src := range []string{"/etc/passwd", "/usr/bin/env", pr} {
		denied(t, "hard link "+src+" into the workspace", probe(t, sb, pr, "link", src, w+"/hard-"+filepath.Base(src)))
	}
	syscall.Stat("/etc/passwd", &st)
	if st.Nlink != nlink {
		t.Errorf("host /etc/passwd gained a hard link")
	}

	// Writes outside the workspaces fail, through commands and the file API.
	for _, target := range []string{"/usr/harvest-escape", "/etc/harvest-escape", "/harvest-escape", "/proc/sys/kernel/hostname", "/sys/fs/cgroup/memory/cgroup.procs"} {
		denied(t, "write "+target, probe(t, sb, pr, "write", target))
	}
	if err := sb.WriteFile(ctx, "/etc/passwd", []byte("pwned"), 0o644); err == nil {
		t.Error("the file API wrote /etc/passwd")
	}
	for _, p := range []string{"/usr/harvest-escape", "/etc/harvest-escape", "/harvest-escape"} {
		if _, err := os.Stat(p); err == nil {
			os.Remove(p)
			t.Errorf("the box created host file %s", p)
		}
	}

	// No descriptor in the box points at a host path (the /proc/N/fd way out).
	out := mustOK(t, sb, pr, "fds")
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != "fd" {
			continue
		}
		target := f[3]
		// /sys/fs/cgroup: the box's own read-only cgroup, which the Go runtime
		// (1.25+) keeps open to follow the CPU quota.
		if strings.HasPrefix(target, "/") && !strings.HasPrefix(target, "/dev/") && !strings.HasPrefix(target, "/proc/") &&
			!strings.HasPrefix(target, "/sys/fs/cgroup/") && target != pr {
			t.Errorf("%s/%s points at %s", f[1], f[2], target)
		}
	}
}

func testHostProcesses(t *testing.T, sb *sandbox.Sandbox, pr string) {
	v := probe(t, sb, pr, "pids")
	pids := strings.Fields(strings.TrimPrefix(v, "ok"))
	if len(pids) > 20 {
		t.Errorf("the box sees %d processes: %v", len(pids), pids)
	}
	if ps := mustOK(t, sb, "ps", "-eo", "comm"); strings.Contains(ps, "dockerd") || strings.Contains(ps, "containerd") || strings.Contains(ps, "systemd") {
		t.Errorf("host processes visible in the box:\n%s", ps)
	}
	self := os.Getpid()
	if self > 1000 { // small pids may exist inside the box too
		denied(t, "signal the host test process", probe(t, sb, pr, "kill", strconv.Itoa(self), "0"))
	}
	// kill -9 -1 inside the box only hits the box; its agent survives.
	sh(t, sb, "kill -9 -1; true")
	if got := mustOK(t, sb, "echo", "alive"); got != "alive" {
		t.Fatal("the box's agent died from kill -9 -1")
	}
	if err := syscall.Kill(self, 0); err != nil {
		t.Fatal(err)
	}
}

func hostIPs(t testing.TB) (v4, v6 []string) {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		if ipn.IP.To4() != nil {
			v4 = append(v4, ipn.IP.String())
		} else {
			v6 = append(v6, ipn.IP.String())
		}
	}
	return
}

func testNetwork(t *testing.T, sb *sandbox.Sandbox, pr string) {
	// Everything below holds while the box has a listener forwarded to the
	// host: it carries only what the host accepts, over the agent's
	// connection.
	bl, err := sb.Listen(ctxFor(t), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer bl.Close()
	if got := probe(t, sb, pr, "ifaces"); got != "ok lo" {
		t.Errorf("interfaces in the box: %q (want only lo)", got)
	}
	tl, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	port := strconv.Itoa(tl.Addr().(*net.TCPAddr).Port)
	ul, err := net.ListenPacket("udp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	uport := strconv.Itoa(ul.LocalAddr().(*net.UDPAddr).Port)
	v4, v6 := hostIPs(t)
	targets := []string{"127.0.0.1", "[::1]", "8.8.8.8", "[2001:4860:4860::8888]", "172.17.0.1"}
	targets = append(targets, v4...)
	for _, ip := range v6 {
		targets = append(targets, "["+ip+"]")
	}
	for _, ip := range targets {
		denied(t, "TCP to "+ip, probe(t, sb, pr, "tcp", ip+":"+port))
		probe(t, sb, pr, "udp", ip+":"+uport) // may "send" into the box's own lo
	}
	denied(t, "TCP to the internet", probe(t, sb, pr, "tcp", "1.1.1.1:443"))
	denied(t, "DNS", probe(t, sb, pr, "dns", "example.com"))
	denied(t, "DNS to a public resolver", probe(t, sb, pr, "udp", "8.8.8.8:53"))

	// Nothing arrived on the host: a marker sent now must be first in line.
	marker, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer marker.Close()
	c, err := tl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if c.RemoteAddr().String() != marker.LocalAddr().String() {
		t.Errorf("the host accepted a TCP connection from the box: %s", c.RemoteAddr())
	}
	c.Close()
	um, err := net.Dial("udp", "127.0.0.1:"+uport)
	if err != nil {
		t.Fatal(err)
	}
	defer um.Close()
	um.Write([]byte("marker"))
	buf := make([]byte, 64)
	ul.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, _, err := ul.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "marker" {
		t.Errorf("the host received a UDP datagram from the box: %q %v", buf[:n], err)
	}

	// Unix sockets of host daemons: abstract ones (scoped to the network
	// namespace) and paths (not mounted).
	abs := "@harvest-test-" + randHex()
	al, err := net.Listen("unix", "\x00"+abs[1:])
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	denied(t, "connect to a host abstract socket", probe(t, sb, pr, "unix", abs))
	pl, err := net.Listen("unix", filepath.Join(testbin.TempDir(t), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	denied(t, "connect to a host socket path", probe(t, sb, pr, "unix", pl.Addr().String()))
	for _, p := range []string{"/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock", "/run/systemd/private"} {
		denied(t, "connect to "+p, probe(t, sb, pr, "unix", p))
	}
}

func testCredentials(t *testing.T, sb *sandbox.Sandbox, pr, secret string) {
	env := mustOK(t, sb, "env")
	if strings.Contains(env, secret) || strings.Contains(env, canaryEnv) {
		t.Errorf("a host token leaked into the box environment")
	}
	if b, err := sb.ReadFile(ctxFor(t), "/proc/1/environ"); err == nil && bytes.Contains(b, []byte(secret)) {
		t.Errorf("a host token is in the agent's environment")
	}
	home := mustOK(t, sb, "sh", "-c", "echo $HOME")
	// find, not ls: bookworm's ls fails on gVisor 20221219 (see
	// docker.RuntimeCaveats), and this checks HOME, not ls.
	if ls := mustOK(t, sb, "find", home, "-mindepth", "1", "-maxdepth", "1"); ls != "" {
		t.Errorf("the box's HOME is not empty: %s", ls)
	}
	for _, p := range []string{"/root", "/root/.ssh", "/root/.gitconfig", "/root/.docker/config.json", "/etc/gitconfig", "/etc/shadow"} {
		denied(t, "read "+p, probe(t, sb, pr, "read", p))
	}
	if r := sh(t, sb, "git config --list --show-origin 2>/dev/null"); strings.TrimSpace(r.stdout) != "" {
		t.Errorf("git sees configuration in the box:\n%s", r.stdout)
	}
}

func testHardening(t *testing.T, sb *sandbox.Sandbox, pr string) {
	st := probe(t, sb, pr, "status")
	for _, want := range []string{"NoNewPrivs: 1", "Seccomp: 2", "CapEff: 0000000000000000", "CapBnd: 0000000000000000"} {
		if !strings.Contains(st, want) {
			t.Errorf("box process status lacks %q: %s", want, st)
		}
	}
	if strings.Contains(st, "Uid: 0 ") {
		t.Errorf("box process runs as root: %s", st)
	}
	denied(t, "create a nested user namespace", probe(t, sb, pr, "userns"))
	if r := sh(t, sb, "unshare -U true 2>&1"); r.st.Success() {
		t.Errorf("unshare -U succeeded: %s", r.stdout)
	}
	denied(t, "open /dev/tty without a terminal", probe(t, sb, pr, "devtty"))
	// TIOCSTI on a terminal the box owns: refused by the seccomp filter.
	var out testbin.Buffer
	r, err := sb.Run(ctxFor(t), &sandbox.Cmd{Args: []string{pr, "tiocsti"}, Stdout: &out, TTY: &sandbox.TTYSize{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "err EPERM") {
		t.Errorf("TIOCSTI on the box's own terminal: %v %q", r, out.String())
	}
	denied(t, "TIOCSTI on a pipe", probe(t, sb, pr, "tiocsti"))
}

func testFlood(t *testing.T, sb *sandbox.Sandbox) {
	var out testbin.Buffer
	r := runCmd(t, sb, &sandbox.Cmd{Args: []string{"yes", "flood"}, Stdout: &out, OutputLimit: 1 << 20, Timeout: 2 * time.Second})
	if !r.st.TimedOut || out.Len() != 1<<20 || r.st.Dropped == 0 {
		t.Errorf("flood: %v, delivered %d bytes", r.st, out.Len())
	}
	info, err := sb.Footprint(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.RSSBytes > 40<<20 {
		t.Errorf("agent RSS after a flood: %d MiB", info.RSSBytes>>20)
	}
}

func (s *suite) testForkBomb(t *testing.T) {
	s.skipIfCannot(t, CheckForkBomb)
	spec, _ := withWorkspace(t)
	spec.Limits.Pids = 64
	sb := s.start(t, spec)
	pr := installProbe(t, sb)
	var out testbin.Buffer
	p, err := sb.Start(ctxFor(t), &sandbox.Cmd{Args: []string{pr, "forkbomb"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, 30*time.Second, "the fork bomb to hit the pids limit", func() bool { return strings.Contains(out.String(), "started") })
	var n int
	fmt.Sscanf(strings.TrimPrefix(out.String(), "ok started "), "%d", &n)
	if n == 0 || n > spec.Limits.Pids+sandbox.AgentPidsReserve {
		t.Errorf("the bomb started %d processes with a limit of %d: %s", n, spec.Limits.Pids, out.String())
	}
	// The agent still answers while every pid is taken.
	if _, err := sb.Info(ctxFor(t)); err != nil {
		t.Fatalf("the agent stopped answering under a fork bomb: %v", err)
	}
	if err := p.Kill(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, 10*time.Second, "the bomb's processes to die", func() bool {
		r := run(t, sb, "sh", "-c", "ls /proc | grep -c '^[0-9]'")
		count, _ := strconv.Atoi(r.out())
		return r.st.Success() && count < 10
	})
	// And the classic shell bomb. It detaches at once (each generation
	// orphans the next), so it is killed through the marker its processes
	// inherit.
	limit := spec.Limits.Pids + sandbox.AgentPidsReserve
	bp, err := sb.Start(ctxFor(t), &sandbox.Cmd{Args: []string{"bash", "-c", ":(){ :|:& };:"}})
	if err != nil {
		t.Fatal(err)
	}
	bp.Wait(ctxFor(t))
	var peak int
	testbin.WaitFor(t, 30*time.Second, "the shell bomb to fill the pids limit", func() bool {
		info, err := sb.Info(ctxFor(t))
		if err != nil {
			t.Fatalf("the agent stopped answering under a shell fork bomb: %v", err)
		}
		peak = max(peak, info.BoxProcs)
		return info.BoxProcs >= spec.Limits.Pids/2
	})
	if peak > limit {
		t.Errorf("%d processes in a box limited to %d", peak, limit)
	}
	if err := bp.Kill(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, 10*time.Second, "the shell bomb to die", func() bool {
		info, err := sb.Info(ctxFor(t))
		return err == nil && info.BoxProcs <= 2
	})
	if got := mustOK(t, sb, "echo", "recovered"); got != "recovered" {
		t.Fatal(got)
	}
}

func (s *suite) testMemoryBomb(t *testing.T) {
	s.skipIfCannot(t, CheckMemoryBomb)
	spec, _ := withWorkspace(t)
	spec.Limits.MemoryBytes = 128 << 20
	sb := s.start(t, spec)
	pr := installProbe(t, sb)
	r := run(t, sb, pr, "membomb", "1024")
	if r.st.Signal != syscall.SIGKILL || !r.st.OOMKilled {
		t.Errorf("memory bomb: %v (stdout %q)", r.st, r.stdout)
	}
	if !strings.Contains(r.st.String(), "out of memory") {
		t.Errorf("the exit status does not say out of memory: %s", r.st)
	}
	// The box survives and a normal command works.
	if got := mustOK(t, sb, "echo", "still here"); got != "still here" {
		t.Fatal(got)
	}
	if r := run(t, sb, pr, "membomb", "16"); !r.st.Success() {
		t.Errorf("a small allocation after the OOM: %v", r.st)
	}
}

// boxHostPIDs finds the host pids of every process in the box: those in the
// box's pid namespace, which the box names itself (the namespace's inode reads
// the same inside and outside).
func boxHostPIDs(pidNS string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ns, _ := os.Readlink("/proc/" + e.Name() + "/ns/pid"); ns == pidNS {
			if st, _ := os.ReadFile("/proc/" + e.Name() + "/stat"); bytes.Contains(st, []byte(") Z ")) {
				continue // dead, waiting for its parent to reap it
			}
			out = append(out, pid)
		}
	}
	return out
}

func mountsMentioning(id string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, id) {
			out = append(out, l)
		}
	}
	return out
}

func (s *suite) testDestroyClean(t *testing.T) {
	spec, _ := withWorkspace(t)
	sb := s.startUnmanaged(t, spec)
	id := sb.ID()
	sh(t, sb, "sleep 1001 >/dev/null 2>&1 & setsid sleep 1002 >/dev/null 2>&1 & (sleep 1003 &) ; true")
	if _, cannot := s.b.Cannot[CheckHostPIDs]; cannot {
		// The rest of the check (Leftovers) still runs.
		t.Logf("%s: not looking for the box's processes on the host: %s", s.b.Name, s.b.Cannot[CheckHostPIDs])
		h := sb.Handle()
		if err := sb.Destroy(ctxFor(t)); err != nil {
			t.Fatal(err)
		}
		s.checkLeftovers(t, id, h)
		return
	}
	pidNS := mustOK(t, sb, "readlink", "/proc/self/ns/pid") // the agent's (/proc/1) is not the box's to read
	if !strings.HasPrefix(pidNS, "pid:[") {
		t.Fatalf("the box's pid namespace: %q", pidNS)
	}
	pids := boxHostPIDs(pidNS)
	if len(pids) < 4 {
		t.Fatalf("expected the agent and three sleeps on the host, found pids %v", pids)
	}
	h := sb.Handle()
	if err := sb.Destroy(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && !bytes.Contains(b, []byte(") Z")) {
			t.Errorf("process %d survived Destroy: %s", pid, b)
		}
	}
	if left := boxHostPIDs(pidNS); len(left) > 0 {
		t.Errorf("processes of box %s survived Destroy: %v", id, left)
	}
	s.checkLeftovers(t, id, h)
}

// checkLeftovers: no mount mentions the destroyed box, nor does the
// backend find anything of it.
func (s *suite) checkLeftovers(t *testing.T, id string, h sandbox.Handle) {
	if m := mountsMentioning(id); len(m) > 0 {
		t.Errorf("mounts of box %s survived Destroy: %v", id, m)
	}
	if s.b.Leftovers != nil {
		if left := s.b.Leftovers(t, s.p, h); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	}
}
