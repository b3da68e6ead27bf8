package netlab

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
)

// startPostgres starts the lab's PostgreSQL: testbin's real server, its
// process started from a thread inside the lab's network namespace, so it
// listens on the bridge (LabAddr) and nowhere else on TCP; its unix socket
// is in a directory below /tmp, which the nodes do not see (theirs is
// their own), so a node reaches it through the bridge alone.
func (l *Lab) startPostgres() {
	l.t.Helper()
	l.pg = testbin.PostgresServerWith(l.t, testbin.PGOptions{
		Listen: net.JoinHostPort(l.LabAddr(), strconv.Itoa(PostgresPort)),
		Start: func(cmd *exec.Cmd) error {
			return inNetns(l.nsPath(l.ns), cmd.Start)
		},
	})
	l.pgDB = l.pg.Database()
}

// nsPath is the file naming network namespace ns.
func (l *Lab) nsPath(ns string) string { return filepath.Join("/run/netns", ns) }

// StoreURL is the lab's database as the nodes reach it: on the bridge.
func (l *Lab) StoreURL() string { return l.pg.URL(l.pgDB) }

// LocalStoreURL is the same database on PostgreSQL's unix socket: the
// test process's own view, which no fault of the lab's network touches
// (it stops answering only while PostgreSQL is frozen).
func (l *Lab) LocalStoreURL() string { return l.pgDB }

// FreezePostgres stops every PostgreSQL process (the postmaster and each
// backend) with SIGSTOP: connections stay open, and the kernel still
// completes new TCP handshakes into the listen backlog, but nothing
// answers, as a database host that hangs (a stalled disk, a VM paused).
func (l *Lab) FreezePostgres() {
	l.t.Helper()
	pm := l.pg.Pid()
	if pm == 0 {
		l.t.Fatal("netlab: PostgreSQL is not running")
	}
	// Frozen from the first signal on, whatever happens next: the lab's
	// cleanup thaws it (a half-frozen PostgreSQL would hang every
	// cleanup that talks to it).
	l.pgFrozen = true
	// The postmaster first, so that it forks no backend meanwhile; then
	// its children, listed again until every one is stopped (a backend
	// forked before the postmaster stopped, or one that exited between
	// the listing and its signal, which has nothing to freeze).
	if err := syscall.Kill(pm, syscall.SIGSTOP); err != nil {
		l.t.Fatalf("netlab: freezing PostgreSQL's postmaster %d: %v", pm, err)
	}
	for round := 0; ; round++ {
		running := 0
		for _, pid := range children(pm) {
			if _, state := parentOf(pid); state == 'T' || state == 't' || state == 'Z' || state == 0 {
				continue
			}
			running++
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
				l.t.Fatalf("netlab: freezing PostgreSQL process %d: %v", pid, err)
			}
		}
		if running == 0 {
			return
		}
		if round == 100 {
			l.t.Fatalf("netlab: PostgreSQL's processes still run after %d rounds of SIGSTOP", round)
		}
		time.Sleep(time.Millisecond) // the signals take effect
	}
}

// ThawPostgres resumes the processes FreezePostgres stopped (SIGCONT).
func (l *Lab) ThawPostgres() {
	for _, pid := range l.postgresPids() {
		syscall.Kill(pid, syscall.SIGCONT)
	}
	l.pgFrozen = false
}

// postgresPids is the postmaster and its children.
func (l *Lab) postgresPids() []int {
	pm := l.pg.Pid()
	if pm == 0 {
		return nil
	}
	return append([]int{pm}, children(pm)...)
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	procs, _ := os.ReadDir("/proc")
	var out []int
	for _, p := range procs {
		c, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if ppid, _ := parentOf(c); ppid == pid {
			out = append(out, c)
		}
	}
	return out
}

// parentOf reads a process's parent and state from /proc/PID/stat.
func parentOf(pid int) (ppid int, state byte) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, 0
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0][0]
}

// NATSURL is the lab's NATS server as the nodes reach it.
func (l *Lab) NATSURL() string {
	return "nats://" + net.JoinHostPort(l.LabAddr(), strconv.Itoa(NATSPort))
}

// StartNATS starts nats-server (JetStream, its store in the lab's
// directory, so a restart keeps the streams) in the lab's namespace, and
// waits until it accepts connections. New starts it; after StopNATS it
// starts it again.
func (l *Lab) StartNATS() {
	l.t.Helper()
	l.natsMu.Lock()
	defer l.natsMu.Unlock()
	if l.nats != nil {
		l.t.Fatal("netlab: NATS runs already")
	}
	cmd := exec.Command("ip", "netns", "exec", l.ns, "nats-server", "-a", l.LabAddr(), "-p", strconv.Itoa(NATSPort),
		"-js", "-sd", filepath.Join(l.dir, "nats"))
	log := &testbin.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	// Its process is ip's (ip netns exec execs the server): Pdeathsig
	// stops it if this process dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		l.t.Fatalf("netlab: starting nats-server: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	l.nats, l.natsOut = cmd, exited
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := dialIn(l.t.Context(), l.nsPath(l.ns), "tcp", net.JoinHostPort(l.LabAddr(), strconv.Itoa(NATSPort)))
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			l.t.Fatalf("netlab: nats-server exited: %v\n%s", cmd.ProcessState, log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("netlab: nats-server did not listen within a minute: %v\n%s", err, log)
		}
	}
}

// StopNATS kills nats-server (SIGKILL: NATS down, not drained) and waits
// until it has exited. Stopping a stopped server does nothing.
func (l *Lab) StopNATS() {
	l.natsMu.Lock()
	defer l.natsMu.Unlock()
	if l.nats == nil {
		return
	}
	l.nats.Process.Kill()
	<-l.natsOut
	l.nats, l.natsOut = nil, nil
}
