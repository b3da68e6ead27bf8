// Package shim is the local backend's per-box supervisor, run as
// `harvest-agent sandbox-shim --config FILE` (like conmon for podman).
//
// Why a shim: bwrap's --die-with-parent ties a box to bwrap's parent. If that
// parent were `harvest serve`, every box would die with it and nothing could be
// recovered after a restart. The shim is bwrap's parent instead: it outlives
// Harvest (own session), the box dies with it, and it records how the box ended
// (exit.json) even when Harvest is not there to see it.
//
// What it does, in order (it runs as root, started by Harvest in a private mount
// namespace — Go's Unshareflags=CLONE_NEWNS, made rprivate):
//
//  1. bind-mounts each workspace and the agent binary into the box's staging
//     directory. bwrap runs as the unprivileged box user and can only bind
//     paths that user can reach; the staging dir is reachable wherever the real
//     workspace lives (even under /root). The mounts exist only in this
//     namespace and vanish with the box: nothing touches the host mount table.
//  2. joins the box's cgroups, starts bwrap as the box user (so bwrap and every
//     box process are in the cgroups from their first instruction: no race
//     with a fork bomb), then moves itself back out (so a box at its memory
//     limit can never OOM-kill its own supervisor).
//  3. reads bwrap's --info-fd for the box's PID 1 (the agent), writes
//     state.json and prints it as one JSON line on stdout: Harvest waits for it.
//  4. copies bwrap's output into agent.log (capped), waits for bwrap, writes
//     exit.json, exits. At the box's deadline plus a margin it kills bwrap as a
//     backstop to the agent's own time limit.
//
// Only the standard library and the cgroups package: it runs in harvest-agent.
package shim

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/sandbox/local/cgroups"
)

// Config is what Harvest writes to the shim's config file.
type Config struct {
	BoxDir string   `json:"box_dir"`
	Bwrap  string   `json:"bwrap"`
	Args   []string `json:"args"` // bwrap's arguments (without argv[0])
	// ExtraFDs inherited fds (3, 4, ...) are passed to bwrap at the same
	// numbers. The info pipe follows them, at fd 3+ExtraFDs.
	ExtraFDs int            `json:"extra_fds"`
	UID      int            `json:"uid"`
	GID      int            `json:"gid"`
	Cgroup   cgroups.Cgroup `json:"cgroup"`
	Binds    []Bind         `json:"binds"`
	// Deadline (unix seconds) is the box's time limit; the shim kills bwrap
	// at Deadline+BackstopSeconds if the agent has not ended the box.
	Deadline int64 `json:"deadline"`
	LogLimit int64 `json:"log_limit"`
}

// Bind is a bind mount the shim makes in its private mount namespace.
type Bind struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// BackstopSeconds is how long after the deadline the shim waits for the agent.
const BackstopSeconds = 30

// Proc names a process by pid and start time (see procutil).
type Proc struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// State is what the shim reports once the box runs.
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
	cfgPath := fs.String("config", "", "the shim's JSON config file")
	if err := fs.Parse(args); err != nil || *cfgPath == "" {
		fmt.Fprintln(os.Stderr, "usage: sandbox-shim --config FILE")
		return 2
	}
	b, err := os.ReadFile(*cfgPath)
	if err != nil {
		return report(State{Error: err.Error()})
	}
	var cfg Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return report(State{Error: "bad shim config: " + err.Error()})
	}
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE)
	return run(cfg)
}

// report prints the state line for Harvest (stdout is a pipe it reads once).
func report(st State) int {
	b, _ := json.Marshal(st)
	os.Stdout.Write(append(b, '\n'))
	os.Stdout.Close()
	if st.Error != "" {
		return 1
	}
	return 0
}

