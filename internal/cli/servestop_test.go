package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/sandbox/local"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// stopRepo is a small repository for a test's sessions.
func stopRepo(t *testing.T) string {
	t.Helper()
	repo := filepath.Join(testbin.TempDir(t), "repo")
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644)
	return repo
}

// turnDone creates (or, with id, messages) a session and waits for the
// turn to finish and the session to be idle. It returns the session id.
func turnDone(t *testing.T, c *client.Client, id, repo, text string, turn int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if id == "" {
		v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: text})
		if err != nil {
			t.Fatal(err)
		}
		id = v.ID
	} else if _, err := c.Send(ctx, id, text, ""); err != nil {
		t.Fatal(err)
	}
	want := "t" + strconv.Itoa(turn)
	finished := false
	follow(t, c, id, 0, "turn "+want+" finished, then idle", func(ev event.Event) bool {
		if f, ok := ev.Data.(event.TurnFinished); ok && ev.Turn == want && f.Result == "ok" {
			finished = true
		}
		st, ok := ev.Data.(event.SessionState)
		return finished && ok && st.State == string(store.StateIdle)
	})
	return id
}

// sigterm stops s gracefully and waits for it; it must exit 0.
func sigterm(t *testing.T, s *serveProc) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("harvest serve did not stop within 2 minutes of a SIGTERM:\n%s", s.stderr)
	}
	if s.err != nil {
		t.Fatalf("harvest serve after a SIGTERM: %v\n%s", s.err, s.stderr)
	}
}

// warmDirs lists the run dirs of warm boxes on the test's run dir.
func (e *serveEnv) warmDirs() []string {
	e.t.Helper()
	ents, err := os.ReadDir(filepath.Join(e.runDir, local.Name))
	if err != nil && !os.IsNotExist(err) {
		e.t.Fatal(err)
	}
	var out []string
	for _, d := range ents {
		if strings.HasPrefix(d.Name(), "pool-") {
			out = append(out, d.Name())
		}
	}
	return out
}

