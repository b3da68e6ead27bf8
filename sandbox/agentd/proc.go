package agentd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/sandbox/proto"
)

// ringSize bounds output kept per fd while no host is attached.
const ringSize = 64 << 10

// exitLinger is how long pumps wait for more output after the process
// exited before the exit status is sent anyway (a background grandchild may
// hold the pipe open forever). A variable only so a test can make every
// deadline an expired one (pump_test.go); nothing else writes it.
var exitLinger = 50 * time.Millisecond

// testHookBeforeRead, when set by a test, runs before each read of a pump.
var testHookBeforeRead func(*proc)

// proc is one command the agent started.
type proc struct {
	s       *Server
	id      uint64
	pid     int
	pgid    int
	args    []string
	started time.Time
	limit   int64 // OutputLimit per fd, 0 = none
	tty     *os.File
	oomAt   uint64 // box OOM-kill count when the process started

	outs  []*pump
	stdin *stdinWriter

	exitCh   chan struct{} // closed by the reaper
	finished chan struct{} // closed when exit status + all output were handled

	mu       sync.Mutex
	cond     *sync.Cond
	att      *attachment // nil while detached
	ws       syscall.WaitStatus
	exitedAt time.Time
	timedOut bool
	final    *proto.ExitStatus // set when finished
}

type attachment struct {
	c      *conn
	stream uint32
}

// pump moves one output fd of a process to the attached host.
type pump struct {
	p         *proc
	fd        byte
	f         *os.File
	credit    int64 // guarded by p.mu
	delivered int64 // bytes sent to a host, guarded by p.mu
	dropped   int64 // bytes read but never delivered, guarded by p.mu
	ring      []byte
	hostDone  bool // EOF (real or after linger) reported, guarded by p.mu
	done      chan struct{}
}

// stdinWriter feeds host stdin data to the process without ever blocking the
// connection's reader: data queues here (bounded by the credit the agent
// grants) and one goroutine writes it to the pipe.
type stdinWriter struct {
	p      *proc
	f      *os.File
	mu     sync.Mutex
	cond   *sync.Cond
	queue  [][]byte
	queued int
	eof    bool
	dead   bool
}

func (s *Server) startProc(c *conn, prm proto.ExecParams) (*proc, error) {
	if len(prm.Args) == 0 || prm.Args[0] == "" {
		return nil, &proto.Error{Code: proto.CodeInvalid, Message: "exec: no command given"}
	}
	env := s.mergeEnv(prm.Env)
	dir := prm.Dir
	if dir == "" {
		dir = s.id().workdir
	} else if !filepath.IsAbs(dir) {
		dir = filepath.Join(s.id().workdir, dir)
	}
	argv0, err := lookPath(prm.Args[0], envLookup(env, "PATH"), dir)
	if err != nil {
		return nil, &proto.Error{Code: proto.CodeNotFound, Message: err.Error()}
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, &proto.Error{Code: proto.CodeNotFound, Message: fmt.Sprintf("exec: working directory %s does not exist in the box", dir)}
	}

	s.mu.Lock()
	s.nextProc++
	id := s.nextProc
	s.mu.Unlock()
	env = append(env, string(marker(id)[:len(marker(id))-1]))
	p := &proc{
		id:       id,
		s:        s,
		args:     prm.Args,
		limit:    prm.OutputLimit,
		exitCh:   make(chan struct{}),
		finished: make(chan struct{}),
		oomAt:    s.oom.count(),
	}
	p.cond = sync.NewCond(&p.mu)

	var (
		childFiles []*os.File // closed in the agent after fork
		files      []uintptr
		attr       = &syscall.SysProcAttr{}
	)
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	var ours []*os.File // our ends, closed on failure
	if prm.TTY != nil {
		rows, cols := prm.TTY.Rows, prm.TTY.Cols
		if rows == 0 || cols == 0 {
			rows, cols = 24, 80
		}
		master, slave, err := openPTY(rows, cols)
		if err != nil {
			return nil, errno(fmt.Errorf("exec: opening a pty: %w", err))
		}
		p.tty = master
		ours = append(ours, master)
		childFiles = append(childFiles, slave)
		files = []uintptr{slave.Fd(), slave.Fd(), slave.Fd()}
		attr.Setsid = true
		attr.Setctty = true
		attr.Ctty = 0
		p.outs = []*pump{{p: p, fd: proto.FdStdout, f: master}}
		if prm.Stdin {
			p.stdin = newStdinWriter(p, master)
		}
	} else {
		stdin := s.devNull
		if prm.Stdin {
			r, w, err := os.Pipe()
			if err != nil {
				return nil, errno(err)
			}
			ours = append(ours, w)
			childFiles = append(childFiles, r)
			stdin = r
			p.stdin = newStdinWriter(p, w)
		}
		or, ow, err := os.Pipe()
		if err != nil {
			closeAll(ours)
			closeAll(childFiles)
			return nil, errno(err)
		}
		er, ew, err := os.Pipe()
		if err != nil {
			closeAll(append(ours, or))
			closeAll(append(childFiles, ow))
			return nil, errno(err)
		}
		ours = append(ours, or, er)
		childFiles = append(childFiles, ow, ew)
		files = []uintptr{stdin.Fd(), ow.Fd(), ew.Fd()}
		attr.Setpgid = true
		p.outs = []*pump{{p: p, fd: proto.FdStdout, f: or}, {p: p, fd: proto.FdStderr, f: er}}
	}

	window := int64(prm.Window)
	if window <= 0 {
		window = proto.DefaultWindow
	}
	for _, o := range p.outs {
		o.credit = window
		o.done = make(chan struct{})
	}
	if c != nil {
		p.att = &attachment{c: c, stream: prm.Stream}
	}

	pa := &syscall.ProcAttr{Dir: dir, Env: env, Files: files, Sys: attr}
	nproc := s.nprocLimit()
	pid, err := s.reaper.fork(func() (int, error) {
		pid, err := syscall.ForkExec(argv0, prm.Args, pa)
		if err == nil && nproc > 0 {
			capNProc(pid, nproc)
		}
		return pid, err
	}, p.onExit)
	closeAll(childFiles)
	if err != nil {
		closeAll(ours)
		return nil, errno(fmt.Errorf("exec %s: %w", prm.Args[0], err))
	}
	p.pid = pid
	p.pgid = pid
	p.started = time.Now()
	raiseOOMScore(pid)

	s.remember(p)
	if c != nil {
		// Before any output can flow, so Window frames find the process.
		c.setStream(prm.Stream, p)
	}

	for _, o := range p.outs {
		o := o
		s.goroutine(o.run)
	}
	if p.stdin != nil {
		s.goroutine(p.stdin.run)
	}
	s.goroutine(p.finish)
	if prm.TimeoutMS > 0 {
		t := time.AfterFunc(time.Duration(prm.TimeoutMS)*time.Millisecond, func() {
			p.mu.Lock()
			p.timedOut = true
			p.mu.Unlock()
			killTree(p.pid, p.pgid, p.id)
		})
		s.goroutine(func() {
			select {
			case <-p.exitCh:
			case <-s.ctx.Done():
			}
			t.Stop()
		})
	}
	return p, nil
}

