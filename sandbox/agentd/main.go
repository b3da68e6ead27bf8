package agentd

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Env vars the agent reads; the HARVEST_AGENT_ prefix is reserved (Spec
// validation refuses it) and stripped from the environment commands get.
const (
	EnvListenFD = "HARVEST_AGENT_LISTEN_FD"
	EnvPrefix   = "HARVEST_AGENT_"
)

// prewarmThreads is how many OS threads the agent creates at start and keeps
// parked; see the package doc. With one P the runtime needs a new thread only
// when a goroutine blocks in a syscall long enough for sysmon to hand its P
// on; two spare threads cover the agent's own work under a fork bomb (Info
// and Kill while every pid is taken: the isolation battery's fork-bomb test),
// and each one more is a kernel task per idle box.
const prewarmThreads = 4

// Main runs `sandbox-agent` with the given arguments and returns the exit code.
func Main(args []string) int {
	fs := flag.NewFlagSet("sandbox-agent", flag.ContinueOnError)
	var (
		listenFD   = fs.Int("listen-fd", -1, "serve on this inherited listening socket fd")
		listen     = fs.String("listen", "", "serve on a new unix socket at this path")
		boxID      = fs.String("id", "", "the box id (echoed in hello)")
		workdir    = fs.String("workdir", "/", "default working directory")
		deadlineMS = fs.Int64("deadline-ms", 0, "unix time (milliseconds) at which the box ends; 0: none")
		noSeccomp  = fs.Bool("no-seccomp", false, "do not install the seccomp filter (debugging only)")
		warm       = fs.Bool("warm", false, "start unclaimed: the first hello with a claim sets the box id, env, workdir and deadline")
		readyFD    = fs.Int("ready-fd", -1, "write one byte to this inherited fd, and close it, once serving")
		logLevel   = fs.String("log-level", "warn", "debug, info, warn or error")
		nproc      = fs.Bool("nproc", false, "give each command RLIMIT_NPROC at the claim's pids limit instead of keeping spare threads for a fork bomb (needs the box's own user namespace, Linux 5.14 or newer; ignored otherwise)")
		noSignals  = fs.Bool("no-signals", false, "as PID 1, catch no signal: SIGTERM, SIGINT and SIGHUP keep their default, which the kernel ignores for a PID namespace's init; the box is ended through the protocol (shutdown) or SIGKILL")
	)
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox-agent: --log-level %q: use debug, info, warn or error\n", *logLevel)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("component", "sandbox-agent", "box", *boxID)
	if *listenFD < 0 {
		if v := os.Getenv(EnvListenFD); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				fmt.Fprintf(os.Stderr, "sandbox-agent: %s=%q is not an fd number\n", EnvListenFD, v)
				return 2
			}
			*listenFD = n
		}
	}
	if (*listenFD < 0) == (*listen == "") {
		fmt.Fprintln(os.Stderr, "sandbox-agent: give exactly one of --listen-fd or --listen")
		return 2
	}

	// One P: the agent is I/O bound (its reads and writes go through the
	// netpoller), and every OS thread it holds is a kernel task the host pays
	// for each idle box (pid_max bounds a node's tasks). With one P an idle
	// agent holds four: the main thread, sysmon, the thread parked in
	// epoll_wait and the template thread; see prewarm for the reserve.
	runtime.GOMAXPROCS(1)
	// Its live heap is small and most allocations are short-lived (frames,
	// JSON): collecting at 1.5x instead of 2x the live heap keeps resident
	// memory near 8 MB after heavy use, at no measurable cost per call. (A
	// soft memory limit of 4 MiB tried first made the GC run nonstop and
	// tripled the exec round trip.)
	debug.SetGCPercent(50)
	closeInherited(*listenFD, *readyFD)
	if !*noSeccomp {
		if err := installSeccomp(); err != nil {
			log.Error("hardening failed", "err", err)
			return 1
		}
	}
	pid1 := os.Getpid() == 1
	if pid1 {
		// Not dumpable: no process of the box (the same user, in docker)
		// may ptrace the agent or read its memory, and so reach the
		// fence (fence.go) or the host's connection. Commands are
		// dumpable again from their exec.
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			log.Error("hardening failed: PR_SET_DUMPABLE", "err", err)
			return 1
		}
	}
	if !pid1 {
		if *noSignals {
			fmt.Fprintln(os.Stderr, "sandbox-agent: --no-signals is for the box's PID 1 only: a SIGTERM at its default would end any other process")
			return 2
		}
		// Orphans of our commands come back to us, not to the host's init.
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	// term receives the signals that end the box; nil (never) with
	// --no-signals.
	var term chan os.Signal
	if *noSignals {
		// os/signal costs an idle box three OS threads (see reaper.go); the
		// runtime's own handlers would end the agent on SIGTERM, SIGINT and
		// SIGHUP. At their default the kernel drops them for a PID
		// namespace's init, from inside the box and from the host alike:
		// only SIGKILL ends it. Commands inherit the default, as they should.
		if err := defaultSignals(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP); err != nil {
			log.Error("resetting signals", "err", err)
			return 1
		}
	} else {
		// SIGPIPE and SIGHUP must not end the agent, but are caught, not
		// ignored: an ignored signal stays ignored across exec, in every
		// command the agent starts (a `yes | head` would run on, a REPL
		// would survive its terminal's hangup). A caught one is reset to the
		// default at exec. The channel is never read: the runtime drops what
		// does not fit. (With --no-signals SIGPIPE stays with the runtime's
		// handler, reset at exec: it ignores a broken pipe on every fd but
		// 1 and 2, which are the shim's log pipe, and the shim outlives the
		// agent.)
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE, syscall.SIGHUP)
		term = make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	}

	log.Debug("hardened", "pid1", pid1)
	l, err := listener(*listenFD, *listen)
	if err != nil {
		log.Error("cannot listen", "err", err)
		return 1
	}
	var dl time.Time
	if *deadlineMS > 0 {
		dl = time.UnixMilli(*deadlineMS)
	}
	useNProc := *nproc && nprocPerUserNS()
	if *nproc && !useNProc {
		log.Warn("--nproc ignored: RLIMIT_NPROC here does not count the box's user namespace alone; keeping spare threads instead")
	}
	s, err := New(Config{
		BoxID:    *boxID,
		Workdir:  *workdir,
		Env:      boxEnv(),
		Deadline: dl,
		PID1:     pid1,
		Warm:     *warm,
		NProc:    useNProc,
		Logger:   log,
	})
	if err != nil {
		log.Error("start", "err", err)
		return 1
	}
	if !useNProc {
		if err := prewarm(prewarmThreads); err != nil {
			log.Warn("spare threads", "err", err)
		}
	}
	log.Debug("serving")

	serveErr := make(chan error, 1)
	go func() { serveErr <- s.Serve(l) }()
	if *readyFD >= 0 {
		// The listener accepts from here on (connections wait in its backlog
		// until Serve takes them), and everything the backend set up for the
		// box is in place: we were exec'd after it.
		f := os.NewFile(uintptr(*readyFD), "ready")
		_, _ = f.Write([]byte{1})
		f.Close()
	}
	code := 0
	select {
	case sig := <-term:
		// Whoever sent it decides the grace period and SIGKILLs us after it
		// (docker stop, the local backend's Stop): wait for the box's
		// processes as long as it takes.
		log.Info("ending the box", "signal", sig)
		s.Shutdown(NoGraceLimit)
		<-s.Exited()
	case <-s.Exited():
	case err := <-serveErr:
		log.Error("serve", "err", err)
		code = 1
		// As PID 1, Close waits for the reaper, which waits for the last
		// process: end them.
		s.Shutdown(0)
		<-s.Exited()
	}
	if !s.Fenced() {
		// Fenced, nobody waits for the output: the box ends now.
		s.Drain(2 * time.Second)
	}
	s.Close()
	return code
}

