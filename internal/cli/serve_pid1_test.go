package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// TestServeAsPID1 runs `harvest serve` as PID 1 of its own PID namespace,
// as in a container without an init, where every orphan of the namespace
// is its child and nobody else reaps it. Twenty sessions are created (each
// provisions a box and goes idle) and deleted; then no zombie may be left
// in the namespace: each destroyed box used to leave its bwrap and its
// agent (their shim, which reaps them, was killed with the box's cgroup;
// TestNoZombies in sandbox/local checks that cause alone), and PID 1 now
// reaps any orphan (serveinit.go). A SIGTERM to PID 1 reaches the server,
// which stops gracefully, and PID 1 exits with its status.
func TestServeAsPID1(t *testing.T) {
	needRoot(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		testreq.Unavailable(t, testreq.Unshare, "no unshare on PATH: %v", err)
	}
	env, home := runEnv(t)
	// No model key: serve runs the bundled demo; sessions with no prompt
	// only provision their box.
	env = append(env, "HARVEST_SERVER=", "HARVEST_TOKEN=")
	e := &serveEnv{t: t, env: env, home: home}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "HARVEST_RUN_DIR="); ok {
			e.runDir = v
		}
	}
	t.Cleanup(func() { // last: no box of this test outlives it
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p := e.provider()
		defer p.Close()
		hs, _ := p.List(ctx)
		for _, h := range hs {
			p.Destroy(ctx, h)
		}
	})
	repo := filepath.Join(testbin.TempDir(t), "repo")
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644)

	// unshare forks serve as PID 1 of a new PID namespace, with its own
	// /proc (in a new mount namespace) so it sees that namespace only.
	s := e.startWith([]string{unshare, "--pid", "--fork", "--mount-proc", "--kill-child", testbin.Harvest(t)})
	pid1 := servePID(t, s)
	nsProc := filepath.Join("/proc", strconv.Itoa(pid1), "root", "proc")
	if b, err := os.ReadFile(filepath.Join(nsProc, "1", "cmdline")); err != nil || !strings.Contains(string(b), "serve") {
		t.Fatalf("PID 1 of the namespace is not harvest serve: %q %v", b, err)
	}
	c := e.client(s)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n = 20
	for i := range n {
		v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}})
		if err != nil {
			t.Fatalf("session %d: %v\n%s", i, err, s.stderr)
		}
		follow(t, c, v.ID, 0, "idle", func(ev event.Event) bool {
			st, ok := ev.Data.(event.SessionState)
			return ok && st.State == string(store.StateIdle)
		})
		if err := c.DeleteSession(ctx, v.ID); err != nil {
			t.Fatalf("deleting session %s: %v", v.ID, err)
		}
	}
	// A zombie may be seen between a child's exit and its parent's wait;
	// one left to PID 1 that serve does not reap stays.
	var z []string
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(10 * time.Second)
	for z = zombies(t, nsProc); len(z) > 0; z = zombies(t, nsProc) {
		select {
		case <-tick.C:
		case <-limit:
			t.Fatalf("%d zombies in serve's PID namespace after %d sessions, for 10s:\n%s", len(z), n, strings.Join(z, "\n"))
		}
	}

	if err := syscall.Kill(pid1, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(time.Minute):
		t.Fatalf("harvest serve as PID 1 did not stop within a minute of a SIGTERM:\n%s", s.stderr)
	}
	if s.err != nil || !strings.Contains(s.stderr.String(), "terminated: stopping") {
		t.Errorf("after a SIGTERM to PID 1: %v, want a graceful stop (exit 0)\n%s", s.err, s.stderr)
	}
	// Listed only now: a provider outside serve's PID namespace cannot tell
	// whether its warm boxes' owner (a pid of that namespace) still runs.
	if left := e.boxes(); len(left) != 0 {
		t.Errorf("boxes left after deleting every session and stopping: %v", left)
	}
}

// servePID is the host pid of the process unshare forked (serve).
func servePID(t *testing.T, s *serveProc) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", s.cmd.Process.Pid, s.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		t.Fatalf("unshare has children %q, want one", f)
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// zombies lists the zombies under procDir (a /proc), as "pid (comm) ppid".
func zombies(t *testing.T, procDir string) []string {
	t.Helper()
	ents, err := os.ReadDir(procDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procDir, e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if i < 0 || len(f) < 2 || f[0] != "Z" {
			continue
		}
		out = append(out, fmt.Sprintf("%s ppid %s", s[:i+1], f[1]))
	}
	return out
}
