package sandboxtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
)

func readHostFile(p string) ([]byte, error) { return os.ReadFile(p) }

// uniqueSleep returns a sleep duration no other test run uses, so process
// listings can be matched exactly even on the host backend.
func uniqueSleep() int {
	var b [2]byte
	rand.Read(b[:])
	return 100000 + int(b[0])<<8 + int(b[1])*3
}

// Run runs the conformance suite against b.
func Run(t *testing.T, b Backend) {
	s := newSuite(t, b)
	spec, ws := withWorkspace(t)
	s.waitWarm(t)
	shared := s.start(t, spec) // for checks that do not damage the box

	t.Run("Exec", func(t *testing.T) { s.testExec(t, shared) })
	t.Run("Env", func(t *testing.T) { s.testEnv(t) })
	t.Run("Stdin", func(t *testing.T) { testStdin(t, shared) })
	t.Run("BigOutput", func(t *testing.T) { testBigOutput(t, shared) })
	t.Run("OutputLimit", func(t *testing.T) { testOutputLimit(t, shared) })
	t.Run("PTY", func(t *testing.T) { testPTY(t, shared) })
	t.Run("Signals", func(t *testing.T) { testSignals(t, shared) })
	t.Run("KillTree", func(t *testing.T) { testKillTree(t, shared) })
	t.Run("Timeout", func(t *testing.T) { testTimeout(t, shared) })
	t.Run("BackgroundSurvives", func(t *testing.T) { testBackground(t, shared) })
	t.Run("ReapsOrphans", func(t *testing.T) { testReap(t, shared) })
	t.Run("Files", func(t *testing.T) { testFiles(t, shared, ws) })
	t.Run("GlobGrep", func(t *testing.T) { testGlobGrep(t, shared) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, shared) })
	t.Run("Workspaces", func(t *testing.T) { s.testWorkspaces(t) })
	t.Run("Mounts", func(t *testing.T) { s.testMounts(t) })
	t.Run("Listen", func(t *testing.T) { testListen(t, shared, s.b.Isolated) })
	t.Run("ListenBoxGone", func(t *testing.T) { s.testListenBoxGone(t) })
	t.Run("Dial", func(t *testing.T) { testDial(t, shared) })
	t.Run("TCPSplice", func(t *testing.T) { s.testSplice(t, shared) })
	t.Run("RecoverAndAttach", func(t *testing.T) { s.testRecover(t) })
	t.Run("Stop", func(t *testing.T) { s.testStop(t) })
	t.Run("DestroyIdempotent", func(t *testing.T) { s.testDestroy(t) })
	t.Run("TimeLimit", func(t *testing.T) { s.testTimeLimit(t) })
	t.Run("Fence", func(t *testing.T) { s.testFence(t) })
	t.Run("BadInput", func(t *testing.T) { s.testBadInput(t) })
}

func (s *suite) testExec(t *testing.T, sb *sandbox.Sandbox) {
	r := sh(t, sb, "echo out; echo err >&2; exit 7")
	if r.st.Code != 7 || r.out() != "out" || strings.TrimSpace(r.stderr) != "err" {
		t.Fatalf("got %v stdout=%q stderr=%q", r.st, r.stdout, r.stderr)
	}
	if got := mustOK(t, sb, "pwd"); got != sb.WorkspacePath("w") {
		t.Errorf("default workdir = %q, want %q", got, sb.WorkspacePath("w"))
	}
	// One plain (unsynchronized) writer for both streams gets one Write at
	// a time, as with os/exec: under -race a concurrent Write is a failure,
	// and here every line arrives whole.
	var both bytes.Buffer
	st, err := sb.Run(ctxFor(t), &sandbox.Cmd{Args: []string{"sh", "-c", `i=0; while [ $i -lt 2000 ]; do echo out-line; echo err-line >&2; i=$((i+1)); done`}, Stdout: &both, Stderr: &both})
	if err != nil || !st.Success() {
		t.Fatalf("one writer for both streams: %v %v", st, err)
	}
	if o, e := strings.Count(both.String(), "out-line\n"), strings.Count(both.String(), "err-line\n"); o != 2000 || e != 2000 {
		t.Errorf("one writer for both streams: %d stdout and %d stderr lines, want 2000 each", o, e)
	}
	if got := runCmd(t, sb, &sandbox.Cmd{Args: []string{"pwd"}, Dir: "/tmp"}).out(); got != "/tmp" {
		t.Errorf("Dir: pwd = %q", got)
	}
	if !s.b.Isolated {
		return
	}
	if got := mustOK(t, sb, "id", "-u"); got != fmt.Sprint(sandbox.DefaultUID) {
		t.Errorf("uid = %s, want %d", got, sandbox.DefaultUID)
	}
	// A missing command is a clear start error, not a hang or a crash.
	_, err = sb.Start(ctxFor(t), &sandbox.Cmd{Args: []string{"no-such-command-xyz"}})
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing command: err = %v", err)
	}
	_, err = sb.Start(ctxFor(t), &sandbox.Cmd{Args: []string{"true"}, Dir: "/no/such/dir"})
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing dir: err = %v", err)
	}
}

