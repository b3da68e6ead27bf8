package netlab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
)

// cmdTimeout bounds every ip, iptables and mount command the lab runs.
const cmdTimeout = 30 * time.Second

// Ports of the lab's services, on the lab's address.
const (
	PostgresPort = 5432
	NATSPort     = 4222
	// NodePort is where every node's API listens, on its own address.
	NodePort = 7777
)

// labs numbers the labs of this process: a part of every name.
var labs atomic.Int64

// Lab is a set of separate machines for one test: a "lab" network
// namespace with a bridge, PostgreSQL and nats-server on it, the test
// process linked to the bridge (it is the outside world: the model API's
// stand-in listens there, Listen), and the nodes (StartNode), each a
// network, mount and PID namespace of its own on the bridge. Everything is
// removed when the test ends.
type Lab struct {
	t      testing.TB
	prefix string // hl<pid><letter>: the start of every name
	dir    string // /var/tmp/harvest-netlab-<pid>-<n>: the lab's files
	net    string // 10.B.C: the /24 of the bridge
	ns     string // the lab's network namespace
	hostIf string // the test process's end of its link to the bridge

	pg       *testbin.PGServer
	pgDB     string            // the database, on the socket (the test's own view)
	s3       *testbin.S3Server // S3, started at the first call
	pgFrozen bool

	natsMu  sync.Mutex
	nats    *exec.Cmd
	natsOut chan struct{} // closed when nats exits

	mu    sync.Mutex
	nodes []*Node
}

