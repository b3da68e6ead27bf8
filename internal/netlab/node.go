package netlab

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
)

// holderScript runs as the first process of a node's PID namespace, in
// its new mount namespace (private: nothing propagates to the host). It
// gives the node its own view: the lab's nodes directory ($1) becomes an
// empty tmpfs holding only this node's directory ($1/$2), whose tmp and
// run become the node's /tmp and /run/harvest, and the node's cgroups
// (the pairs after: source, target) the roots of the cgroup hierarchies.
// Then it holds the namespaces open (sleep as PID 1) until the lab kills
// it.
const holderScript = `set -e
mount --bind "$1/$2" /tmp
mount -t tmpfs -o mode=0711,size=64k netlab "$1"
mkdir -m 0711 "$1/$2"
mount --move /tmp "$1/$2"
mount --bind "$1/$2/tmp" /tmp
mkdir -p /run/harvest
mount --bind "$1/$2/run" /run/harvest
shift 2
while [ $# -ge 2 ]; do mount --bind "$1" "$2"; shift 2; done
echo ready
exec sleep infinity
`

// Node is one machine of the lab: a network namespace linked to the
// bridge (its own address, Addr), a mount namespace (its own data
// directory, /tmp and /run/harvest; the other nodes' are hidden) and a PID
// namespace, held by a first process that lives until the lab ends. In it
// runs `harvest serve` (Start), which the faults act on.
type Node struct {
	Name string
	// Addr is the node's address on the bridge; URL its API's.
	Addr, URL string
	// Dir is the node's own directory (the same path in its view and the
	// test's); DataDir its data directory (--data) below it.
	Dir, DataDir string

	lab    *Lab
	ns     string // its network namespace
	link   string // the lab's end of its link
	holder *exec.Cmd
	hpid   int // the host pid of its PID namespace's first process
	held   chan struct{}

	mu      sync.Mutex
	entered []int     // the host pids of every nsenter that started a harvest serve
	proc    *exec.Cmd // nsenter … harvest serve
	pid     int       // harvest serve's host pid
	exited  chan struct{}
	reads   []chan struct{} // closed when each harvest's stdout is read to its end
	env     []string        // the last Start's
	args    []string
	// Stderr is what the running (or last) harvest serve wrote.
	Stderr *testbin.Buffer
}

// AddNode makes a node's namespaces, link and directories; Start runs
// harvest serve in it.
func (l *Lab) AddNode(name string) *Node {
	l.t.Helper()
	l.mu.Lock()
	i := len(l.nodes)
	l.mu.Unlock()
	n := &Node{
		Name: name, lab: l, Addr: l.addr(10 + i),
		Dir:  filepath.Join(l.dir, "nodes", name),
		ns:   fmt.Sprintf("%s-n%d", l.prefix, i),
		link: fmt.Sprintf("%sn%d", l.prefix, i),
	}
	n.URL = "http://" + net.JoinHostPort(n.Addr, strconv.Itoa(NodePort))
	n.DataDir = filepath.Join(n.Dir, "data")
	for _, d := range []string{n.Dir, n.DataDir, filepath.Join(n.Dir, "tmp"), filepath.Join(n.Dir, "run"), filepath.Join(n.Dir, "home")} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			l.t.Fatal(err)
		}
		os.Chmod(d, 0o711) // the box user reaches its workspace below
	}
	os.Chmod(filepath.Join(n.Dir, "tmp"), 0o1777)
	l.mu.Lock()
	l.nodes = append(l.nodes, n)
	l.mu.Unlock()
	// Before the lab's services stop (cleanups run last first).
	l.t.Cleanup(n.destroy)
	l.must("ip", "netns", "add", n.ns)
	l.must("ip", "link", "add", n.link, "type", "veth", "peer", "name", "eth0", "netns", n.ns)
	l.must("ip", "link", "set", n.link, "netns", l.ns)
	l.mustIn(l.ns, "ip", "link", "set", n.link, "master", "br0", "up")
	l.mustIn(n.ns, "ip", "link", "set", "lo", "up")
	l.mustIn(n.ns, "ip", "addr", "add", n.Addr+"/24", "dev", "eth0")
	l.mustIn(n.ns, "ip", "link", "set", "eth0", "up")

	// nsenter --net, not ip netns exec: that one remounts /sys, which
	// would hide the cgroup hierarchy the boxes need.
	binds, err := l.nodeCgroups(name)
	if err != nil {
		l.t.Fatal(err)
	}
	cmd := exec.Command("nsenter", append([]string{"--net=" + l.nsPath(n.ns), "unshare", "--mount", "--propagation", "private",
		"--pid", "--fork", "--kill-child", "--mount-proc", "--", "/bin/sh", "-c", holderScript, "netlab",
		filepath.Join(l.dir, "nodes"), name}, binds...)...)
	// The chain dies with this process: unshare's child (the PID
	// namespace's first process, whose death ends every process of the
	// node) with unshare (--kill-child), unshare with this process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		l.t.Fatal(err)
	}
	errb := &testbin.Buffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		l.t.Fatalf("netlab: starting node %s's namespaces: %v", name, err)
	}
	n.holder, n.held = cmd, make(chan struct{})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ready <- sc.Scan() && sc.Text() == "ready"
		io.Copy(io.Discard, stdout)
		cmd.Wait()
		close(n.held)
	}()
	select {
	case ok := <-ready:
		if !ok {
			<-n.held
			l.t.Fatalf("netlab: node %s's namespaces: %v\n%s", name, cmd.ProcessState, errb)
		}
	case <-time.After(cmdTimeout):
		l.t.Fatalf("netlab: node %s's namespaces were not ready within %s\n%s", name, cmdTimeout, errb)
	}
	kids := children(cmd.Process.Pid)
	if len(kids) != 1 {
		l.t.Fatalf("netlab: node %s: unshare has children %v, want its PID namespace's first process", name, kids)
	}
	n.hpid = kids[0]
	return n
}