// TestServeStopBoxesOnExit runs a real harvest serve three times on one
// data directory. Stopped by SIGTERM as it is by default, it leaves its
// session's box running, and the next start reattaches that very box.
// Started with a config file that says stop-boxes-on-exit (and a shutdown
// grace, seen in what it says when it stops), SIGTERM destroys the box
// and suspends the session, and a box of the server's no session holds is
// swept too; warm boxes are ended either way. The third start makes no
// box until the session's next message, which resumes it.
func TestServeStopBoxesOnExit(t *testing.T) {
	e := newServeEnv(t)
	repo := stopRepo(t)

	s1 := e.start()
	c := e.client(s1)
	id := turnDone(t, c, "", repo, "msg one", 1)
	first := e.boxes()
	if len(first) != 1 {
		t.Fatalf("boxes with one idle session: %v", first)
	}
	testbin.WaitFor(t, time.Minute, "the warm boxes", func() bool { return len(e.warmDirs()) > 0 })
	sigterm(t, s1)
	if got := e.boxes(); !slices.Equal(got, first) {
		t.Fatalf("boxes after a SIGTERM by default: %v, want the session's %v left for the next start", got, first)
	}
	if w := e.warmDirs(); len(w) != 0 {
		t.Errorf("warm boxes outlived a graceful stop: %v", w)
	}

	cfg := writeConfig(t, "# stopping for good\nstop-boxes-on-exit: true\nshutdown-grace: 7s\n")
	s2 := e.start("--config", cfg)
	c = e.client(s2)
	turnDone(t, c, id, repo, "msg two", 2)
	if got := e.boxes(); !slices.Equal(got, first) {
		t.Fatalf("boxes after the restart: %v, want %v reattached", got, first)
	}
	// A box of this server's that no session holds (a crash between
	// starting a box and storing its handle): the stop sweeps it.
	serverID, err := os.ReadFile(filepath.Join(e.home, serverIDFile))
	if err != nil {
		t.Fatal(err)
	}
	stray := local.New(local.Config{RunDir: filepath.Join(e.runDir, local.Name), AgentBinary: testbin.Agent(t), Owner: strings.TrimSpace(string(serverID))})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := stray.Start(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	sb.Close()
	stray.Close()
	testbin.WaitFor(t, time.Minute, "the warm boxes", func() bool { return len(e.warmDirs()) > 0 })
	sigterm(t, s2)
	for _, want := range []string{"running turns have 7s to finish", "--stop-boxes-on-exit: then the sessions' boxes are destroyed", "destroyed 1 more boxes of this server's"} {
		if !strings.Contains(s2.stderr.String(), want) {
			t.Errorf("serve's stderr lacks %q:\n%s", want, s2.stderr)
		}
	}
	if got := e.boxes(); len(got) != 0 {
		t.Fatalf("boxes after a SIGTERM with stop-boxes-on-exit: %v, want none", got)
	}
	if w := e.warmDirs(); len(w) != 0 {
		t.Errorf("warm boxes outlived a graceful stop: %v", w)
	}

	s3 := e.start()
	c = e.client(s3)
	v, err := c.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if v.State != wire.State(store.StateSuspended) {
		t.Fatalf("the session after a stop for good: %s, want suspended", v.State)
	}
	if got := e.boxes(); len(got) != 0 {
		t.Fatalf("the next start made boxes for a suspended session: %v", got)
	}
	turnDone(t, c, id, repo, "msg three", 3)
	if got := e.boxes(); len(got) != 1 || got[0] == first[0] {
		t.Errorf("boxes once the message resumed the session: %v, want a new one", got)
	}
}

// TestSandboxPrune: two servers on one machine, A running and B stopped
// (SIGTERM: its session's box left for its next start), a box kept by
// harvest sandbox run --keep, and A's warm boxes. prune --dry-run says
// what would go and destroys nothing; prune destroys B's box and the kept
// one, and nothing of A's, whose session goes on; B's next start gives its
// session a new box.
func TestSandboxPrune(t *testing.T) {
	e := newServeEnv(t)
	repo := stopRepo(t)
	sA := e.start()
	cA := e.client(sA)
	idA := turnDone(t, cA, "", repo, "msg a", 1)
	boxA := e.boxes()
	if len(boxA) != 1 {
		t.Fatalf("boxes of A: %v", boxA)
	}

	dataB := e.dataDir()
	sB := e.start("--data", dataB)
	cB := clientOf(t, sB, dataB)
	idB := turnDone(t, cB, "", repo, "msg b", 1)
	boxB := sessionBox(t, e.boxes(), idB)
	sigterm(t, sB)

	code, _, errs := runHarvest(t, e.env, "", "sandbox", "run", "--keep", "--", "true")
	m := regexp.MustCompile(`box (\S+) kept`).FindStringSubmatch(errs)
	if code != 0 || m == nil {
		t.Fatalf("harvest sandbox run --keep: exit %d\n%s", code, errs)
	}
	kept := m[1]
	testbin.WaitFor(t, time.Minute, "A's warm boxes", func() bool { return len(e.warmDirs()) > 0 })
	warmA := e.warmDirs()
	all := e.boxes()
	for _, b := range []string{boxA[0], boxB, kept} {
		if !slices.Contains(all, b) {
			t.Fatalf("box %s is not there before the prune: %v", b, all)
		}
	}

	prune := func(args ...string) map[string]string {
		t.Helper()
		code, out, errs := runHarvest(t, e.env, "", append([]string{"sandbox", "prune"}, args...)...)
		if code != 0 {
			t.Fatalf("harvest sandbox prune %v: exit %d\n%s%s", args, code, out, errs)
		}
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			f := regexp.MustCompile(`\s{2,}`).Split(line, -1)
			if len(f) == 4 {
				got[strings.TrimSuffix(f[2], " (warm)")] = f[0]
			}
		}
		t.Logf("prune %v:\n%s%s", args, out, errs)
		return got
	}
	want := map[string]string{boxA[0]: "kept: its owner runs", boxB: "would destroy", kept: "would destroy"}
	for _, w := range warmA {
		want[w] = "kept: its owner runs"
	}
	got := prune("--dry-run")
	for b, act := range want {
		if got[b] != act {
			t.Errorf("dry run: box %s: %q, want %q", b, got[b], act)
		}
	}
	if after := e.boxes(); !slices.Equal(after, all) {
		t.Fatalf("a dry run destroyed boxes: %v, then %v", all, after)
	}

	got = prune()
	for b, act := range want {
		if act == "would destroy" {
			act = "destroyed"
		}
		if got[b] != act {
			t.Errorf("prune: box %s: %q, want %q", b, got[b], act)
		}
	}
	after := e.boxes()
	if slices.Contains(after, boxB) || slices.Contains(after, kept) || !slices.Contains(after, boxA[0]) {
		t.Fatalf("boxes after the prune: %v, want %s left and %s, %s gone", after, boxA[0], boxB, kept)
	}
	for _, w := range warmA {
		if _, err := os.Stat(filepath.Join(e.runDir, local.Name, w)); err != nil {
			t.Errorf("A's warm box %s: %v", w, err)
		}
	}
	turnDone(t, cA, idA, repo, "msg a again", 2)
	if got := e.boxes(); !slices.Contains(got, boxA[0]) {
		t.Errorf("A's session lost its box: %v", got)
	}

	sB = e.start("--data", dataB)
	cB = clientOf(t, sB, dataB)
	turnDone(t, cB, idB, repo, "msg b again", 2)
	if b := sessionBox(t, e.boxes(), idB); b == boxB {
		t.Errorf("B's session has box %s again, which the prune destroyed", b)
	}
}