func (s *suite) testEnv(t *testing.T) {
	spec, _ := withWorkspace(t)
	spec.Env = map[string]string{"HARVEST_TEST_VAR": "box value", "PATH": "/usr/bin:/bin"}
	sb := s.start(t, spec)
	if got := mustOK(t, sb, "sh", "-c", "echo $HARVEST_TEST_VAR"); got != "box value" {
		t.Errorf("spec env: %q", got)
	}
	r := runCmd(t, sb, &sandbox.Cmd{Args: []string{"sh", "-c", "echo $HARVEST_TEST_VAR $EXTRA"}, Env: []string{"HARVEST_TEST_VAR=override", "EXTRA=1"}})
	if r.out() != "override 1" {
		t.Errorf("cmd env: %q", r.out())
	}
	// Nothing of Harvest's own environment leaks in.
	env := mustOK(t, sb, "env")
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PATH" || k == "HOME" || k == "LANG" || k == "TERM" || k == "USER" || k == "PWD" || k == "SHLVL" || k == "_" || k == "HOSTNAME" {
			continue
		}
		if strings.Contains(env, kv) {
			t.Errorf("host environment variable %s leaked into the box", k)
		}
	}
}

func testStdin(t *testing.T, sb *sandbox.Sandbox) {
	data := make([]byte, 3<<20+17) // several windows
	rand.Read(data)
	var out bytes.Buffer
	r, err := sb.Run(ctxFor(t), &sandbox.Cmd{Args: []string{"cat"}, Stdin: bytes.NewReader(data), Stdout: &out})
	if err != nil || !r.Success() {
		t.Fatalf("cat: %v %v", r, err)
	}
	if !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("stdin round trip: got %d bytes, want %d (sha %x vs %x)", out.Len(), len(data), sha256.Sum256(out.Bytes()), sha256.Sum256(data))
	}
	// A command that does not read stdin still finishes.
	if st := runCmd(t, sb, &sandbox.Cmd{Args: []string{"true"}, Stdin: bytes.NewReader(data)}).st; !st.Success() {
		t.Errorf("true with unread stdin: %v", st)
	}
}

// slowWriter accepts writes only as fast as the test lets it.
type slowWriter struct {
	n    int64
	gate chan struct{}
}

func (w *slowWriter) Write(p []byte) (int, error) {
	<-w.gate
	w.n += int64(len(p))
	return len(p), nil
}

func testBigOutput(t *testing.T, sb *sandbox.Sandbox) {
	// 64 MiB through the flow-controlled stream, byte-exact.
	h := sha256.New()
	st := runCmd(t, sb, &sandbox.Cmd{Args: []string{"sh", "-c", "head -c 67108864 /dev/zero"}, Stdout: h}).st
	if !st.Success() {
		t.Fatal(st)
	}
	want := sha256.Sum256(make([]byte, 64<<20))
	if !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("64 MiB of output arrived corrupted")
	}
	// A stalled consumer blocks only that command: the box keeps answering
	// and the agent's memory stays bounded.
	w := &slowWriter{gate: make(chan struct{})}
	p, err := sb.Start(ctxFor(t), &sandbox.Cmd{Args: []string{"sh", "-c", "head -c 50000000 /dev/zero"}, Stdout: w})
	if err != nil {
		t.Fatal(err)
	}
	checkAgentBounded(t, sb, "while a consumer stalls: output is not bounded")
	select {
	case <-p.Done():
		t.Fatal("the command finished although nobody read its output")
	default:
	}
	close(w.gate)
	if st, err := p.Wait(ctxFor(t)); err != nil || !st.Success() || w.n != 50000000 {
		t.Fatalf("after unblocking: %v %v, %d bytes", st, err, w.n)
	}
}