// Start runs `harvest serve` in the node, as the node sees its machine:
// --listen and --advertise on its address, --data its data directory,
// --store the lab's PostgreSQL on the bridge, HARVEST_HOME below its
// directory, HARVEST_RUN_DIR its own /run/harvest, the harvest and
// harvest-agent binaries copied where it sees them; env adds to this
// process's environment (less its HARVEST_ and model API variables), args
// to serve's flags. It waits until the server listens. A node whose
// harvest was killed may be started again.
func (n *Node) Start(env []string, args ...string) {
	l := n.lab
	l.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		select {
		case <-n.exited:
		default:
			l.t.Fatalf("netlab: node %s runs already", n.Name)
		}
	}
	harvest := l.copyBinary(testbin.Harvest(l.t))
	agent := l.copyBinary(testbin.Agent(l.t))
	var base []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "HARVEST_") || strings.HasPrefix(k, "ANTHROPIC_") || strings.HasPrefix(k, "OPENAI_") {
			continue
		}
		base = append(base, kv)
	}
	base = append(base, "HARVEST_HOME="+filepath.Join(n.Dir, "home"), "HARVEST_RUN_DIR=/run/harvest",
		"HARVEST_AGENT_BINARY="+agent, "HARVEST_SERVER=", "HARVEST_TOKEN=", "NO_COLOR=1")
	argv := slices.Concat([]string{"--target=" + strconv.Itoa(n.hpid), "--net", "--mount", "--pid", "--", harvest, "serve",
		"--listen", net.JoinHostPort(n.Addr, strconv.Itoa(NodePort)), "--advertise", n.URL,
		"--data", n.DataDir, "--store", l.StoreURL(), "--quiet"}, args)
	cmd := exec.Command("nsenter", argv...)
	cmd.Env = append(base, env...)
	// Pdeathsig kills nsenter alone; the node's harvest dies with its PID
	// namespace's first process (AddNode).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Its stdout is a pipe of our own, not StdoutPipe: a process harvest
	// started may hold it open after harvest exits, and Exited must not
	// wait for that (the reader ends when the node's PID namespace does).
	stdout, w, err := os.Pipe()
	if err != nil {
		l.t.Fatal(err)
	}
	cmd.Stdout = w
	n.Stderr = &testbin.Buffer{}
	cmd.Stderr = n.Stderr
	err = cmd.Start()
	w.Close()
	if err != nil {
		stdout.Close()
		l.t.Fatalf("netlab: starting harvest serve on node %s: %v", n.Name, err)
	}
	exited := make(chan struct{})
	lines := make(chan string, 1)
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer stdout.Close()
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, stdout)
	}()
	go func() {
		cmd.Wait()
		close(exited)
	}()
	n.reads = append(n.reads, read)
	n.env, n.args = env, args
	n.proc, n.exited, n.pid = cmd, exited, 0
	n.entered = append(n.entered, cmd.Process.Pid)
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, "harvest serve listening on ") {
			l.t.Fatalf("netlab: harvest serve on node %s did not start: %q\n%s", n.Name, line, n.Stderr)
		}
	case <-time.After(2 * time.Minute):
		l.t.Fatalf("netlab: harvest serve on node %s did not listen within 2 minutes:\n%s", n.Name, n.Stderr)
	}
	// nsenter forked harvest into the PID namespace: its only child.
	kids := children(cmd.Process.Pid)
	if len(kids) != 1 {
		l.t.Fatalf("netlab: node %s: nsenter has children %v, want harvest serve", n.Name, kids)
	}
	n.pid = kids[0]
}