// onExit runs on the reaper goroutine with the process's wait status.
func (p *proc) onExit(ws syscall.WaitStatus) {
	p.mu.Lock()
	p.ws = ws
	p.exitedAt = time.Now()
	p.mu.Unlock()
	close(p.exitCh)
	// Stop waiting for output that may never come (see exitLinger).
	for _, o := range p.outs {
		_ = o.f.SetReadDeadline(time.Now().Add(exitLinger))
	}
	p.mu.Lock()
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *proc) hasExited() bool {
	select {
	case <-p.exitCh:
		return true
	default:
		return false
	}
}

func (p *proc) isFinished() bool {
	select {
	case <-p.finished:
		return true
	default:
		return false
	}
}

// finish waits for the exit and the output, then reports the exit status.
func (p *proc) finish() {
	select {
	case <-p.exitCh:
	case <-p.s.ctx.Done():
		return
	}
	for _, o := range p.outs {
		select {
		case <-o.hostDoneCh():
		case <-p.s.ctx.Done():
			return
		}
	}
	p.mu.Lock()
	st := p.statusLocked()
	p.final = &st
	att := p.att
	p.mu.Unlock()
	if p.stdin != nil {
		p.stdin.kill()
	}
	if p.tty != nil {
		// The pump owns reading; closing here would race with its drain. The
		// pump closes the master when it reaches EOF.
	}
	close(p.finished)
	if att != nil {
		att.c.sendExit(att.stream, st)
	}
}

func (p *proc) statusLocked() proto.ExitStatus {
	st := proto.ExitStatus{
		DurationMS: p.exitedAt.Sub(p.started).Milliseconds(),
		TimedOut:   p.timedOut,
	}
	switch {
	case p.ws.Exited():
		st.Code = p.ws.ExitStatus()
	case p.ws.Signaled():
		st.Code = -1
		st.Signal = int(p.ws.Signal())
		if p.ws.Signal() == syscall.SIGKILL && !p.timedOut && p.s.oom.count() > p.oomAt {
			st.OOMKilled = true
		}
		// Killed after the box's time limit began ending every process:
		// the limit did it (SIGTERM, or SIGKILL after the grace), and the
		// status says so, as it says a Cmd.Timeout or an OOM kill.
		st.BoxTimedOut = !st.OOMKilled && !p.timedOut && p.s.expired.Load()
	}
	for _, o := range p.outs {
		st.Dropped += o.dropped
	}
	return st
}

func (p *proc) info() proto.ProcInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return proto.ProcInfo{Proc: p.id, PID: p.pid, Args: p.args, Started: p.started, Exit: p.final}
}

