package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/sandbox/proto"
)

// Cmd is a command to run in a box. It mirrors os/exec.Cmd.
type Cmd struct {
	// Args is the command and its arguments; Args[0] is looked up in the box's
	// PATH.
	Args []string
	// Env entries (KEY=VALUE) override the box's environment.
	Env []string
	// Dir is the working directory in the box; default: the box's workdir.
	Dir string
	// Stdin, when set, is copied to the process; nil means /dev/null.
	Stdin io.Reader
	// Stdout and Stderr receive the output; nil discards it. With a TTY both
	// are the terminal and everything goes to Stdout. The streams are
	// copied concurrently; when both are the same writer it gets one Write
	// at a time, as with os/exec.
	Stdout io.Writer
	Stderr io.Writer
	// TTY runs the command on a pseudo-terminal of this size.
	TTY *TTYSize
	// OutputLimit caps the bytes delivered per stream; the rest is dropped in
	// the box (ExitStatus.Dropped) so a flood never blocks the command.
	OutputLimit int64
	// Timeout kills the command's process tree after this long, enforced by the
	// in-box agent (it holds even if Harvest is gone).
	Timeout time.Duration
}

// TTYSize is a terminal size.
type TTYSize struct{ Rows, Cols uint16 }

// ExitStatus is how a process ended.
type ExitStatus struct {
	// Code is the exit code, or -1 when a signal killed the process.
	Code int `json:"code"`
	// Signal is the signal that killed it (0 if it exited).
	Signal syscall.Signal `json:"signal,omitempty"`
	// OOMKilled: the kernel's OOM killer ended it (the box hit its memory
	// limit).
	OOMKilled bool `json:"oom_killed,omitempty"`
	// TimedOut: Cmd.Timeout ended it.
	TimedOut bool `json:"timed_out,omitempty"`
	// BoxTimedOut: the box's time limit (Spec.Timeout) ended it, with
	// SIGTERM or, after a grace, SIGKILL.
	BoxTimedOut bool `json:"box_timed_out,omitempty"`
	// Dropped counts output bytes discarded by OutputLimit or while detached.
	Dropped  int64         `json:"dropped,omitempty"`
	Duration time.Duration `json:"duration"`
}

func exitFromProto(st proto.ExitStatus) ExitStatus {
	return ExitStatus{
		Code: st.Code, Signal: syscall.Signal(st.Signal), OOMKilled: st.OOMKilled,
		TimedOut: st.TimedOut, BoxTimedOut: st.BoxTimedOut, Dropped: st.Dropped, Duration: time.Duration(st.DurationMS) * time.Millisecond,
	}
}

// Success reports exit code 0.
func (e ExitStatus) Success() bool { return e.Code == 0 && e.Signal == 0 }

// ShellCode is the status a shell would report: the code, or 128+signal.
func (e ExitStatus) ShellCode() int {
	if e.Signal != 0 {
		return 128 + int(e.Signal)
	}
	return e.Code
}

func (e ExitStatus) String() string {
	var s string
	if e.Signal != 0 {
		name := unix.SignalName(e.Signal)
		if name == "" {
			name = fmt.Sprintf("signal %d", int(e.Signal))
		}
		s = "killed by " + name
	} else {
		s = fmt.Sprintf("exit status %d", e.Code)
	}
	if e.OOMKilled {
		s += " (out of memory: the box hit its memory limit)"
	}
	if e.TimedOut {
		s += " (timed out)"
	}
	if e.BoxTimedOut {
		s += " (the box's time limit was reached)"
	}
	if e.Dropped > 0 {
		s += fmt.Sprintf(" (%d bytes of output dropped)", e.Dropped)
	}
	return s
}

// stream is the host end of one process's output and stdin.
type stream struct {
	id uint32

	mu          sync.Mutex
	cond        *sync.Cond
	pending     [3][]byte // per fd, bounded by the window we granted
	eofs        [3]bool
	window      int64
	status      *proto.ExitStatus
	err         error
	stdinCredit int64
}

