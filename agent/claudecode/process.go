package claudecode

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"

	"github.com/harvest-dev/harvest/sandbox"
)

// maxLine bounds one stdout line of the CLI. A Read of a big file or a long
// tool output arrives as one line; a line longer than this is a protocol
// failure (the turn fails, the process is killed).
const maxLine = 32 << 20

// errExited closes the stdin pipe of a process that is gone.
var errExited = errors.New("claude code exited")

// proc is one running Claude Code process in the box and the three
// goroutines that serve it, all started by startProc and waited for by
// kill/release:
//
//   - reader: splits stdout into lines and hands them to the turn on lines;
//     after stop is closed (the process is being killed) it discards, so the
//     box's output never backs up.
//   - writer: copies queued stdin lines (messages, control requests) into
//     the stdin pipe the sandbox reads; a write that blocks (a CLI that stops
//     reading) ends when the process does.
//   - waiter: when the process has exited and its output was delivered,
//     closes both pipes, which ends the reader (EOF) and the writer.
type proc struct {
	p      *sandbox.Process
	lines  chan []byte // stdout, one line each; closed at EOF
	writes chan []byte
	stop   chan struct{} // closed by kill
	once   sync.Once
	stderr *tail
	wg     sync.WaitGroup

	readErr error // set by the reader before it closes lines

	// cost is the last total_cost_usd this process printed: Claude Code
	// counts cost per process, so a turn's cost is the difference.
	cost    float64
	resumed bool // started with --resume
}

// startProc starts cmd (without Stdin/Stdout/Stderr: startProc wires them).
func startProc(ctx context.Context, box *sandbox.Sandbox, cmd *sandbox.Cmd) (*proc, error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	pr := &proc{
		lines:  make(chan []byte, 256),
		writes: make(chan []byte, 16),
		stop:   make(chan struct{}),
		stderr: &tail{max: 8 << 10},
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, pr.stderr
	p, err := box.Start(ctx, cmd)
	if err != nil {
		inW.Close()
		outW.Close()
		return nil, err
	}
	pr.p = p
	pr.wg.Add(3)
	go pr.read(outR)
	go pr.write(inW)
	go func() {
		defer pr.wg.Done()
		<-p.Done()
		outW.Close()
		inW.CloseWithError(errExited)
		// The sandbox's stdin copier reads inR until EOF or an error.
		inR.CloseWithError(errExited)
	}()
	return pr, nil
}

func (pr *proc) read(r *io.PipeReader) {
	defer pr.wg.Done()
	defer close(pr.lines)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		b := bytes.Clone(sc.Bytes())
		select {
		case pr.lines <- b:
		case <-pr.stop:
			_, _ = io.Copy(io.Discard, r)
			return
		}
	}
	if err := sc.Err(); err != nil {
		pr.readErr = err
		// Keep draining so the process is never blocked on its stdout.
		_, _ = io.Copy(io.Discard, r)
	}
}

func (pr *proc) write(w *io.PipeWriter) {
	defer pr.wg.Done()
	for {
		select {
		case b := <-pr.writes:
			if b == nil { // closeStdin
				w.Close()
				return
			}
			if _, err := w.Write(b); err != nil {
				return
			}
		case <-pr.stop:
			return
		case <-pr.p.Done():
			return
		}
	}
}

// send queues a line for the CLI's stdin.
func (pr *proc) send(ctx context.Context, b []byte) error {
	select {
	case pr.writes <- b:
		return nil
	case <-pr.p.Done():
		return errExited
	case <-pr.stop:
		return errExited
	case <-ctx.Done():
		return ctx.Err()
	}
}

// exited reports whether the process has ended.
func (pr *proc) exited() bool {
	select {
	case <-pr.p.Done():
		return true
	default:
		return false
	}
}

// status waits (bounded by ctx) for the exit status.
func (pr *proc) status(ctx context.Context) string {
	st, err := pr.p.Wait(ctx)
	if err != nil {
		return err.Error()
	}
	return st.String()
}

// signal sends sig to the CLI's process group.
func (pr *proc) signal(ctx context.Context, sig syscall.Signal) error {
	return pr.p.Signal(ctx, sig)
}

// closeStdin ends the CLI's input: Claude Code then finishes and exits.
func (pr *proc) closeStdin(ctx context.Context) error {
	return pr.send(ctx, nil)
}

// kill kills the process and everything it started, and waits (bounded by
// ctx) for it and the goroutines serving it.
func (pr *proc) kill(ctx context.Context) error {
	pr.once.Do(func() { close(pr.stop) })
	var errs []error
	if err := pr.p.Kill(ctx); err != nil {
		errs = append(errs, fmt.Errorf("killing claude code (pid %d in the box): %w", pr.p.PID(), err))
	}
	if err := pr.release(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// release waits (bounded by ctx) for the process to be gone, then for the
// goroutines serving it, which end promptly once it is: the waiter has
// closed both pipes, and the reader discards what is left.
func (pr *proc) release(ctx context.Context) error {
	if _, err := pr.p.Wait(ctx); err != nil && ctx.Err() != nil {
		return fmt.Errorf("waiting for claude code (pid %d in the box) to exit: %w", pr.p.PID(), err)
	}
	pr.once.Do(func() { close(pr.stop) })
	pr.wg.Wait()
	return nil
}

// tail keeps the last max bytes written to it (the CLI's stderr, quoted in
// errors).
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}