func testOutputLimit(t *testing.T, sb *sandbox.Sandbox) {
	var out testbin.Buffer
	st := runCmd(t, sb, &sandbox.Cmd{Args: []string{"sh", "-c", "head -c 20000000 /dev/zero; echo done >&2"}, Stdout: &out, OutputLimit: 1 << 20}).st
	if !st.Success() {
		t.Fatal(st)
	}
	if out.Len() != 1<<20 {
		t.Errorf("delivered %d bytes, want exactly the 1 MiB limit", out.Len())
	}
	if st.Dropped != 20000000-(1<<20) {
		t.Errorf("Dropped = %d, want %d", st.Dropped, 20000000-(1<<20))
	}
}

func testPTY(t *testing.T, sb *sandbox.Sandbox) {
	var out testbin.Buffer
	pr, pw := io.Pipe()
	p, err := sb.Start(ctxFor(t), &sandbox.Cmd{
		Args:   []string{"sh", "-c", "tty; stty size; read line; stty size; echo got:$line"},
		Stdin:  pr,
		Stdout: &out,
		TTY:    &sandbox.TTYSize{Rows: 30, Cols: 90},
	})
	if err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, 10*time.Second, "the first stty size", func() bool { return strings.Contains(out.String(), "30 90") })
	if err := p.Resize(ctxFor(t), 40, 100); err != nil {
		t.Fatal(err)
	}
	io.WriteString(pw, "hello\n")
	st, err := p.Wait(ctxFor(t))
	pw.Close()
	if err != nil || !st.Success() {
		t.Fatalf("%v %v\n%s", st, err, out.String())
	}
	o := out.String()
	if !strings.Contains(o, "/dev/pts/") || !strings.Contains(o, "40 100") || !strings.Contains(o, "got:hello") {
		t.Errorf("pty output: %q", o)
	}
}

