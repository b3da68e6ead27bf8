package cli

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/wire"
)

// TestServeSIGTERMDuringClone: `harvest serve` stopped with SIGTERM while a
// session's clone hangs on a server that accepts and never answers exits
// within its grace period, and no process of the clone is left.
func TestServeSIGTERMDuringClone(t *testing.T) {
	e := newServeEnv(t)
	url, _ := testbin.HangingGitServer(t)
	s := e.start()
	c := e.client(s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: url}}, Prompt: "msg hi"}); err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, time.Minute, "the clone to start", func() bool { return len(testbin.ProcsWith(url)) > 0 })
	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(serveGrace + 5*time.Second):
		t.Fatalf("serve did not exit %s after SIGTERM:\n%s", serveGrace+5*time.Second, s.stderr)
	}
	t.Logf("SIGTERM to exit: %s", time.Since(start))
	if s.err != nil {
		t.Errorf("serve exited with %v:\n%s", s.err, s.stderr)
	}
	if ps := testbin.ProcsWith(url); len(ps) > 0 {
		t.Fatalf("processes of the clone outlive serve: %q", ps)
	}
}

// serveGrace is how long serve may take to stop after SIGTERM.
const serveGrace = 10 * time.Second
