// Package shim is the local backend's per-box supervisor, run as
// `harvest-agent sandbox-shim --cgroup DIR,DIR...` (like conmon for podman).
//
// Why a shim: bwrap's --die-with-parent ties a box to bwrap's parent. If that
// parent were `harvest serve`, every box would die with it and nothing could be
// recovered after a restart. The shim is bwrap's parent instead: it outlives
// Harvest (own session), the box dies with it, and it records how the box ended
// (exit.json) even when Harvest is not there to see it.
//
// A box is made in two steps, each one JSON line on the shim's stdin and one
// JSON line of reply on its stdout:
//
//	prepare  start a box that has no identity yet ("warm"): bwrap as the box
//	         user, the agent inside waiting to be claimed, no workspaces
//	claim    make it box X: set its hostname, mount its workspaces into it,
//	         record its deadline; the agent gets its id, environment and
//	         workdir from Harvest's hello
//
// The local backend keeps a few shims prepared ahead of time (its pool), so
// creating a box costs a claim: about a millisecond instead of ten. A cold
// start sends both lines back to back: one code path.
//
// Life of a shim (it runs as root):
//
//  1. at start it joins the box's cgroups (--cgroup), so bwrap and every box
//     process are in them from their first instruction: no race with a fork
//     bomb. It stays in them, protected from the OOM killer (oom_score_adj
//     -1000, set after bwrap is forked so the box does not inherit it).
//  2. prepare: it creates the agent's listening socket, starts bwrap and
//     waits for it through a pidfd on the netpoller (child.go), reads
//     bwrap's --info-fd for the box's PID 1 and reports the box's pids.
//     No shim thread is ever locked, so none exits: --die-with-parent's
//     signal, sent when the thread that forked bwrap exits, comes only
//     with the shim itself.
//  3. claim: Harvest has already set the box's hostname and mounted its
//     workspaces, in its own process (Enter, enter.go): on a locked thread
//     it takes a detached copy of each workspace's mount in the host's
//     mount namespace (open_tree), enters the box's UTS and mount
//     namespaces (setns through a pidfd of the box's PID 1), sets the
//     hostname, creates each mount point as the box user (fsuid: the
//     box's tmpfs has no inode owner for host root) and attaches the copy
//     there (move_mount), nosuid and nodev, then makes /workspace itself
//     read-only, and goes back to the host's namespaces. Mounting into the
//     box from outside works wherever the workspace lives (even under a
//     directory the box user cannot traverse), and nothing appears in the
//     host's mount table. It is done in Harvest, not here, because a
//     locked thread costs a Go process the runtime's template thread for
//     good: a kernel task in every idle box. The shim records the claim
//     (state.json) and its deadline.
//  4. it copies bwrap's output into agent.log (capped), waits for bwrap,
//     writes exit.json and exits. At the box's deadline plus a margin it kills
//     bwrap, a backstop to the agent's own time limit.
//
// EOF on stdin before a claim means the box is not wanted (the pool shrank,
// Harvest closed or died): the shim kills the warm box, removes its cgroups
// and its directory, and exits.
//
// Only the standard library, x/sys and small internal packages: it runs in
// harvest-agent, which must start fast.
package shim

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/base/unixsock"
)

// Prepare starts a warm box.
type Prepare struct {
	// Dir holds the box's socket (agent.sock) and logs; Harvest renames it to
	// the box's run dir when it claims the box.
	Dir   string   `json:"dir"`
	Bwrap string   `json:"bwrap"`
	Args  []string `json:"args"` // bwrap's arguments: fd 3 is the listener, 4 the info pipe, 5 the agent's ready pipe
	UID   int      `json:"uid"`
	GID   int      `json:"gid"`
	// LogLimit caps agent.log (the rest is counted and dropped).
	LogLimit int64 `json:"log_limit"`
}

// Claim makes a prepared box a particular box.
type Claim struct {
	BoxDir     string  `json:"box_dir"` // Prepare.Dir after Harvest renamed it
	Hostname   string  `json:"hostname"`
	Workspaces []Mount `json:"workspaces"`
	// Deadline (unix seconds) is the box's time limit; the shim kills bwrap
	// at Deadline+BackstopSeconds if the agent has not ended the box.
	Deadline int64 `json:"deadline"`
}

// Mount is a host directory to mount read-write at Target inside the box.
type Mount struct {
	Source string `json:"source"`
	Target string `json:"target"`
	// Over mounts over a directory the box already has (its /tmp and HOME,
	// moved onto the box's disk) instead of creating the mount point.
	Over bool `json:"over,omitempty"`
	// Lower, when set, makes the mount an overlay: Lower read-only below,
	// Source the writable upper, Work the overlay's work directory (on
	// Source's filesystem).
	Lower string `json:"lower,omitempty"`
	Work  string `json:"work,omitempty"`
}

// BackstopSeconds is how long after the deadline the shim waits for the agent.
const BackstopSeconds = 30

