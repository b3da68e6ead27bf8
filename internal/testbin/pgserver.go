package testbin

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testreq"
)

// PGServer is a PostgreSQL server of one test, which the test may stop
// and start again (on the same data directory and socket: its URLs stay
// valid), unlike the shared server of Postgres.
type PGServer struct {
	t   testing.TB
	c   *cluster
	dbs atomic.Int64

	mu  sync.Mutex
	srv *pgServer // nil while stopped
}

// PostgresServer starts a PostgreSQL server for t alone, made and run as
// Postgres makes and runs the shared one, and stops it and removes its
// directory when the test ends. When PostgreSQL is not installed the test
// is skipped, or fails where testreq.Postgres is required (in CI).
func PostgresServer(t testing.TB) *PGServer {
	t.Helper()
	return PostgresServerWith(t, PGOptions{})
}

// PGOptions says how PostgresServerWith runs its server.
type PGOptions struct {
	// Listen is a TCP address (host:port) the server listens on besides
	// its unix socket, trusting every client there as it trusts those of
	// the socket; "" for the socket alone.
	Listen string
	// Start starts the server's command instead of cmd.Start: for
	// example in another network namespace. It must not change the
	// command's credentials or pipes.
	Start func(cmd *exec.Cmd) error
}

// PostgresServerWith is PostgresServer, run as o says.
func PostgresServerWith(t testing.TB, o PGOptions) *PGServer {
	t.Helper()
	c, missing, err := newCluster(o)
	if missing != "" {
		testreq.Unavailable(t, testreq.Postgres, "%s", missing)
	}
	if err != nil {
		t.Fatal(err)
	}
	p := &PGServer{t: t, c: c}
	t.Cleanup(func() {
		p.Stop()
		os.RemoveAll(c.dir)
	})
	p.Start()
	return p
}

// Start starts the server (again) and waits until it accepts connections.
func (p *PGServer) Start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv != nil {
		p.t.Fatal("testbin: PGServer.Start: the server runs already")
	}
	s, err := p.c.start()
	if err != nil {
		p.t.Fatal(err)
	}
	p.srv = s
}

// Stop shuts the server down (fast shutdown: its clients are disconnected,
// their transactions rolled back) and waits until it has exited. Stopping
// a stopped server does nothing.
func (p *PGServer) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv == nil {
		return
	}
	p.srv.stop()
	p.srv = nil
}

// Database creates a fresh, empty database and returns its URL. The
// server must be running.
func (p *PGServer) Database() string {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv == nil {
		p.t.Fatal("testbin: PGServer.Database: the server is stopped")
	}
	name := fmt.Sprintf("test_%d", p.dbs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.srv.exec(ctx, `CREATE DATABASE `+name); err != nil {
		p.t.Fatalf("creating the test database: %v", err)
	}
	return p.srv.url(name)
}

// URL is the URL of database name (as Database returns it) on the
// server's TCP address (PGOptions.Listen) instead of its socket.
func (p *PGServer) URL(db string) string {
	u, err := url.Parse(db)
	if err != nil || p.c.opts.Listen == "" {
		p.t.Fatalf("testbin: PGServer.URL(%q): %v (listening on %q)", db, err, p.c.opts.Listen)
	}
	u.Host, u.RawQuery = p.c.opts.Listen, "sslmode=disable"
	return u.String()
}

// Pid is the postmaster's process id, 0 while the server is stopped.
func (p *PGServer) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv == nil {
		return 0
	}
	return p.srv.cmd.Process.Pid
}

// Log is what the server logged since it last started.
func (p *PGServer) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv == nil {
		return ""
	}
	return p.srv.log.String()
}

// Freeze stops the server and every backend (SIGSTOP) until thaw is
// called (SIGCONT; the test's end thaws it too): a database host that
// hangs. Open connections stay open and new TCP or socket connections
// are still accepted into the listen backlog, but nothing answers.
func (p *PGServer) Freeze() (thaw func()) {
	p.t.Helper()
	pm := p.Pid()
	if pm == 0 {
		p.t.Fatal("testbin: PGServer.Freeze: the server is stopped")
	}
	pids := append([]int{pm}, childrenOf(pm)...)
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			p.t.Fatalf("testbin: freezing PostgreSQL process %d: %v", pid, err)
		}
	}
	var once sync.Once
	thaw = func() {
		once.Do(func() {
			for _, pid := range pids {
				syscall.Kill(pid, syscall.SIGCONT)
			}
		})
	}
	p.t.Cleanup(thaw)
	return thaw
}

// childrenOf lists the processes whose parent is pid (from /proc).
func childrenOf(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) >= 2 {
			if pp, _ := strconv.Atoi(f[1]); pp == pid {
				out = append(out, c)
			}
		}
	}
	return out
}
