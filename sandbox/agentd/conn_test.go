package agentd

import (
	"bytes"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
)

// flaky fails its first writes with err after taking part of the data, the
// way a socket send does when the box's cgroup has no memory for buffers.
type flaky struct {
	fails int
	err   error
	buf   bytes.Buffer
}

func (f *flaky) Write(p []byte) (int, error) {
	if f.fails > 0 {
		f.fails--
		n := len(p) / 2
		f.buf.Write(p[:n])
		return n, &net.OpError{Op: "write", Net: "unix", Err: os.NewSyscallError("write", f.err)}
	}
	return f.buf.Write(p)
}

// TestRetryingWriter: ENOMEM and ENOBUFS are waited out and every byte goes
// out once; other errors, and a closed connection, end the write at once.
func TestRetryingWriter(t *testing.T) {
	for _, e := range []syscall.Errno{syscall.ENOMEM, syscall.ENOBUFS} {
		f := &flaky{fails: 3, err: e}
		msg := []byte("a frame the host must get whole")
		n, err := retryingWriter{w: f, closed: make(chan struct{})}.Write(msg)
		if err != nil || n != len(msg) || f.buf.String() != string(msg) {
			t.Errorf("%v: wrote %d, %v; the writer got %q", e, n, err, f.buf.String())
		}
	}
	f := &flaky{fails: 1, err: syscall.EPIPE}
	if _, err := (retryingWriter{w: f, closed: make(chan struct{})}).Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Errorf("EPIPE: %v, want it returned", err)
	}
	closed := make(chan struct{})
	close(closed)
	f = &flaky{fails: 1000, err: syscall.ENOMEM}
	if _, err := (retryingWriter{w: f, closed: closed}).Write([]byte("xy")); !errors.Is(err, syscall.ENOMEM) {
		t.Errorf("on a closed connection: %v, want the ENOMEM at once", err)
	}
}