func listener(fd int, path string) (net.Listener, error) {
	if fd >= 0 {
		f := os.NewFile(uintptr(fd), "listener")
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("fd %d is not a listening socket: %w", fd, err)
		}
		return l, nil
	}
	_ = os.Remove(path)
	// 0600 from its creation (the umask, not a chmod after: under gVisor the
	// socket is the gofer's host file, which the box may not chmod). Early
	// in main: nothing else creates files meanwhile.
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// boxEnv is the agent's environment minus its own variables.
func boxEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvPrefix) {
			env = append(env, kv)
		}
	}
	return env
}

// closeInherited closes every fd above 2 that the backend left open (bwrap's
// info pipe, anything a parent leaked), except keep (the listener). Closing,
// not just close-on-exec: a descriptor of a host directory held by PID 1 would
// be reachable from the box as /proc/1/fd/N/.. (the runc CVE-2024-21626
// class). Anonymous inodes are the Go runtime's own (epoll, eventfd) and stay.
func closeInherited(keep ...int) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	dfd := int(d.Fd())
	var stray []int
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd <= 2 || fd == dfd || slices.Contains(keep, fd) {
			continue
		}
		if target, err := os.Readlink("/proc/self/fd/" + n); err == nil && strings.HasPrefix(target, "anon_inode:") {
			continue
		}
		stray = append(stray, fd)
	}
	d.Close()
	for _, fd := range stray {
		unix.Close(fd)
	}
}