func newStream(window int64) *stream {
	s := &stream{window: window}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *stream) push(fd byte, b []byte) error {
	if fd != proto.FdStdout && fd != proto.FdStderr {
		return fmt.Errorf("data for fd %d", fd)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if int64(len(s.pending[fd])+len(b)) > s.window {
		return fmt.Errorf("agent overran its window on fd %d", fd)
	}
	s.pending[fd] = append(s.pending[fd], b...)
	s.cond.Broadcast()
	return nil
}

func (s *stream) eof(fd byte) {
	if fd > 2 {
		return
	}
	s.mu.Lock()
	s.eofs[fd] = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (s *stream) exit(st proto.ExitStatus) {
	s.mu.Lock()
	s.status = &st
	s.eofs[1], s.eofs[2] = true, true
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (s *stream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (s *stream) addStdinCredit(n int64) {
	s.mu.Lock()
	s.stdinCredit += n
	s.cond.Broadcast()
	s.mu.Unlock()
}

// Process is a command running in a box.
type Process struct {
	sb     *Sandbox
	st     *stream
	proc   uint64
	pid    int
	copies sync.WaitGroup // output copiers; Wait waits for them
	done   chan struct{}  // closed when the exit status (or an error) is in
	exit   ExitStatus
	err    error
}

// ID is the process's id in the box's agent (stable across reconnects).
func (p *Process) ID() uint64 { return p.proc }

// PID is the process's pid inside the box.
func (p *Process) PID() int { return p.pid }

// Start starts cmd in the box. The context bounds the start only; use
// Process.Wait, Kill or Sandbox.Run to bound the run.
func (sb *Sandbox) Start(ctx context.Context, cmd *Cmd) (*Process, error) {
	if cmd == nil || len(cmd.Args) == 0 {
		return nil, errors.New("sandbox: no command to run")
	}
	st := newStream(proto.DefaultWindow)
	id, err := sb.c.registerStream(st)
	if err != nil {
		return nil, err
	}
	st.id = id
	prm := proto.ExecParams{
		Stream: id, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir, Stdin: cmd.Stdin != nil,
		OutputLimit: cmd.OutputLimit, TimeoutMS: cmd.Timeout.Milliseconds(), Window: proto.DefaultWindow,
	}
	if cmd.Timeout > 0 && prm.TimeoutMS == 0 {
		prm.TimeoutMS = 1
	}
	if cmd.TTY != nil {
		prm.TTY = &proto.TTY{Rows: cmd.TTY.Rows, Cols: cmd.TTY.Cols}
	}
	var r proto.ExecReply
	var t0 time.Time
	if sb.obs != nil {
		t0 = time.Now()
	}
	_, err = sb.c.call(ctx, proto.MethodExec, prm, nil, &r)
	if sb.obs != nil {
		sb.obs.BoxOp(sb.handle.Backend, OpExec, time.Since(t0), err)
	}
	if err != nil {
		sb.c.dropStream(id)
		return nil, fmt.Errorf("starting %q in box %s: %w", cmd.Args[0], sb.handle.ID, err)
	}
	st.mu.Lock()
	st.stdinCredit += int64(r.StdinWindow)
	st.mu.Unlock()
	p := &Process{sb: sb, st: st, proc: r.Proc, pid: r.PID, done: make(chan struct{})}
	p.run(cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.TTY != nil)
	return p, nil
}

func (p *Process) run(stdin io.Reader, stdout, stderr io.Writer, tty bool) {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	if sameWriter(stdout, stderr) {
		// As os/exec does: one writer for both streams gets one Write at
		// a time (the streams are copied by two goroutines).
		w := &lockedWriter{w: stdout}
		stdout, stderr = w, w
	}
	p.copies.Add(1)
	go p.copyOut(proto.FdStdout, stdout)
	if !tty {
		p.copies.Add(1)
		go p.copyOut(proto.FdStderr, stderr)
	}
	if stdin != nil {
		// Not waited for by Wait: a Read on a terminal may never return. It
		// ends at the first Read after the process is gone.
		go p.copyIn(stdin)
	}
	go func() {
		p.copies.Wait()
		p.st.mu.Lock()
		for p.st.status == nil && p.st.err == nil {
			p.st.cond.Wait()
		}
		if p.st.status != nil {
			p.exit = exitFromProto(*p.st.status)
		} else {
			p.err = fmt.Errorf("lost the connection to box %s while process %d ran: %w", p.sb.handle.ID, p.proc, p.st.err)
		}
		p.st.mu.Unlock()
		close(p.done)
	}()
}

// sameWriter reports whether a and b are the same comparable writer.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil { // an incomparable dynamic type
			same = false
		}
	}()
	return a == b && a != io.Discard
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// copyOut delivers one fd's output to w and returns credit as w accepts it.
func (p *Process) copyOut(fd byte, w io.Writer) {
	defer p.copies.Done()
	s := p.st
	for {
		s.mu.Lock()
		for len(s.pending[fd]) == 0 && !s.eofs[fd] && s.err == nil {
			s.cond.Wait()
		}
		data := s.pending[fd]
		s.pending[fd] = nil
		eof := s.eofs[fd] || s.err != nil
		s.mu.Unlock()
		if len(data) > 0 {
			_, _ = w.Write(data) // a failing writer must not stall the process
			if !eof {
				_ = p.sb.c.write(proto.Frame{Type: proto.TypeWindow, ID: s.id, Payload: proto.WindowPayload(fd, uint32(len(data)))})
			}
		}
		if eof && len(data) == 0 {
			return
		}
	}
}

func (p *Process) copyIn(r io.Reader) {
	s := p.st
	buf := make([]byte, proto.MaxData)
	for {
		n, err := r.Read(buf)
		for off := 0; off < n; {
			s.mu.Lock()
			for s.stdinCredit <= 0 && s.status == nil && s.err == nil {
				s.cond.Wait()
			}
			if s.status != nil || s.err != nil {
				s.mu.Unlock()
				return
			}
			k := int64(n - off)
			if k > s.stdinCredit {
				k = s.stdinCredit
			}
			s.stdinCredit -= k
			s.mu.Unlock()
			if p.sb.c.write(proto.Frame{Type: proto.TypeData, ID: s.id, Payload: proto.DataPayload(proto.FdStdin, buf[off:off+int(k)])}) != nil {
				return
			}
			off += int(k)
		}
		if err != nil {
			_ = p.sb.c.write(proto.Frame{Type: proto.TypeEOF, ID: s.id, Payload: []byte{proto.FdStdin}})
			return
		}
		select {
		case <-p.done:
			return
		default:
		}
	}
}

// Wait waits for the process to exit and its output to be delivered. When ctx
// ends first, Wait returns ctx.Err() and the process keeps running.
func (p *Process) Wait(ctx context.Context) (ExitStatus, error) {
	select {
	case <-p.done:
		return p.exit, p.err
	case <-ctx.Done():
		return ExitStatus{}, ctx.Err()
	}
}

// Done is closed when the process has exited and its output was delivered.
func (p *Process) Done() <-chan struct{} { return p.done }

// Signal sends sig to the process's process group.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	_, err := p.sb.c.call(ctx, proto.MethodSignal, proto.SignalParams{Proc: p.proc, Signal: int(sig), Group: true}, nil, nil)
	if isNoProcess(err) {
		return nil // already exited
	}
	return err
}

// Kill kills the process and every descendant.
func (p *Process) Kill(ctx context.Context) error {
	_, err := p.sb.c.call(ctx, proto.MethodKill, proto.KillParams{Proc: p.proc}, nil, nil)
	if isNoProcess(err) {
		return nil
	}
	return err
}

// Resize changes the size of the process's terminal.
func (p *Process) Resize(ctx context.Context, rows, cols uint16) error {
	_, err := p.sb.c.call(ctx, proto.MethodResize, proto.ResizeParams{Proc: p.proc, Rows: rows, Cols: cols}, nil, nil)
	return err
}

func isNoProcess(err error) bool {
	var pe *proto.Error
	return errors.As(err, &pe) && pe.Code == proto.CodeNoProcess
}

// Run runs cmd and waits for it. If ctx ends first, the process tree is killed
// and Run returns ctx.Err() once the process is gone.
func (sb *Sandbox) Run(ctx context.Context, cmd *Cmd) (ExitStatus, error) {
	p, err := sb.Start(ctx, cmd)
	if err != nil {
		return ExitStatus{}, err
	}
	st, err := p.Wait(ctx)
	if err == nil || ctx.Err() == nil {
		return st, err
	}
	kctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.Kill(kctx)
	_, _ = p.Wait(kctx)
	return ExitStatus{}, ctx.Err()
}

// Attach reattaches to a process the agent started earlier (for example
// before Harvest restarted). Output produced while detached is replayed from a
// bounded ring.
func (sb *Sandbox) Attach(ctx context.Context, proc uint64, stdout, stderr io.Writer) (*Process, error) {
	st := newStream(proto.DefaultWindow)
	id, err := sb.c.registerStream(st)
	if err != nil {
		return nil, err
	}
	st.id = id
	var r proto.ExecReply
	if _, err := sb.c.call(ctx, proto.MethodAttach, proto.AttachParams{Proc: proc, Stream: id, Window: proto.DefaultWindow}, nil, &r); err != nil {
		sb.c.dropStream(id)
		return nil, fmt.Errorf("attaching to process %d in box %s: %w", proc, sb.handle.ID, err)
	}
	p := &Process{sb: sb, st: st, proc: r.Proc, pid: r.PID, done: make(chan struct{})}
	p.run(nil, stdout, stderr, false)
	return p, nil
}