func testSignals(t *testing.T, sb *sandbox.Sandbox) {
	var out testbin.Buffer
	p, err := sb.Start(ctxFor(t), &sandbox.Cmd{Args: []string{"sh", "-c", `trap 'echo got-term; exit 3' TERM; echo ready; while :; do sleep 1; done`}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, 10*time.Second, "the trap to be set", func() bool { return strings.Contains(out.String(), "ready") })
	if err := p.Signal(ctxFor(t), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait(ctxFor(t))
	if err != nil || st.Code != 3 || !strings.Contains(out.String(), "got-term") {
		t.Fatalf("%v %v %q", st, err, out.String())
	}
	p, err = sb.Start(ctxFor(t), &sandbox.Cmd{Args: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Signal(ctxFor(t), syscall.SIGKILL)
	if st, _ := p.Wait(ctxFor(t)); st.Signal != syscall.SIGKILL || st.ShellCode() != 137 {
		t.Errorf("SIGKILL: %v", st)
	}
	if err := p.Signal(ctxFor(t), syscall.SIGTERM); err != nil {
		t.Errorf("signalling an exited process: %v", err)
	}
}

func testKillTree(t *testing.T, sb *sandbox.Sandbox) {
	var out testbin.Buffer
	// Unique durations: on the host backend ps sees the whole machine.
	n := uniqueSleep()
	a, b, c := fmt.Sprint(n), fmt.Sprint(n+1), fmt.Sprint(n+2)
	// Children in their own process groups and sessions too: kill must find
	// descendants, and daemons that left the tree (setsid forks).
	p, err := sb.Start(ctxFor(t), &sandbox.Cmd{
		Args:   []string{"sh", "-c", "sleep " + a + " & setsid sleep " + b + " & sh -c 'sleep " + c + "' & echo started; wait"},
		Stdout: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, 10*time.Second, "children to start", func() bool {
		ps := mustOK(t, sb, "ps", "-eo", "args")
		return strings.Contains(out.String(), "started") && strings.Contains(ps, "sleep "+a) && strings.Contains(ps, "sleep "+b) && strings.Contains(ps, "sleep "+c)
	})
	start := time.Now()
	if err := p.Kill(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, 5*time.Second, "the whole tree to die", func() bool {
		ps := mustOK(t, sb, "ps", "-eo", "args")
		return !strings.Contains(ps, "sleep "+a) && !strings.Contains(ps, "sleep "+b) && !strings.Contains(ps, "sleep "+c)
	})
	if d := time.Since(start); d > time.Second {
		t.Errorf("killing the tree took %v, want under a second", d)
	}
}

func testTimeout(t *testing.T, sb *sandbox.Sandbox) {
	r := runCmd(t, sb, &sandbox.Cmd{Args: []string{"sh", "-c", "sleep 1000 & sleep 1000"}, Timeout: 300 * time.Millisecond})
	if !r.st.TimedOut || r.st.Signal != syscall.SIGKILL {
		t.Errorf("timeout: %v", r.st)
	}
	// Context cancellation kills too (what Ctrl-C on a tool does).
	ctx, cancel := context.WithCancel(ctxFor(t))
	var out testbin.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "echo go; sleep 1000"}, Stdout: &out})
		done <- err
	}()
	testbin.WaitFor(t, 10*time.Second, "the command to start", func() bool { return out.Len() > 0 })
	start := time.Now()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run after cancel: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("cancel took %v", d)
	}
}

func testBackground(t *testing.T, sb *sandbox.Sandbox) {
	// The shell exits at once; the background job holds the pipe but must not
	// hold back the exit status, and it keeps running between calls.
	start := time.Now()
	n := fmt.Sprint(uniqueSleep())
	st := sh(t, sb, "sleep "+n+" & echo bg").st
	if !st.Success() {
		t.Fatal(st)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a background child held the exit for %v", d)
	}
	if !strings.Contains(mustOK(t, sb, "ps", "-eo", "args"), "sleep "+n) {
		t.Error("the background process did not survive between calls")
	}
	sh(t, sb, "pkill -f 'sleep "+n+"' || true")
}

// testReap: double-forked children are orphaned to the agent (PID 1, or a
// subreaper on the host backend), which must reap them: no zombies pile up.
func testReap(t *testing.T, sb *sandbox.Sandbox) {
	n := fmt.Sprint(uniqueSleep())
	mustOK(t, sb, "sh", "-c", "for i in 1 2 3 4 5 6 7 8; do (sh -c 'exit 0' &) ; done; (exec -a harvest-orphan-"+n+" sleep 0.01 &) ; true")
	// Only the agent's own zombies count: on the host backend ps shows the
	// whole machine, other tests' short-lived zombies included.
	agent := strconv.Itoa(sb.AgentPID())
	testbin.WaitFor(t, 10*time.Second, "orphans to be reaped", func() bool {
		ps := mustOK(t, sb, "ps", "-eo", "stat=,ppid=,args=")
		for _, line := range strings.Split(ps, "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && strings.HasPrefix(f[0], "Z") && f[1] == agent {
				return false
			}
		}
		return true
	})
}

func (s *suite) testWorkspaces(t *testing.T) {
	a := testbin.Workspace(t, 1234, 1234)
	b := testbin.Workspace(t, 1234, 1234)
	os.WriteFile(filepath.Join(a, "from-host"), []byte("a"), 0o644)
	sb := s.start(t, sandbox.Spec{
		User:       sandbox.User{UID: 1234, GID: 1234},
		Workspaces: []sandbox.Workspace{{Name: "alpha", HostPath: a}, {Name: "beta", HostPath: b}},
	})
	if got := mustOK(t, sb, "cat", sb.WorkspacePath("alpha")+"/from-host"); got != "a" {
		t.Errorf("alpha: %q", got)
	}
	mustOK(t, sb, "touch", sb.WorkspacePath("beta")+"/from-box")
	if _, err := os.Stat(filepath.Join(b, "from-box")); err != nil {
		t.Errorf("beta: %v", err)
	}
	if s.b.Isolated {
		if got := mustOK(t, sb, "id", "-u"); got != "1234" {
			t.Errorf("custom user: uid %s", got)
		}
		if got := mustOK(t, sb, "pwd"); got != "/workspace/alpha" {
			t.Errorf("workdir: %s", got)
		}
	}
}