func run(cfg Config) int {
	for _, bd := range cfg.Binds {
		if err := bindMount(bd); err != nil {
			return report(State{Error: err.Error()})
		}
	}
	orig, err := ownCgroups()
	if err != nil {
		return report(State{Error: "reading our cgroups: " + err.Error()})
	}
	if err := cfg.Cgroup.Join(0); err != nil {
		return report(State{Error: err.Error()})
	}

	infoR, infoW, err := os.Pipe()
	if err != nil {
		return report(State{Error: err.Error()})
	}
	logR, logW, err := os.Pipe()
	if err != nil {
		return report(State{Error: err.Error()})
	}
	cmd := exec.Command(cfg.Bwrap, cfg.Args...)
	for i := 0; i < cfg.ExtraFDs; i++ {
		cmd.ExtraFiles = append(cmd.ExtraFiles, os.NewFile(uintptr(3+i), "inherited"))
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, infoW)
	cmd.Stdout, cmd.Stderr = logW, logW
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:     true,
		Credential: &syscall.Credential{Uid: uint32(cfg.UID), Gid: uint32(cfg.GID), Groups: []uint32{}},
	}
	startErr := cmd.Start()
	// Leave the box's cgroups whatever happened: bwrap (if it started) is in.
	leaveErr := joinCgroups(orig)
	infoW.Close()
	logW.Close()
	for _, f := range cmd.ExtraFiles[:cfg.ExtraFDs] {
		f.Close() // the listener and friends now live in bwrap only
	}
	if startErr != nil {
		return report(State{Error: "starting bwrap: " + startErr.Error()})
	}
	if leaveErr != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return report(State{Error: "leaving the box cgroup: " + leaveErr.Error()})
	}

	logDone := make(chan struct{})
	go func() { // owned: Main waits on logDone before exiting
		defer close(logDone)
		copyLog(filepath.Join(cfg.BoxDir, "agent.log"), logR, cfg.LogLimit)
	}()

	childPID, infoErr := readChildPID(infoR)
	infoR.Close()
	if infoErr != nil {
		cmd.Process.Kill()
		cmd.Wait()
		<-logDone
		tail, _ := os.ReadFile(filepath.Join(cfg.BoxDir, "agent.log"))
		return report(State{Error: fmt.Sprintf("bwrap did not start the box: %v: %s", infoErr, strings.TrimSpace(lastLines(string(tail), 5)))})
	}
	st := State{
		Shim:  lookup(os.Getpid()),
		Bwrap: lookup(cmd.Process.Pid),
		Agent: lookup(childPID),
	}
	if err := writeJSON(filepath.Join(cfg.BoxDir, "state.json"), st); err != nil {
		cmd.Process.Kill()
	}
	report(st)

	// SIGTERM to the shim is passed to the box's agent: a graceful end.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var backstop <-chan time.Time
	if cfg.Deadline > 0 {
		t := time.NewTimer(time.Until(time.Unix(cfg.Deadline+BackstopSeconds, 0)))
		defer t.Stop()
		backstop = t.C
	}
	killed := ""
	var werr error
loop:
	for {
		select {
		case werr = <-waited:
			break loop
		case <-term:
			_ = syscall.Kill(childPID, syscall.SIGTERM)
		case <-backstop:
			killed = "the box outlived its time limit"
			_ = cmd.Process.Kill() // the agent dies with bwrap (--die-with-parent)
		}
	}
	<-logDone
	ex := Exit{At: time.Now(), Killed: killed}
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ex.Code, ex.Signal = -1, int(ws.Signal())
		} else {
			ex.Code = ee.ExitCode()
		}
	}
	_ = writeJSON(filepath.Join(cfg.BoxDir, "exit.json"), ex)
	return 0
}

func bindMount(b Bind) error {
	if err := syscall.Mount(b.Source, b.Target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mounting %s: %w", b.Source, err)
	}
	if b.ReadOnly {
		if err := syscall.Mount("", b.Target, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV, ""); err != nil {
			return fmt.Errorf("making %s read-only: %w", b.Target, err)
		}
	}
	return nil
}

// ownCgroups returns, per v1 controller (or "" for v2), the directory of the
// cgroup the shim started in.
func ownCgroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	roots, err := cgroups.Detect("")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, path := parts[1], parts[2]
		if roots.Version == 2 {
			if ctrls == "" {
				out[""] = filepath.Join(roots.Roots[""], path)
			}
			continue
		}
		for _, c := range strings.Split(ctrls, ",") {
			if root, ok := roots.Roots[c]; ok {
				out[c] = filepath.Join(root, path)
			}
		}
	}
	return out, nil
}

func joinCgroups(dirs map[string]string) error {
	pid := strconv.Itoa(os.Getpid())
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(pid), 0); err != nil {
			return err
		}
	}
	return nil
}

func readChildPID(r io.Reader) (int, error) {
	var info struct {
		ChildPID int `json:"child-pid"`
	}
	dec := json.NewDecoder(bufio.NewReader(r))
	if err := dec.Decode(&info); err != nil {
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
