package testbin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/harvest-dev/harvest/internal/testreq"
)

// PostgresBin is where Debian's postgresql-15 package (scripts/setup
// installs it) keeps initdb and postgres; $HARVEST_POSTGRES_BIN overrides it.
const PostgresBin = "/usr/lib/postgresql/15/bin"

// The PostgreSQL server of this test process: started by the first
// Postgres call, stopped by StopPostgres.
var pg struct {
	once sync.Once
	srv  *pgServer
	// missing says what is not installed; err why the server did not start.
	missing string
	err     error
	dbs     atomic.Int64
}

type pgServer struct {
	dir    string // the data directory's parent, and the socket's directory
	port   string // the port, in the socket's name (and on TCP with PGOptions.Listen)
	cmd    *exec.Cmd
	exited chan struct{} // closed when the server has exited (and its log is read)
	log    *Buffer       // the server's log (stderr)
}

// Postgres returns the URL of a fresh, empty database on this test
// process's own PostgreSQL server, dropped when the test ends (after the
// test's own cleanups, which close its connections). The first call
// starts the server: a new cluster (initdb) in a temporary directory, run
// by PostgresBin's postgres as a non-root user (the postgres user when
// the tests run as root, else the current one), reachable only on a unix
// socket in that directory, with fsync off (the tests do not cut power).
// The package's TestMain must call StopPostgres after m.Run.
//
// When PostgreSQL is not installed the test is skipped, or fails where
// testreq.Postgres is required (in CI).
func Postgres(t testing.TB) string {
	t.Helper()
	pg.once.Do(func() { pg.srv, pg.missing, pg.err = startPostgres() })
	if pg.missing != "" {
		testreq.Unavailable(t, testreq.Postgres, "%s", pg.missing)
	}
	if pg.err != nil {
		t.Fatal(pg.err)
	}
	name := fmt.Sprintf("test_%d_%d", os.Getpid(), pg.dbs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pg.srv.exec(ctx, `CREATE DATABASE `+name); err != nil {
		t.Fatalf("creating the test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pg.srv.exec(ctx, `DROP DATABASE `+name+` WITH (FORCE)`); err != nil {
			t.Errorf("dropping the test database: %v", err)
		}
	})
	return pg.srv.url(name)
}

// StopPostgres stops the server Postgres started, if it did, and removes
// its directory. Call it from TestMain after m.Run (before a goroutine
// leak check: the server's log reader is a goroutine).
func StopPostgres() {
	s := pg.srv
	if s == nil {
		return
	}
	s.stop()
	os.RemoveAll(s.dir)
}