// attach binds the process's output to a (new) host stream. Output kept in the
// ring while detached is replayed first. A finished process gets its ring,
// EOFs and its exit status at once.
func (p *proc) attach(c *conn, stream uint32, window int64) {
	if window <= 0 {
		window = proto.DefaultWindow
	}
	p.mu.Lock()
	p.att = &attachment{c: c, stream: stream}
	for _, o := range p.outs {
		o.credit = window
		if len(o.ring) > 0 {
			data := o.ring
			if int64(len(data)) > o.credit {
				o.dropped += int64(len(data)) - o.credit
				data = data[int64(len(data))-o.credit:]
			}
			o.ring = nil
			o.credit -= int64(len(data))
			o.delivered += int64(len(data))
			c.send(proto.Frame{Type: proto.TypeData, ID: stream, Payload: proto.DataPayload(o.fd, data)})
		}
		if o.hostDone {
			c.send(proto.Frame{Type: proto.TypeEOF, ID: stream, Payload: []byte{o.fd}})
		}
	}
	final := p.final
	p.cond.Broadcast()
	p.mu.Unlock()
	if final != nil {
		c.sendExit(stream, *final)
	}
}

// detach is called when the attached connection goes away.
func (p *proc) detach(c *conn) {
	p.mu.Lock()
	if p.att != nil && p.att.c == c {
		p.att = nil
		p.cond.Broadcast()
	}
	p.mu.Unlock()
}

// input implements stream: stdin from the host (dropped when the process
// has no stdin pipe or it is closed).
func (p *proc) input(b []byte) bool {
	if p.stdin == nil {
		return true
	}
	return p.stdin.push(b)
}

// inputEOF implements stream.
func (p *proc) inputEOF() {
	if p.stdin != nil {
		p.stdin.closeInput()
	}
}

func (p *proc) addCredit(fd byte, n uint32) {
	p.mu.Lock()
	for _, o := range p.outs {
		if o.fd == fd {
			o.credit += int64(n)
		}
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *proc) closeFiles() {
	p.mu.Lock()
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, o := range p.outs {
		o.f.Close()
	}
	if p.stdin != nil {
		p.stdin.kill()
	}
}

func newStdinWriter(p *proc, f *os.File) *stdinWriter {
	w := &stdinWriter{p: p, f: f}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// push queues data from the host. The host never sends more than the credit
// it was granted; a host that does is cut off by the connection.
func (w *stdinWriter) push(b []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead || w.eof {
		return true // process gone or stdin closed: drop silently
	}
	if w.queued+len(b) > proto.DefaultWindow {
		return false
	}
	w.queue = append(w.queue, b)
	w.queued += len(b)
	w.cond.Signal()
	return true
}

func (w *stdinWriter) closeInput() {
	w.mu.Lock()
	w.eof = true
	w.cond.Signal()
	w.mu.Unlock()
}

// kill stops the writer: the process is gone.
func (w *stdinWriter) kill() {
	w.mu.Lock()
	w.dead = true
	w.queue = nil
	w.cond.Signal()
	w.mu.Unlock()
}

func (w *stdinWriter) run() {
	isTTY := w.p.tty != nil
	defer func() {
		if !isTTY { // the pty master is the pump's to close
			w.f.Close()
		}
	}()
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && !w.eof && !w.dead && w.p.s.ctx.Err() == nil {
			w.cond.Wait()
		}
		if w.dead || w.p.s.ctx.Err() != nil || (len(w.queue) == 0 && w.eof) {
			eof := w.eof && !w.dead
			w.mu.Unlock()
			if eof && isTTY {
				// A terminal has no "close": send the EOF character.
				_, _ = w.f.Write([]byte{4})
			}
			return
		}
		b := w.queue[0]
		w.queue = w.queue[1:]
		w.mu.Unlock()

		_, err := w.f.Write(b)

		w.mu.Lock()
		w.queued -= len(b)
		w.mu.Unlock()
		if err != nil {
			w.kill()
			return
		}
		w.p.mu.Lock()
		att := w.p.att
		w.p.mu.Unlock()
		if att != nil {
			att.c.send(proto.Frame{Type: proto.TypeWindow, ID: att.stream, Payload: proto.WindowPayload(proto.FdStdin, uint32(len(b)))})
		}
	}
}

// lookPath finds a command the way a shell would, in the box's PATH.
func lookPath(name, path, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := isExecutable(p); err != nil {
			return "", fmt.Errorf("exec: %s: %w", name, err)
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		if isExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: command not found in the box's PATH (%s)", name, path)
}

func isExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return errors.New("is a directory")
	}
	if fi.Mode()&0o111 == 0 {
		return errors.New("permission denied (not executable)")
	}
	return nil
}

// raiseOOMScore makes the OOM killer prefer the box's commands over the agent.
// Raising a score needs no privilege.
func raiseOOMScore(pid int) {
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("300"), 0)
}