// Restart starts harvest serve again with the last Start's environment
// and flags (after Kill, say).
func (n *Node) Restart() {
	n.lab.t.Helper()
	n.mu.Lock()
	env, args := n.env, n.args
	n.mu.Unlock()
	n.Start(env, args...)
}

// Pid is the host pid of the node's harvest serve (0 before Start).
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pid
}

// Exited is closed when the node's harvest serve has exited.
func (n *Node) Exited() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.exited
}

// AdminToken is the admin token harvest serve wrote to the node's data
// directory.
func (n *Node) AdminToken() string {
	n.lab.t.Helper()
	b, err := os.ReadFile(filepath.Join(n.DataDir, "admin-token"))
	if err != nil {
		n.lab.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// Proc is a process of a node.
type Proc struct {
	Pid     int
	Cmdline string
}

// Procs lists the node's processes: harvest serve (a child of the nsenter
// that started it), its boxes and their tools, and what outlived harvest
// (which the PID namespace's first process inherits): every descendant of
// those.
func (n *Node) Procs() []Proc {
	return procsOf([]*Node{n})[n.Name]
}

// Procs lists every node's processes (Node.Procs), by node name, from one
// reading of /proc: a snapshot of the lab's machines at one moment. Call
// it once every node is added.
func (l *Lab) Procs() map[string][]Proc {
	return procsOf(l.nodes)
}

// ProcsMatching is Procs of the processes whose command line match
// accepts, found faster: only their ancestry is read.
func (l *Lab) ProcsMatching(match func(cmdline string) bool) map[string][]Proc {
	rootOf := rootsOf(l.nodes)
	procs, _ := os.ReadDir("/proc")
	parents := map[int]int{}
	parent := func(pid int) int {
		if p, ok := parents[pid]; ok {
			return p
		}
		p, _ := parentOf(pid)
		parents[pid] = p
		return p
	}
	out := map[string][]Proc{}
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(b) == 0 {
			continue
		}
		cmd := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
		if !match(cmd) {
			continue
		}
		for p := parent(pid); p != 0; p = parent(p) {
			if name, ok := rootOf[p]; ok {
				out[name] = append(out[name], Proc{Pid: pid, Cmdline: cmd})
				break
			}
		}
	}
	return out
}

func rootsOf(nodes []*Node) map[int]string {
	rootOf := map[int]string{}
	for _, n := range nodes {
		n.mu.Lock()
		for _, r := range append([]int{n.hpid}, n.entered...) {
			rootOf[r] = n.Name
		}
		n.mu.Unlock()
	}
	return rootOf
}

func procsOf(nodes []*Node) map[string][]Proc {
	rootOf := rootsOf(nodes)
	parent := map[int]int{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if ppid, state := parentOf(pid); ppid != 0 && state != 'Z' {
			parent[pid] = ppid
		}
	}
	out := map[string][]Proc{}
	for pid := range parent {
		for p := parent[pid]; p != 0; p = parent[p] {
			if name, ok := rootOf[p]; ok {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				out[name] = append(out[name], Proc{Pid: pid, Cmdline: strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))})
				break
			}
		}
	}
	for _, ps := range out {
		slices.SortFunc(ps, func(a, b Proc) int { return a.Pid - b.Pid })
	}
	return out
}

// destroy ends the node: its PID namespace's first process (SIGKILL), and
// with it every process of the node; then harvest's nsenter and the
// holder's unshare are waited for. The lab removes the namespaces.
func (n *Node) destroy() {
	if n.holder == nil || n.hpid == 0 {
		return
	}
	syscall.Kill(n.hpid, syscall.SIGKILL)
	n.holder.Process.Kill()
	<-n.held
	n.mu.Lock()
	exited := n.exited
	if n.proc != nil {
		n.proc.Process.Kill() // nsenter, even if stopped
	}
	n.mu.Unlock()
	if exited != nil {
		<-exited
	}
	for _, r := range n.reads {
		<-r
	}
	n.hpid = 0
}

// Run runs a command in the node's namespaces (network, mount, PID: as a
// process of the node's machine; its workspaces are on disks mounted
// there alone) and returns its output.
func (n *Node) Run(ctx context.Context, args ...string) (string, error) {
	return run(ctx, "nsenter", append([]string{"--target=" + strconv.Itoa(n.hpid), "--net", "--mount", "--pid", "--"}, args...)...)
}