// Proc names a process by pid and start time (see procutil).
type Proc struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// State is the shim's reply to a Prepare and to a Claim.
type State struct {
	Shim  Proc   `json:"shim"`
	Bwrap Proc   `json:"bwrap"`
	Agent Proc   `json:"agent"` // the box's PID 1, as a host pid
	Error string `json:"error,omitempty"`
}

// Exit is how the box ended.
type Exit struct {
	Code   int       `json:"code"`
	Signal int       `json:"signal,omitempty"`
	At     time.Time `json:"at"`
	Killed string    `json:"killed,omitempty"` // why the shim killed it
}

// Main runs the shim and returns its exit code.
func Main(args []string) int {
	fs := flag.NewFlagSet("sandbox-shim", flag.ContinueOnError)
	cgs := fs.String("cgroup", "", "comma-separated cgroup directories to join at start")
	if err := fs.Parse(args); err != nil {
		fmt.Fprintln(os.Stderr, "usage: sandbox-shim --cgroup DIR[,DIR...]  (prepare and claim lines on stdin)")
		return 2
	}
	// One P: the shim waits, nearly always; each OS thread a second P would
	// bring is a kernel task per idle box, and pid_max bounds a node's tasks.
	runtime.GOMAXPROCS(1)
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE)
	// The box's PID 1 is orphaned when bwrap exits first: it comes back to us,
	// not to the host's init, and we reap it (see startAndWait).
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	var dirs []string
	if *cgs != "" {
		dirs = strings.Split(*cgs, ",")
		for _, dir := range dirs {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("0"), 0); err != nil {
				return report(State{Error: fmt.Sprintf("joining cgroup %s: %v", dir, err)})
			}
		}
	}
	// Stdin through the netpoller (nonblocking): a read blocked in the
	// kernel would hold an OS thread, a kernel task of every idle box.
	stdin := os.Stdin
	if unix.SetNonblock(0, true) == nil {
		stdin = os.NewFile(0, "stdin")
	}
	in := bufio.NewReaderSize(stdin, 64<<10)
	var prep Prepare
	if !readLine(in, &prep) {
		abandon(dirs, "")
		return 0
	}
	if f, err := os.OpenFile(filepath.Join(prep.Dir, "shim.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
		_ = unix.Dup2(int(f.Fd()), 2)
		f.Close()
	}
	b, err := prepare(prep)
	if err != nil {
		abandon(dirs, "")
		return report(State{Error: err.Error()})
	}
	report(b.state)

	// Wait for the claim; if the warm box dies first, give up.
	claims := make(chan *Claim, 1)
	go func() {
		var c Claim
		if readLine(in, &c) {
			claims <- &c
		} else {
			claims <- nil
		}
	}()
	var claim *Claim
	select {
	case claim = <-claims:
	case <-b.waited:
		fmt.Fprintln(os.Stderr, "sandbox-shim: the warm box exited before it was claimed")
		abandon(dirs, prep.Dir)
		return 1
	}
	if claim == nil {
		b.kill()
		abandon(dirs, prep.Dir)
		return 0
	}
	if err := writeJSON(filepath.Join(claim.BoxDir, "state.json"), b.state); err != nil {
		b.kill()
		return report(State{Error: err.Error()})
	}
	report(b.state)
	os.Stdout.Close()
	return b.supervise(claim)
}

// readLine decodes one JSON line; false on EOF or garbage.
func readLine(r *bufio.Reader, v any) bool {
	line, err := r.ReadBytes('\n')
	if len(line) == 0 && err != nil {
		return false
	}
	if err := json.Unmarshal(line, v); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-shim: bad input line:", err)
		return false
	}
	return true
}

// report prints one state line for Harvest.
func report(st State) int {
	b, _ := json.Marshal(st)
	os.Stdout.Write(append(b, '\n'))
	if st.Error != "" {
		return 1
	}
	return 0
}

// box is a running bwrap.
type box struct {
	bwrap   *child
	state   State
	waited  <-chan syscall.WaitStatus
	logDone chan struct{}
}

// kill ends the box and waits until bwrap and the agent are reaped: the
// shim must not exit before, or they are left to PID 1 as zombies.
func (b *box) kill() {
	b.bwrap.kill() // the agent dies with bwrap (--die-with-parent)
	<-b.waited
	<-b.logDone
}

