package agentd_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/agentd"
)

// serve runs an agent in this process on a unix socket and returns the
// host side connected to it: the real client over the real protocol.
func serve(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	srv, err := agentd.New(agentd.Config{BoxID: "pump-test", Workdir: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := (&net.Dialer{}).DialContext(ctx, "unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.Connect(ctx, nil, sandbox.Handle{ID: "pump-test"}, nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

// TestOutputBufferedAtExitIsDelivered: a command's output still in its
// pipe when the pump's post-exit deadline has already passed reaches the
// attached host whole, nothing counted as dropped. Before the fix, an
// expired deadline failed the read without looking at the pipe, the pump
// reported EOF, and then drained the output as "dropped": CI once saw
// `echo 27` come back empty with "(3 bytes of output dropped)" under
// gVisor and load. ForceExpiredLinger makes that schedule certain.
func TestOutputBufferedAtExitIsDelivered(t *testing.T) {
	defer agentd.ForceExpiredLinger()()
	sb := serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 20 {
		var out, errb bytes.Buffer
		want := fmt.Sprintf("out %d\n", i)
		st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", fmt.Sprintf("printf 'out %d\\n'; printf 'err %d\\n' >&2", i, i)}, Stdout: &out, Stderr: &errb})
		if err != nil {
			t.Fatal(err)
		}
		if !st.Success() || st.Dropped != 0 || out.String() != want || errb.String() != fmt.Sprintf("err %d\n", i) {
			t.Fatalf("run %d: %v, stdout %q, stderr %q; want success, nothing dropped, %q", i, st, out.String(), errb.String(), want)
		}
	}
	// A PTY's output, likewise.
	var out bytes.Buffer
	st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"echo", "tty"}, TTY: &sandbox.TTYSize{Rows: 24, Cols: 80}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Success() || st.Dropped != 0 || !bytes.Contains(out.Bytes(), []byte("tty")) {
		t.Fatalf("pty: %v, output %q", st, out.String())
	}
}