// clientOf is a client of the server s whose data directory is data.
func clientOf(t *testing.T, s *serveProc, data string) *client.Client {
	t.Helper()
	tok, err := os.ReadFile(filepath.Join(data, adminTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(s.url, strings.TrimSpace(string(tok)), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sessionBox is the one box of session id among boxes.
func sessionBox(t *testing.T, boxes []string, id string) string {
	t.Helper()
	var out []string
	for _, b := range boxes {
		if m := boxSession.FindStringSubmatch(b); m != nil && m[1] == id {
			out = append(out, b)
		}
	}
	if len(out) != 1 {
		t.Fatalf("boxes of session %s: %v among %v, want one", id, out, boxes)
	}
	return out[0]
}

// TestServeWarmBoxesSamePID runs harvest serve twice in a fresh PID
// namespace, as a container restarted, under the same pid both times (its
// PID 1, a shell, sets the namespace's next pid before it starts serve).
// The first is killed with its whole namespace, which kills the warm
// boxes' supervisors too, so their cgroups and run dirs are left. The
// second, under the same pid, must not take them for its own (a pid in
// their names would say they are, and its own would collide with them):
// it removes them, and its own warm boxes have names of their own.
func TestServeWarmBoxesSamePID(t *testing.T) {
	needRoot(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		testreq.Unavailable(t, testreq.Unshare, "no unshare on PATH: %v", err)
	}
	env, home := runEnv(t)
	env = append(env, "HARVEST_SERVER=", "HARVEST_TOKEN=")
	e := &serveEnv{t: t, env: env, home: home}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "HARVEST_RUN_DIR="); ok {
			e.runDir = v
		}
	}
	t.Cleanup(func() { // last: no box of this test outlives it
		p := e.provider()
		defer p.Close()
		stacktest.DestroyAll(t, p)
	})
	const samePID = 100
	wrapper := []string{unshare, "--pid", "--fork", "--mount-proc", "--kill-child",
		"sh", "-c", `echo ` + strconv.Itoa(samePID-1) + ` > /proc/sys/kernel/ns_last_pid && "$0" "$@"; exit $?`, testbin.Harvest(t)}
	warm := func(what string, n int, not []string) []string {
		t.Helper()
		var got []string
		testbin.WaitFor(t, 2*time.Minute, what, func() bool {
			got = nil
			for _, w := range e.warmDirs() {
				_, err := os.Stat(filepath.Join(e.runDir, local.Name, w, "agent.sock"))
				if err == nil && !slices.Contains(not, w) {
					got = append(got, w)
				}
			}
			return len(got) >= n
		})
		return got
	}
	serverPID := func(s *serveProc) int {
		t.Helper()
		st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(hostPID(t, servePID(t, s))), "status"))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^NSpid:\s+\d+\s+(\d+)$`).FindSubmatch(st)
		if m == nil {
			t.Fatalf("no pid in the namespace in %s", st)
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	s1 := e.startWith(wrapper)
	pid := serverPID(s1)
	if pid != samePID {
		t.Fatalf("serve is PID %d in its namespace, want %d", pid, samePID)
	}
	old := warm("the first server's warm boxes", 2, nil)
	for _, w := range old {
		if strings.Contains(w, "-"+strconv.Itoa(pid)+"-") {
			t.Errorf("warm box %s is named by the server's pid %d", w, pid)
		}
	}
	if err := syscall.Kill(servePID(t, s1), syscall.SIGKILL); err != nil { // PID 1: the whole namespace dies
		t.Fatal(err)
	}
	s1.wait()
	for _, w := range old {
		if _, err := os.Stat(filepath.Join(e.runDir, local.Name, w)); err != nil {
			t.Fatalf("warm box %s left nothing when its namespace died (%v): nothing to test", w, err)
		}
	}

	s2 := e.startWith(wrapper)
	if p := serverPID(s2); p != pid {
		t.Fatalf("the second server is PID %d in its namespace, the first was %d: not the case under test", p, pid)
	}
	mine := warm("the second server's warm boxes", 2, old)
	testbin.WaitFor(t, time.Minute, "the dead server's warm boxes removed", func() bool {
		for _, w := range e.warmDirs() {
			if slices.Contains(old, w) {
				return false
			}
		}
		return true
	})
	t.Logf("the first server's warm boxes %v, the second's %v (both PID %d)", old, mine, pid)
	if err := syscall.Kill(hostPID(t, servePID(t, s2)), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s2.exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the second server did not stop:\n%s", s2.stderr)
	}
	if w := e.warmDirs(); len(w) != 0 {
		t.Errorf("warm boxes outlived the second server's graceful stop: %v", w)
	}
}

// hostPID is the host pid of the one child of process pid (forked by
// whichever of its threads).
func hostPID(t *testing.T, pid int) int {
	t.Helper()
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "children"))
	var f []string
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		f = append(f, strings.Fields(string(b))...)
	}
	if err != nil || len(f) != 1 {
		t.Fatalf("process %d has children %q (%v), want one", pid, f, err)
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

// poolDisks lists the images of the session disks the server of data
// keeps ready (DATA/disks/pool).
func poolDisks(t *testing.T, data string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(data, "disks", "pool"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, d := range ents {
		if strings.HasSuffix(d.Name(), ".img") {
			out = append(out, d.Name())
		}
	}
	return out
}

// TestServeDiskPool: a server keeps --pool session disks made ahead of
// demand; a session takes one (and the pool makes another); a kill -9
// leaves them, harvest sandbox prune removes them (a dry run only says
// so), and so does the next start; a graceful stop removes its own.
func TestServeDiskPool(t *testing.T) {
	e := newServeEnv(t)
	repo := stopRepo(t)
	data := e.home
	s := e.start()
	c := e.client(s)
	testbin.WaitFor(t, time.Minute, "two disks ready", func() bool { return len(poolDisks(t, data)) == 2 })
	ready := poolDisks(t, data)
	id := turnDone(t, c, "", repo, "msg one", 1)
	if _, err := os.Stat(filepath.Join(data, "disks", "session", id+".img")); err != nil {
		t.Fatalf("the session's disk: %v", err)
	}
	testbin.WaitFor(t, time.Minute, "the pool refilled", func() bool {
		now := poolDisks(t, data)
		return len(now) == 2 && !slices.Equal(now, ready)
	})
	if left := len(slices.DeleteFunc(poolDisks(t, data), func(n string) bool { return !slices.Contains(ready, n) })); left != 1 {
		t.Errorf("the session did not take a ready disk: %v were ready, %v are", ready, poolDisks(t, data))
	}

	kill := func(s *serveProc) []string {
		t.Helper()
		testbin.WaitFor(t, time.Minute, "two disks ready", func() bool { return len(poolDisks(t, data)) == 2 })
		if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		s.wait()
		dead := poolDisks(t, data)
		if len(dead) != 2 {
			t.Fatalf("a killed server's ready disks: %v, want the 2 left", dead)
		}
		return dead
	}
	prune := func(args ...string) string {
		t.Helper()
		code, out, errs := runHarvest(t, e.env, "", append([]string{"sandbox", "prune"}, args...)...)
		if code != 0 {
			t.Fatalf("harvest sandbox prune %v: exit %d\n%s%s", args, code, out, errs)
		}
		return out
	}

	// Killed: the next start removes the dead server's ready disks.
	dead := kill(s)
	s = e.start()
	testbin.WaitFor(t, time.Minute, "the new server's disks", func() bool { return len(poolDisks(t, data)) == 2 })
	for _, n := range poolDisks(t, data) {
		if slices.Contains(dead, n) {
			t.Errorf("the killed server's disk %s outlived the next start", n)
		}
	}

	// Killed again: prune removes them.
	dead = kill(s)
	out := prune("--dry-run")
	for _, n := range dead {
		if !regexp.MustCompile(`would destroy\s+disk\s+\S*` + regexp.QuoteMeta(n) + ` \(warm\)`).MatchString(out) {
			t.Errorf("prune --dry-run does not say it would remove %s:\n%s", n, out)
		}
	}
	if got := poolDisks(t, data); !slices.Equal(got, dead) {
		t.Fatalf("a dry run removed disks: %v, then %v", dead, got)
	}
	out = prune()
	if got := poolDisks(t, data); len(got) != 0 {
		t.Fatalf("disks after prune: %v\n%s", got, out)
	}
	attached, err := disk.Attached()
	if err != nil {
		t.Fatal(err)
	}
	for img := range attached {
		if strings.Contains(img, "/disks/pool/") && strings.HasPrefix(img, realDir(t, data)) {
			t.Errorf("%s still on a loop device after prune", img)
		}
	}

	// A graceful stop takes its own with it.
	s = e.start()
	testbin.WaitFor(t, time.Minute, "two disks ready", func() bool { return len(poolDisks(t, data)) == 2 })
	sigterm(t, s)
	if got := poolDisks(t, data); len(got) != 0 {
		t.Errorf("ready disks outlived a graceful stop: %v", got)
	}
}

func realDir(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