func prepare(p Prepare) (*box, error) {
	l, err := unixsock.Listen(filepath.Join(p.Dir, "agent.sock"))
	if err != nil {
		return nil, fmt.Errorf("creating the agent socket: %w", err)
	}
	lf, err := l.File()
	l.Close()
	if err != nil {
		return nil, err
	}
	defer lf.Close() // once bwrap has it, the listener lives in the box only
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer infoR.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		infoW.Close()
		return nil, err
	}
	defer readyR.Close()
	logR, logW, err := os.Pipe()
	if err != nil {
		infoW.Close()
		readyW.Close()
		return nil, err
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		infoW.Close()
		readyW.Close()
		logW.Close()
		logR.Close()
		return nil, err
	}
	bw, err := start(p.Bwrap, p.Args, []*os.File{devNull, logW, logW, lf, infoW, readyW}, &syscall.SysProcAttr{
		Setsid:     true,
		Credential: &syscall.Credential{Uid: uint32(p.UID), Gid: uint32(p.GID), Groups: []uint32{}},
	})
	devNull.Close()
	infoW.Close()
	readyW.Close()
	logW.Close()
	if err != nil {
		logR.Close()
		return nil, fmt.Errorf("starting bwrap: %w", err)
	}
	waited := bw.wait()
	// After the fork: the box must not inherit an unkillable score.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)
	b := &box{bwrap: bw, waited: waited, logDone: make(chan struct{})}
	go func() { // owned: Main waits on logDone before exiting
		defer close(b.logDone)
		copyLog(filepath.Join(p.Dir, "agent.log"), logR, p.LogLimit)
	}()
	childPID, err := readChildPID(infoR)
	if err == nil {
		// bwrap reports the child before building its filesystem; the agent
		// is exec'd after. Its ready byte means the box is complete. (EOF:
		// it died, or bwrap failed.)
		var one [1]byte
		if n, _ := readyR.Read(one[:]); n != 1 {
			err = errors.New("the agent did not start")
		}
	}
	if err != nil {
		bw.kill()
		<-waited
		<-b.logDone
		tail, _ := os.ReadFile(filepath.Join(p.Dir, "agent.log"))
		return nil, fmt.Errorf("bwrap did not start the box: %v: %s", err, strings.TrimSpace(lastLines(string(tail), 5)))
	}
	b.state = State{Shim: lookup(os.Getpid()), Bwrap: lookup(bw.pid), Agent: lookup(childPID)}
	return b, nil
}

// supervise waits for the claimed box to end and records how.
func (b *box) supervise(c *Claim) int {
	// SIGTERM to the shim is ignored (set after bwrap started: bwrap and the
	// box keep the default): Harvest ends a box through its agent (a shutdown
	// through its socket, then SIGKILL), and a stray SIGTERM must not end a box.
	// Ignored, not caught: os/signal.Notify costs three OS threads for good
	// (its signal loop, the thread that keeps the signal mask, and the
	// runtime's template thread), kernel tasks every idle box would hold.
	signal.Ignore(syscall.SIGTERM)
	var backstop <-chan time.Time
	if c.Deadline > 0 {
		t := time.NewTimer(time.Until(time.Unix(c.Deadline+BackstopSeconds, 0)))
		defer t.Stop()
		backstop = t.C
	}
	killed := ""
	var ws syscall.WaitStatus
loop:
	for {
		select {
		case ws = <-b.waited:
			break loop
		case <-backstop:
			killed = "the box outlived its time limit"
			b.bwrap.kill() // the agent dies with bwrap (--die-with-parent)
		}
	}
	<-b.logDone
	ex := Exit{At: time.Now(), Killed: killed}
	if ws.Signaled() {
		ex.Code, ex.Signal = -1, int(ws.Signal())
	} else {
		ex.Code = ws.ExitStatus()
	}
	_ = writeJSON(filepath.Join(c.BoxDir, "exit.json"), ex)
	return 0
}

// abandon moves the shim to the root of each cgroup hierarchy, removes the
// cgroups it was given (a cgroup cannot be removed while it has a process)
// and the box's directory.
func abandon(dirs []string, boxDir string) {
	pid := []byte(strconv.Itoa(os.Getpid()))
	for _, dir := range dirs {
		root := dir
		for {
			parent := filepath.Dir(root)
			if _, err := os.Stat(filepath.Join(parent, "cgroup.procs")); err != nil || parent == root {
				break
			}
			root = parent
		}
		if root != dir && os.WriteFile(filepath.Join(root, "cgroup.procs"), pid, 0) == nil {
			_ = syscall.Rmdir(dir)
		}
	}
	if boxDir != "" {
		_ = os.RemoveAll(boxDir)
	}
}

func readChildPID(r io.Reader) (int, error) {
	var info struct {
		ChildPID int `json:"child-pid"`
	}
	if err := json.NewDecoder(bufio.NewReader(r)).Decode(&info); err != nil {
		return 0, fmt.Errorf("reading bwrap's info: %w", err)
	}
	if info.ChildPID <= 0 {
		return 0, errors.New("bwrap reported no child pid")
	}
	return info.ChildPID, nil
}

func lookup(pid int) Proc {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Proc{PID: pid}
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return Proc{PID: pid}
	}
	start, _ := strconv.ParseUint(f[19], 10, 64)
	return Proc{PID: pid, Start: start}
}

// copyLog copies r to path, keeping at most limit bytes; the rest is drained
// and counted so the box never blocks on its log.
func copyLog(path string, r io.Reader, limit int64) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		io.Copy(io.Discard, r)
		return
	}
	defer f.Close()
	if limit <= 0 {
		limit = 1 << 20
	}
	n, _ := io.Copy(f, io.LimitReader(r, limit))
	dropped, _ := io.Copy(io.Discard, r)
	if dropped > 0 {
		fmt.Fprintf(f, "\n[harvest: %d more bytes of agent log dropped after %d]\n", dropped, n)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