// prewarm makes the Go runtime create n spare OS threads now and keep them
// idle, so the agent does not need new ones while a fork bomb holds every
// pid. n goroutines block in read(2) on a pipe at the same time: a goroutine
// in a blocking syscall keeps its thread, and sysmon hands the P to another
// thread (a new one when none is idle) to run the next. Once all n are in
// the read, at least n+1 threads exist besides sysmon; the write releases
// them and the threads go back to the idle pool, which the runtime never
// shrinks. It returns when they are back, or after a deadline on a machine
// too loaded to schedule them (the agent serves either way).
//
// It runs before the agent serves: the earlier version slept n goroutines
// for 250 ms in the background, and a box whose first command was a fork
// bomb could take every pid before sysmon had made the threads (the docker
// fork-bomb test lost its agent that way on a loaded CI machine). (Not
// LockOSThread: a locked goroutine that blocks makes the runtime start a
// template thread, one more task for every box.)
func prewarm(n int) error {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("prewarm: pipe: %w", err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	var entered atomic.Int32
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			entered.Add(1)
			var b [1]byte
			for {
				if _, err := unix.Read(p[0], b[:]); err != unix.EINTR {
					return
				}
			}
		})
	}
	deadline := time.Now().Add(prewarmWithin)
	for entered.Load() < int32(n) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	// The last goroutine counted itself just before its read: give it the
	// moment to get there.
	time.Sleep(5 * time.Millisecond)
	for written := 0; written < n; {
		k, err := unix.Write(p[1], make([]byte, n-written))
		if err != nil && err != unix.EINTR {
			return fmt.Errorf("prewarm: releasing the threads: %w", err)
		}
		written += max(k, 0)
	}
	wg.Wait()
	if entered.Load() < int32(n) {
		return fmt.Errorf("prewarm: %d of %d spare threads made within %s", entered.Load(), n, prewarmWithin)
	}
	return nil
}

// prewarmWithin bounds prewarm on a machine too loaded to run it.
const prewarmWithin = 5 * time.Second

// defaultSignals sets sigs to their default disposition (SIG_DFL) behind
// the runtime's back: os/signal.Reset would restore the runtime's own
// handler, which ends the process on SIGTERM, SIGINT and SIGHUP.
func defaultSignals(sigs ...syscall.Signal) error {
	// The kernel's struct sigaction on amd64 and arm64: handler, flags,
	// restorer, mask.
	var sa struct {
		handler  uintptr
		flags    uint64
		restorer uintptr
		mask     uint64
	}
	for _, sig := range sigs {
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&sa)), 0, 8, 0, 0); e != 0 {
			return fmt.Errorf("rt_sigaction(%v): %w", sig, e)
		}
	}
	return nil
}