// New builds a lab for t: it first sweeps what killed earlier test
// processes left (sweep), then makes the lab's namespace, bridge and link,
// and starts PostgreSQL and nats-server there. When the machine lacks
// what it takes (root, ip, iptables, unshare, nats-server, PostgreSQL),
// the test is skipped, or fails where testreq.Netns is required (CI).
func New(t testing.TB) *Lab {
	t.Helper()
	if os.Geteuid() != 0 {
		testreq.Unavailable(t, testreq.Netns, "netlab: network namespaces need root")
	}
	for _, bin := range []string{"ip", "iptables", "unshare", "nsenter", "nats-server", "mount"} {
		if _, err := exec.LookPath(bin); err != nil {
			testreq.Unavailable(t, testreq.Netns, "netlab: no %s on PATH", bin)
		}
	}
	sweep(t)
	n := labs.Add(1)
	l := &Lab{
		t:      t,
		prefix: fmt.Sprintf("hl%d%c", os.Getpid(), 'a'+rune((n-1)%26)),
		dir:    filepath.Join(labRoot, fmt.Sprintf("%s%d-%d", labDirPrefix, os.Getpid(), n)),
	}
	l.ns = l.prefix + "-lab"
	l.hostIf = l.prefix + "h"
	// Last: whatever the test made, even after a failure half-way.
	t.Cleanup(l.cleanup)
	if err := os.MkdirAll(filepath.Join(l.dir, "nodes"), 0o711); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{l.dir, filepath.Join(l.dir, "nodes")} {
		if err := os.Chmod(d, 0o711); err != nil { // the box user reaches its workspace below
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(l.SharedDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	net, err := freeSubnet(n)
	if err != nil {
		t.Fatal(err)
	}
	l.net = net
	l.must("ip", "netns", "add", l.ns)
	l.mustIn(l.ns, "ip", "link", "set", "lo", "up")
	l.mustIn(l.ns, "ip", "link", "add", "br0", "type", "bridge")
	l.mustIn(l.ns, "ip", "addr", "add", l.addr(2)+"/24", "dev", "br0")
	l.mustIn(l.ns, "ip", "link", "set", "br0", "up")
	l.must("ip", "link", "add", l.hostIf, "type", "veth", "peer", "name", l.prefix+"x", "netns", l.ns)
	l.mustIn(l.ns, "ip", "link", "set", l.prefix+"x", "master", "br0", "up")
	l.must("ip", "addr", "add", l.addr(1)+"/24", "dev", l.hostIf)
	l.must("ip", "link", "set", l.hostIf, "up")
	l.startPostgres()
	l.StartNATS()
	return l
}

// SharedDir is a directory every node sees at the same path (the test's
// repositories to clone, say): unlike the nodes' own directories, it is
// not hidden from them.
func (l *Lab) SharedDir() string { return filepath.Join(l.dir, "shared") }

// addr is host i of the lab's /24: 1 the test process, 2 the lab (its
// bridge: PostgreSQL, NATS), 10 and up the nodes.
func (l *Lab) addr(i int) string { return fmt.Sprintf("%s.%d", l.net, i) }

// HostAddr is the test process's address on the bridge: what a node
// reaches the outside world (the test's stand-ins) at.
func (l *Lab) HostAddr() string { return l.addr(1) }

// LabAddr is the address of PostgreSQL and NATS, on the bridge.
func (l *Lab) LabAddr() string { return l.addr(2) }

// S3 is the lab's S3 server (testbin.S3Server, started at the first
// call), on HostAddr: where the nodes keep the workspaces they carry
// (CheckpointArgs), as nodes on separate machines must.
func (l *Lab) S3() *testbin.S3Server {
	l.t.Helper()
	if l.s3 == nil {
		l.s3 = testbin.StartS3ServerOn(l.t, l.HostAddr())
	}
	return l.s3
}

// CheckpointArgs are the flags and the environment (its keys) that make a
// node carry workspaces through the lab's S3 server.
func (l *Lab) CheckpointArgs() (args, env []string) {
	s := l.S3()
	return []string{"--checkpoint-store", "s3://" + s.Bucket + "/lab", "--checkpoint-endpoint", s.Endpoint},
		[]string{"AWS_ACCESS_KEY_ID=" + s.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s.SecretKey}
}

// Listen returns a TCP listener of the test process that the nodes reach
// (on HostAddr, port 0), closed when the test ends: for the stand-ins of
// the outside world (harvest sim as the model API).
func (l *Lab) Listen() net.Listener {
	l.t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(l.HostAddr(), "0"))
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { ln.Close() })
	return ln
}

// freeSubnet picks a 10.B.C.0/24 that no route of this machine's network
// namespace covers yet (the host's, Docker's, other labs').
func freeSubnet(n int64) (string, error) {
	out, err := run(context.Background(), "ip", "-4", "route", "show", "table", "all")
	if err != nil {
		return "", err
	}
	start := (os.Getpid()*7 + int(n)*13) % (50 * 256)
	for i := range 50 * 256 {
		k := (start + i) % (50 * 256)
		net := fmt.Sprintf("10.%d.%d", 200+k/256, k%256)
		if !strings.Contains(out, net+".") {
			return net, nil
		}
	}
	return "", errors.New("netlab: no free 10.200-249.x.0/24 for a lab")
}

// run runs a command with cmdTimeout and returns its output, or an error
// that has its output.
func run(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// must runs a command, failing the test if it fails.
func (l *Lab) must(name string, args ...string) string {
	l.t.Helper()
	out, err := run(context.Background(), name, args...)
	if err != nil {
		l.t.Fatal(err)
	}
	return out
}

// mustIn runs a command in network namespace ns.
func (l *Lab) mustIn(ns string, args ...string) string {
	l.t.Helper()
	return l.must("ip", append([]string{"netns", "exec", ns}, args...)...)
}

// cleanup removes everything the lab made: the nodes (every process of
// their PID namespaces), NATS, PostgreSQL (its own cleanup, registered
// before this one, runs after it), the namespaces (their links and the
// bridge go with them), the test process's link, the loop devices of
// files below the lab's directory, and the directory.
func (l *Lab) cleanup() {
	l.mu.Lock()
	nodes := l.nodes
	l.mu.Unlock()
	for _, n := range nodes {
		n.destroy()
	}
	l.StopNATS()
	if l.pgFrozen {
		l.ThawPostgres()
	}
	if err := removeLab(l.prefix, l.dir); err != nil {
		l.t.Error(err)
	}
}

// removeLab removes the namespaces and links named with prefix and the
// directory dir, with any loop device of a file below it; the processes
// in the namespaces must be gone.
func removeLab(prefix, dir string) error {
	var errs []error
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			killNetns(filepath.Join("/run/netns", e.Name()))
			if _, err := run(context.Background(), "ip", "netns", "del", e.Name()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if links, err := net.Interfaces(); err == nil {
		for _, li := range links {
			if strings.HasPrefix(li.Name, prefix) {
				// Most went with their peer's namespace; this one did not.
				if _, err := run(context.Background(), "ip", "link", "del", li.Name); err != nil {
					if _, serr := os.Stat("/sys/class/net/" + li.Name); serr == nil {
						errs = append(errs, err)
					}
				}
			}
		}
	}
	errs = append(errs, removeCgroups(prefix))
	if dir != "" {
		errs = append(errs, detachLoops(dir))
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("netlab: removing %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// detachLoops detaches every loop device whose backing file is below dir
// (autoclear ones go by themselves once their mount namespace is gone;
// this is for the rest).
func detachLoops(dir string) error {
	devs, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var errs []error
	for _, f := range devs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		backing := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if backing == dir || strings.HasPrefix(backing, dir+"/") {
			dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
			if _, err := run(context.Background(), "losetup", "-d", dev); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// copyBinary copies an executable into the lab's bin directory, which
// the nodes see (the test binaries' build directory may be below /tmp,
// which each node has its own of).
func (l *Lab) copyBinary(src string) string {
	l.t.Helper()
	dst := filepath.Join(l.dir, "bin", filepath.Base(src))
	if _, err := os.Stat(dst); err == nil {
		return dst
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		l.t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		l.t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		l.t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		l.t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		l.t.Fatal(err)
	}
	return dst
}
