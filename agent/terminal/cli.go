package terminal

import (
	"context"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
)

// cli is one run of the interactive CLI on the box's PTY.
//
// Input goes through a channel to one writer goroutine that owns the
// write end of the stdin pipe: a CLI that stops reading its terminal can
// block that goroutine, never the turn. stop closes the pipe, which ends
// both the writer and the sandbox's stdin copier, and waits for the writer.
type cli struct {
	p       *sandbox.Process
	stdin   *io.PipeWriter
	input   chan []byte
	wg      sync.WaitGroup
	started time.Time

	// Readiness of this run (touched by the turn goroutine only).
	sessionStarted bool // Claude Code: its SessionStart hook ran
	ready          bool // it took (or may take) input
	closeOnce      sync.Once
}

func startCLI(ctx context.Context, sb *sandbox.Sandbox, args, env []string, dir string, rows, cols uint16, out io.Writer) (*cli, error) {
	pr, pw := io.Pipe()
	p, err := sb.Start(ctx, &sandbox.Cmd{
		Args: args, Env: env, Dir: dir,
		Stdin: pr, Stdout: out,
		TTY: &sandbox.TTYSize{Rows: rows, Cols: cols},
	})
	if err != nil {
		pw.Close()
		return nil, err
	}
	c := &cli{p: p, stdin: pw, input: make(chan []byte, 64), started: time.Now()}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for b := range c.input {
			if _, err := pw.Write(b); err != nil {
				for range c.input { // drain until close
				}
				return
			}
		}
	}()
	return c, nil
}

// send types b into the terminal (in order with earlier sends).
func (c *cli) send(b []byte) {
	if len(b) == 0 {
		return
	}
	select {
	case c.input <- append([]byte(nil), b...):
	case <-c.p.Done():
	}
}

// exited reports whether the process has exited (and its output is in).
func (c *cli) exited() bool {
	select {
	case <-c.p.Done():
		return true
	default:
		return false
	}
}

// release closes the input side and waits for the writer goroutine. Call
// it once the process is gone (or abandoned).
func (c *cli) release() {
	c.closeOnce.Do(func() {
		if c.input != nil {
			close(c.input)
		}
		if c.stdin != nil {
			c.stdin.Close()
		}
	})
	c.wg.Wait()
}

// status describes how the process ended.
func (c *cli) status() string {
	st, err := c.p.Wait(context.Background())
	if err != nil {
		return err.Error()
	}
	return st.String()
}

// terminate ends the process: sigs (the CLI's own clean exit), then after
// grace SIGKILL of its whole tree, then waits up to grace again. It returns
// an error only if the process is still there after all that.
func (c *cli) terminate(ctx context.Context, grace time.Duration, sigs ...syscall.Signal) error {
	if !c.exited() {
		sctx, cancel := context.WithTimeout(ctx, grace)
		for _, sig := range sigs {
			_ = c.p.Signal(sctx, sig)
		}
		_, _ = c.p.Wait(sctx)
		cancel()
	}
	if !c.exited() {
		kctx, cancel := context.WithTimeout(ctx, grace)
		_ = c.p.Kill(kctx)
		_, _ = c.p.Wait(kctx)
		cancel()
	}
	c.release()
	if !c.exited() {
		return fmt.Errorf("the CLI (pid %d in the box) did not exit after SIGINT and SIGKILL", c.p.PID())
	}
	return nil
}