func (s *suite) testRecover(t *testing.T) {
	spec, _ := withWorkspace(t)
	sb := s.start(t, spec)
	var out testbin.Buffer
	// It prints "during" only once told to (after the disconnect), then marks
	// that it did: that output can only reach us through the agent's ring.
	p, err := sb.Start(ctxFor(t), &sandbox.Cmd{
		Args:   []string{"sh", "-c", "echo before; while [ ! -e go ]; do sleep 0.02; done; echo during; touch done; sleep 1000"},
		Stdout: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, 10*time.Second, "output", func() bool { return out.Len() > 0 })
	h := sb.Handle()
	sb.Close() // as if harvest went away

	// A new provider instance over the same state, as after a restart.
	p2 := s.b.New(t, s.runDir)
	sb2, err := p2.Recover(ctxFor(t), h)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	defer sb2.Close()
	if got := mustOK(t, sb2, "echo", "recovered"); got != "recovered" {
		t.Fatal(got)
	}
	procs, err := sb2.Ps(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, pi := range procs {
		if pi.Proc == p.ID() && pi.Exit == nil {
			found = true
		}
	}
	if !found {
		t.Fatalf("the running process is not listed after recovery: %+v", procs)
	}
	if err := sb2.WriteFile(ctxFor(t), sb2.WorkspacePath("w")+"/go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, 10*time.Second, "the detached process to print", func() bool {
		_, err := sb2.Stat(ctxFor(t), sb2.WorkspacePath("w")+"/done")
		return err == nil
	})
	var out2 testbin.Buffer
	ap, err := sb2.Attach(ctxFor(t), p.ID(), &out2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ap.Kill(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	st, err := ap.Wait(ctxFor(t))
	if err != nil || st.Signal != syscall.SIGKILL {
		t.Fatalf("attached wait: %v %v", st, err)
	}
	if out2.String() != "during\n" {
		t.Errorf("output made while detached was not replayed exactly: %q", out2.String())
	}
}

func (s *suite) testStop(t *testing.T) {
	spec, _ := withWorkspace(t)
	sb := s.start(t, spec)
	var out testbin.Buffer
	p, err := sb.Start(ctxFor(t), &sandbox.Cmd{Args: []string{"sh", "-c", `trap 'echo bye; exit 0' TERM; echo up; while :; do sleep 1; done`}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, 10*time.Second, "the trap", func() bool { return out.Len() > 0 })
	if err := sb.Stop(ctxFor(t), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Wait(ctxFor(t))
	if !strings.Contains(out.String(), "bye") {
		t.Errorf("the process did not get SIGTERM first: %q", out.String())
	}
	if _, err := s.p.Recover(ctxFor(t), sb.Handle()); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Recover after Stop: %v", err)
	}
}

func (s *suite) testDestroy(t *testing.T) {
	spec, _ := withWorkspace(t)
	sb := s.startUnmanaged(t, spec)
	h := sb.Handle()
	if err := sb.Destroy(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(ctxFor(t)); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
	if err := s.b.New(t, s.runDir).Destroy(ctxFor(t), h); err != nil {
		t.Errorf("Destroy from a fresh provider: %v", err)
	}
	if _, err := sb.Run(ctxFor(t), &sandbox.Cmd{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("Run on a destroyed box: %v", err)
	}
	if _, err := s.p.Recover(ctxFor(t), h); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Recover of a destroyed box: %v", err)
	}
	if s.b.Leftovers != nil {
		if left := s.b.Leftovers(t, s.p, h); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	}
}

func (s *suite) testTimeLimit(t *testing.T) {
	spec, _ := withWorkspace(t)
	spec.Timeout = 2 * time.Second
	sb := s.start(t, spec)
	p, err := sb.Start(ctxFor(t), &sandbox.Cmd{Args: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait(ctxFor(t))
	if err == nil {
		// The agent may deliver the exit (SIGTERM) before it goes; the
		// status then says that the box's limit killed the command.
		if st.Signal == 0 || !st.BoxTimedOut {
			t.Errorf("the status of a command the time limit ended: %v, want killed (the box's time limit)", st)
		}
		err = waitGone(t, sb)
	}
	if !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("after the time limit: %v", err)
	}
	if _, err := s.p.Recover(ctxFor(t), sb.Handle()); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Recover after the time limit: %v", err)
	}
}

// waitGone waits until the connection to the box drops.
func waitGone(t testing.TB, sb *sandbox.Sandbox) error {
	var err error
	testbin.WaitFor(t, 30*time.Second, "the box to end", func() bool {
		_, err = sb.Info(ctxFor(t))
		return err != nil
	})
	return err
}

func (s *suite) testBadInput(t *testing.T) {
	ctx := ctxFor(t)
	before := s.listIDs(t)
	for name, spec := range map[string]sandbox.Spec{
		"root user":         {User: sandbox.User{UID: 0, GID: 1000}},
		"missing workspace": {Workspaces: []sandbox.Workspace{{Name: "x", HostPath: "/no/such/dir/anywhere"}}},
		"bad name":          {Workspaces: []sandbox.Workspace{{Name: "../etc", HostPath: "/tmp"}}},
		"tiny memory":       {Limits: sandbox.Limits{MemoryBytes: 1 << 20}},
		"network":           {Network: "host"},
	} {
		if s.b.Spec != nil {
			s.b.Spec(&spec)
		}
		_, err := s.p.Start(ctx, spec)
		var se *sandbox.SpecError
		if !errors.As(err, &se) {
			t.Errorf("%s: want a SpecError, got %v", name, err)
		}
	}
	_, err := s.p.Start(ctx, sandbox.Spec{Workspaces: []sandbox.Workspace{{Name: "x", HostPath: "/no/such/dir/anywhere"}}})
	if err == nil || !strings.Contains(err.Error(), "does not exist: create it") {
		t.Errorf("missing workspace: %v", err)
	}
	mounts := badMountSpecs(t)
	if s.b.Name == "local" {
		// Local boxes share the host's /usr (and /bin, /lib...) as they are.
		mounts["mount: in the host's /usr"] = struct {
			spec sandbox.Spec
			want string
		}{sandbox.Spec{Mounts: []sandbox.Mount{{HostPath: testbin.TempDir(t), BoxPath: "/usr/local/harvest-x"}}}, "the host's own"}
	}
	for name, c := range mounts {
		if s.b.Spec != nil {
			s.b.Spec(&c.spec)
		}
		_, err := s.p.Start(ctx, c.spec)
		var se *sandbox.SpecError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a SpecError saying %q", name, err, c.want)
		}
	}
	// A box that failed to start leaves nothing behind.
	if after := s.listIDs(t); after != before {
		t.Errorf("failed starts left boxes behind: before %q, after %q", before, after)
	}
}

func (s *suite) listIDs(t testing.TB) string {
	l, ok := s.p.(sandbox.Lister)
	if !ok {
		return ""
	}
	hs, err := l.List(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, h := range hs {
		ids = append(ids, h.ID)
	}
	sort.Strings(ids)
	return strings.Join(ids, ",")
}

// checkAgentBounded checks that the box's agent still answers and that its
// memory stays bounded while something stalls (why says what, when not).
func checkAgentBounded(t *testing.T, sb *sandbox.Sandbox, why string) {
	t.Helper()
	if got := mustOK(t, sb, "echo", "responsive"); got != "responsive" {
		t.Fatal(got)
	}
	// Footprint, not Info: RSS alone keeps the peak of an earlier burst
	// (the Go heap returns pages lazily), which says nothing of this test.
	info, err := sb.Footprint(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.RSSBytes > 40<<20 {
		t.Errorf("agent RSS %d MiB %s", info.RSSBytes>>20, why)
	}
}
