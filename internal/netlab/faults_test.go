package netlab_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-dev/harvest/internal/netlab"
)

// TestFaults shows each fault of the lab taking effect, and going away
// when healed, on two real nodes.
func TestFaults(t *testing.T) {
	lab := netlab.New(t)
	simURL := startSim(t, lab, helloScript)
	nodes := startNodes(t, lab, simURL, 2, "--lease-ttl=3s")
	a, b := nodes[0], nodes[1]
	ctx := t.Context()
	const short = 1500 * time.Millisecond
	// Steps, not subtests: the lab's methods fail the test that made it.
	step := func(name string, f func(t *testing.T)) {
		t.Logf("step %s", name)
		f(t)
	}

	step("PartitionFromPostgres", func(t *testing.T) {
		for _, d := range []netlab.Direction{netlab.Both, netlab.Out, netlab.In} {
			if err := pgFrom(ctx, lab, a, 10*time.Second); err != nil {
				t.Fatalf("before the partition (%d), node a does not reach PostgreSQL: %v", d, err)
			}
			a.Partition(lab.Postgres(), d)
			if err := pgFrom(ctx, lab, a, short); err == nil {
				t.Errorf("partitioned from PostgreSQL (%d), node a still reaches it", d)
			}
			if err := pgFrom(ctx, lab, b, 10*time.Second); err != nil {
				t.Errorf("node a's partition (%d) cut node b off from PostgreSQL: %v", d, err)
			}
			a.Heal()
		}
		if err := pgFrom(ctx, lab, a, 10*time.Second); err != nil {
			t.Errorf("healed, node a does not reach PostgreSQL: %v", err)
		}
	})

	step("PartitionOpenConnection", func(t *testing.T) {
		// A connection made before the partition stalls too.
		cfg, err := pgx.ParseConfig(lab.StoreURL())
		if err != nil {
			t.Fatal(err)
		}
		cfg.DialFunc = a.DialContext
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		a.Partition(lab.Postgres(), netlab.Out)
		qctx, cancel := context.WithTimeout(ctx, short)
		_, err = conn.Exec(qctx, "SELECT 1")
		cancel()
		a.Heal()
		if err == nil {
			t.Errorf("a connection open before the partition still answers")
		}
	})

	step("PartitionBetweenNodes", func(t *testing.T) {
		a.Partition(b.Peer(), netlab.Both)
		if err := healthz(ctx, b, a, short); err == nil {
			t.Errorf("partitioned, node a still reaches node b")
		}
		if err := healthz(ctx, a, b, short); err == nil {
			t.Errorf("partitioned, node b still reaches node a")
		}
		if err := healthz(ctx, a, nil, 5*time.Second); err != nil {
			t.Errorf("node a's partition from node b cut the test process off: %v", err)
		}
		a.Heal()
		if err := healthz(ctx, b, a, 5*time.Second); err != nil {
			t.Errorf("healed, node a does not reach node b: %v", err)
		}
	})

	step("OneWay", func(t *testing.T) {
		// Datagrams show the direction: with Out, a's to b are dropped and
		// b's to a arrive; with In, the other way round.
		ua, ub := a.ListenPacket(), b.ListenPacket()
		for _, c := range []struct {
			d          netlab.Direction
			aToB, bToA bool
		}{{netlab.Out, false, true}, {netlab.In, true, false}} {
			a.Partition(b.Peer(), c.d)
			if got := sends(t, ua, ub, 20); (got > 0) != c.aToB {
				t.Errorf("one-way partition %d of a from b: %d/20 datagrams from a reached b", c.d, got)
			}
			if got := sends(t, ub, ua, 20); (got > 0) != c.bToA {
				t.Errorf("one-way partition %d of a from b: %d/20 datagrams from b reached a", c.d, got)
			}
			a.Heal()
		}
		if got := sends(t, ua, ub, 20); got != 20 {
			t.Errorf("healed: %d/20 datagrams from a reached b", got)
		}
	})

	step("Loss", func(t *testing.T) {
		// From the test process to node a: a drops each datagram it
		// receives with probability 0.3 (its INPUT rule).
		ua := a.ListenPacket()
		host, err := net.ListenPacket("udp4", net.JoinHostPort(lab.HostAddr(), "0"))
		if err != nil {
			t.Fatal(err)
		}
		defer host.Close()
		a.Loss(0.3)
		const n = 400
		got := sends(t, host, ua, n)
		a.Heal()
		if lo, hi := n*55/100, n*85/100; got < lo || got > hi {
			t.Errorf("with a loss of 0.3, %d/%d datagrams arrived, want %d-%d", got, n, lo, hi)
		} else {
			t.Logf("with a loss of 0.3, %d/%d datagrams arrived", got, n)
		}
		if got := sends(t, host, ua, n); got != n {
			t.Errorf("healed: %d/%d datagrams arrived", got, n)
		}
	})

	step("Pause", func(t *testing.T) {
		b.Pause()
		if st := procState(b.Pid()); st != "T" {
			t.Errorf("paused, node b's harvest is in state %q", st)
		}
		if err := healthz(ctx, b, nil, short); err == nil {
			t.Errorf("paused, node b still answers")
		}
		b.Resume()
		if err := healthz(ctx, b, nil, 10*time.Second); err != nil {
			t.Errorf("resumed, node b does not answer: %v", err)
		}
	})

	step("FreezePostgres", func(t *testing.T) {
		lab.FreezePostgres()
		if err := pgLocal(ctx, lab, short); err == nil {
			t.Errorf("frozen, PostgreSQL still answers")
		}
		lab.ThawPostgres()
		if err := pgLocal(ctx, lab, 10*time.Second); err != nil {
			t.Errorf("thawed, PostgreSQL does not answer: %v", err)
		}
	})

	step("NATSDown", func(t *testing.T) {
		nats := net.JoinHostPort(lab.LabAddr(), strconv.Itoa(netlab.NATSPort))
		lab.StopNATS()
		if c, err := a.DialContext(ctx, "tcp", nats); err == nil {
			c.Close()
			t.Errorf("NATS down, node a still connects to it")
		}
		lab.StartNATS()
		c, err := a.DialContext(ctx, "tcp", nats)
		if err != nil {
			t.Fatalf("NATS up again, node a does not reach it: %v", err)
		}
		c.Close()
	})

	step("Kill", func(t *testing.T) {
		pid := b.Pid()
		b.Kill()
		if err := healthz(ctx, b, nil, short); err == nil {
			t.Errorf("killed, node b still answers")
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil && procState(pid) != "Z" {
			t.Errorf("killed, node b's harvest (pid %d) is still there", pid)
		}
		if err := healthz(ctx, a, nil, 5*time.Second); err != nil {
			t.Errorf("node b's death took node a along: %v", err)
		}
		// Its namespaces stay: harvest starts there again.
		b.Restart()
		if err := healthz(ctx, b, nil, 10*time.Second); err != nil {
			t.Errorf("restarted, node b does not answer: %v", err)
		}
	})
}

// sends sends n datagrams from one socket to another and counts those
// that arrive (reading until none came for half a second).
func sends(t *testing.T, from, to net.PacketConn, n int) int {
	t.Helper()
	buf := make([]byte, 64)
	got := 0
	// In batches of 50, each read before the next is sent: the receiver's
	// socket buffer holds some 250 datagrams.
	for i := 0; i < n; {
		for range min(50, n-i) {
			// A datagram the sender's own OUTPUT rule drops fails with EPERM.
			if _, err := from.WriteTo([]byte(strconv.Itoa(i)), to.LocalAddr()); err != nil && !errors.Is(err, syscall.EPERM) {
				t.Fatal(err)
			}
			i++
		}
		for {
			to.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			if _, _, err := to.ReadFrom(buf); err != nil {
				break
			}
			got++
		}
	}
	return got
}

// procState is a process's state letter (R, S, T, Z...), "" if gone.
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return f[0]
}

// pgLocal runs a query on the lab's PostgreSQL through its unix socket,
// within d.
func pgLocal(ctx context.Context, lab *netlab.Lab, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	conn, err := pgx.Connect(ctx, lab.LocalStoreURL())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}