// Main is the TestMain of a package whose tests may use PostgreSQL: it
// runs the tests, stops the server Postgres started, then fails the run if
// any goroutine outlives them (goleak).
func Main(m *testing.M) {
	code := m.Run()
	StopPostgres()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func (s *pgServer) url(db string) string {
	q := url.Values{"host": {s.dir}, "port": {s.port}, "sslmode": {"disable"}}
	return (&url.URL{Scheme: "postgres", User: url.User("harvest"), Host: "", Path: "/" + db, RawQuery: q.Encode()}).String()
}

// exec runs one statement as the superuser, on the postgres database.
func (s *pgServer) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.url("postgres"))
	if err != nil {
		return fmt.Errorf("connecting to the test server: %w\nits log:\n%s", err, s.log.String())
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// startPostgres makes a cluster and starts its server, waiting until its
// log says it accepts connections.
func startPostgres() (_ *pgServer, missing string, _ error) {
	c, missing, err := newCluster(PGOptions{})
	if missing != "" || err != nil {
		return nil, missing, err
	}
	s, err := c.start()
	if err != nil {
		os.RemoveAll(c.dir)
		return nil, "", err
	}
	return s, "", nil
}

// cluster is a PostgreSQL data directory (initdb's) and how to run its
// server.
type cluster struct {
	bin, dir, data string
	env            []string
	cred           *syscall.Credential
	opts           PGOptions
}

// newCluster makes a cluster (initdb) in a new temporary directory, which
// is also the server's socket directory.
func newCluster(opts PGOptions) (_ *cluster, missing string, _ error) {
	bin := PostgresBin
	if v := os.Getenv("HARVEST_POSTGRES_BIN"); v != "" {
		bin = v
	}
	for _, p := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(bin, p)); err != nil {
			return nil, fmt.Sprintf("PostgreSQL is not installed: no %s (scripts/setup installs postgresql-15; or set $HARVEST_POSTGRES_BIN)", filepath.Join(bin, p)), nil
		}
	}
	cred, err := pgCredential()
	if err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp("", "harvest-pg-*")
	if err != nil {
		return nil, "", err
	}
	fail := func(err error) (*cluster, string, error) {
		os.RemoveAll(dir)
		return nil, "", err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	c := &cluster{bin: bin, dir: dir, data: filepath.Join(dir, "data"), cred: cred, opts: opts,
		env: []string{"PATH=" + bin + ":/usr/bin:/bin", "LC_ALL=C.UTF-8", "LANG=C.UTF-8", "TZ=UTC"}}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", c.data, "-U", "harvest", "--auth=trust",
		"--encoding=UTF8", "--locale=C.UTF-8", "--no-sync", "--no-instructions")
	initdb.Env, initdb.Dir = c.env, dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %v\n%s", err, out))
	}
	if opts.Listen != "" {
		// initdb trusts loopback only: the clients on TCP are other
		// machines (network namespaces) of the test.
		f, err := os.OpenFile(filepath.Join(c.data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err == nil {
			_, err = fmt.Fprintln(f, "host all all 0.0.0.0/0 trust")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return fail(fmt.Errorf("opening PostgreSQL to TCP clients: %w", err))
		}
	}
	return c, "", nil
}

// start starts the cluster's server, waiting until its log says it
// accepts connections.
func (c *cluster) start() (*pgServer, error) {
	listen, port := "", "5432"
	if c.opts.Listen != "" {
		h, p, err := net.SplitHostPort(c.opts.Listen)
		if err != nil {
			return nil, fmt.Errorf("testbin: PGOptions.Listen %q: %w", c.opts.Listen, err)
		}
		listen, port = h, p
	}
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", c.data, "-k", c.dir, "-p", port,
		"-c", "listen_addresses="+listen, "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "lc_messages=C")
	cmd.Env, cmd.Dir = c.env, c.dir
	// SIGQUIT when this process dies without StopPostgres (a test
	// timeout's panic): the server stops at once (its directory stays).
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGQUIT}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	s := &pgServer{dir: c.dir, port: port, cmd: cmd, exited: make(chan struct{}), log: &Buffer{}}
	startCmd := cmd.Start
	if c.opts.Start != nil {
		startCmd = func() error { return c.opts.Start(cmd) }
	}
	if err := startCmd(); err != nil {
		return nil, fmt.Errorf("starting postgres: %w", err)
	}
	ready := make(chan struct{})
	go s.readLog(stderr, ready)
	select {
	case <-ready:
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("postgres exited before it was ready: %v\n%s", cmd.ProcessState, s.log.String())
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-s.exited
		return nil, errors.New("postgres was not ready within a minute:\n" + s.log.String())
	}
}

// stop shuts the server down (fast shutdown: clients are disconnected)
// and waits until it has exited.
func (s *pgServer) stop() {
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// readLog copies the server's log to s.log until the server exits,
// closing ready when it says it accepts connections, and s.exited last.
// It lives as long as the server (IgnorePostgres).
func (s *pgServer) readLog(stderr io.Reader, ready chan struct{}) {
	defer close(s.exited)
	sc := bufio.NewScanner(stderr)
	notify := ready
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(s.log, line)
		if notify != nil && strings.Contains(line, "database system is ready to accept connections") {
			close(notify)
			notify = nil
		}
	}
	io.Copy(io.Discard, stderr)
	s.cmd.Wait()
}

// IgnorePostgres is the goleak option that ignores the goroutine of the
// server Postgres starts, which lives until StopPostgres: for a leak check
// of one test that may be the first to call Postgres.
var IgnorePostgres = goleak.IgnoreAnyFunction("github.com/harvest-dev/harvest/internal/testbin.(*pgServer).readLog")

// pgCredential is whom the server runs as: PostgreSQL refuses root, so a
// test running as root runs it as the postgres user (Debian's package
// makes one) or nobody; nil (the current user) otherwise.
func pgCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("the tests run as root and there is no postgres or nobody user to run PostgreSQL as (it refuses root)")
}
