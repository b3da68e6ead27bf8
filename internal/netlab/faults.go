package netlab

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"
)

// Kill kills the node's harvest serve with SIGKILL and waits until it has
// exited. Its boxes and their tools go on (they are not its children's
// children alone: on a separate machine nothing kills them), as a crash
// of the harvest process, not of the machine, leaves them.
func (n *Node) Kill() {
	n.lab.t.Helper()
	n.signal(syscall.SIGKILL)
	select {
	case <-n.Exited():
	case <-time.After(cmdTimeout):
		n.lab.t.Fatalf("netlab: node %s's harvest serve did not exit within %s of SIGKILL", n.Name, cmdTimeout)
	}
}

// Pause stops the node's harvest serve with SIGSTOP (its boxes run on,
// as they do under a process that hangs), and returns once it is stopped
// (a signal is delivered a little later).
func (n *Node) Pause() {
	n.lab.t.Helper()
	n.signal(syscall.SIGSTOP)
	pid := n.Pid()
	deadline := time.Now().Add(cmdTimeout)
	for {
		if _, st := parentOf(pid); st == 'T' || st == 't' {
			return
		}
		if time.Now().After(deadline) {
			n.lab.t.Fatalf("netlab: node %s's harvest serve did not stop within %s of SIGSTOP", n.Name, cmdTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Resume continues it (SIGCONT), and the nsenter that started it: that
// one stops itself when its child stops (util-linux passes a child's stop
// on to its parent), and would not reap harvest if left stopped.
func (n *Node) Resume() {
	n.lab.t.Helper()
	n.signal(syscall.SIGCONT)
	n.mu.Lock()
	if n.proc != nil {
		n.proc.Process.Signal(syscall.SIGCONT)
	}
	n.mu.Unlock()
}

func (n *Node) signal(sig syscall.Signal) {
	n.lab.t.Helper()
	pid := n.Pid()
	if pid == 0 {
		n.lab.t.Fatalf("netlab: node %s runs no harvest serve", n.Name)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		n.lab.t.Fatalf("netlab: %v to node %s: %v", sig, n.Name, err)
	}
}

// A Peer is what a partition cuts a node off from: an address, and a TCP
// port on it (0: every packet to or from the address).
type Peer struct {
	Name string
	Addr string
	Port int
}

// Postgres is the lab's PostgreSQL as a peer; NATS its nats-server; Host
// the test process (the outside world: the model API's stand-in).
func (l *Lab) Postgres() Peer { return Peer{"PostgreSQL", l.LabAddr(), PostgresPort} }
func (l *Lab) NATS() Peer     { return Peer{"NATS", l.LabAddr(), NATSPort} }
func (l *Lab) Host() Peer     { return Peer{"the test process", l.HostAddr(), 0} }

// Peer is the node as a peer of another node: every packet between them.
func (n *Node) Peer() Peer { return Peer{"node " + n.Name, n.Addr, 0} }

// Direction is which way a partition drops packets, seen from the node.
type Direction int

const (
	// Both drops the node's packets to the peer and the peer's to it.
	Both Direction = iota
	// Out drops the node's packets to the peer: its requests (and its
	// TCP handshakes' and acknowledgements' halves) never arrive.
	Out
	// In drops the peer's packets to the node: the peer's answers and
	// requests never arrive.
	In
)

// Partition cuts the node off from p in direction d: iptables DROP rules
// in the node's own network namespace (its OUTPUT chain for Out, INPUT
// for In), which take effect at once on connections already open too.
// A TCP connection needs both ways, so a one-way partition stalls TCP in
// both; it stays one-way for datagrams (and for which side's
// retransmissions arrive). Heal removes it.
func (n *Node) Partition(p Peer, d Direction) {
	n.lab.t.Helper()
	match := func(dir string) []string {
		addr := "-d"
		port := "--dport"
		if dir == "INPUT" {
			addr, port = "-s", "--sport"
		}
		r := []string{"-A", dir, addr, p.Addr}
		if p.Port != 0 {
			r = append(r, "-p", "tcp", port, strconv.Itoa(p.Port))
		}
		return append(r, "-j", "DROP")
	}
	if d == Both || d == Out {
		n.iptables(match("OUTPUT")...)
	}
	if d == Both || d == In {
		n.iptables(match("INPUT")...)
	}
}

// Loss drops each packet the node sends or receives on its link with
// probability p (iptables' statistic match, random mode, in both chains):
// this kernel has no sch_netem, so loss is a firewall rule and delay is
// not offered. Heal removes it.
func (n *Node) Loss(p float64) {
	n.lab.t.Helper()
	if p <= 0 || p > 1 {
		n.lab.t.Fatalf("netlab: a loss of %v: it must be in (0, 1]", p)
	}
	prob := strconv.FormatFloat(p, 'f', -1, 64)
	n.iptables("-A", "OUTPUT", "-o", "eth0", "-m", "statistic", "--mode", "random", "--probability", prob, "-j", "DROP")
	n.iptables("-A", "INPUT", "-i", "eth0", "-m", "statistic", "--mode", "random", "--probability", prob, "-j", "DROP")
}

// Heal removes every partition and loss of the node.
func (n *Node) Heal() {
	n.lab.t.Helper()
	n.iptables("-F", "INPUT")
	n.iptables("-F", "OUTPUT")
}

// iptables runs iptables (-w: waits for the xtables lock) in the node's
// network namespace.
func (n *Node) iptables(args ...string) {
	n.lab.t.Helper()
	n.lab.mustIn(n.ns, append([]string{"iptables", "-w", "5"}, args...)...)
}

// DialContext dials address from inside the node's network namespace, as
// the node would: through its link and its firewall. For a test to check
// what the node reaches, or to talk from there (a pgx DialFunc).
func (n *Node) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return dialIn(ctx, n.lab.nsPath(n.ns), network, address)
}

// ListenPacket opens a UDP socket in the node's network namespace on its
// address (port 0: any), closed when the test ends.
func (n *Node) ListenPacket() net.PacketConn {
	n.lab.t.Helper()
	c, err := listenPacketIn(n.lab.nsPath(n.ns), net.JoinHostPort(n.Addr, "0"))
	if err != nil {
		n.lab.t.Fatal(err)
	}
	n.lab.t.Cleanup(func() { c.Close() })
	return c
}

// String names the node in messages.
func (n *Node) String() string { return fmt.Sprintf("node %s (%s)", n.Name, n.Addr) }
