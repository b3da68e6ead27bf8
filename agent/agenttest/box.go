package agenttest

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local"
	"github.com/harvest-dev/harvest/sim"
)

// The agents' tests run the real thing: a local box with the CLIs' npm
// prefix mounted, the sim served on a listener inside it (where the
// session layer serves the model proxy). These set that up.

// Provider is a local sandbox provider with a run dir of the test's own,
// closed when the test ends. Where the local backend cannot run, the test
// is skipped, or fails where it is required (testreq.Local).
func Provider(t testing.TB) *local.Provider {
	t.Helper()
	p := local.New(local.Config{RunDir: testbin.TempDir(t), AgentBinary: testbin.Agent(t)})
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Available(ctx); err != nil {
		testreq.Unavailable(t, testreq.Local, "the local sandbox backend is not available: %v", err)
	}
	return p
}

// Workspace returns a workspace directory holding files (name → content),
// everything owned by the box user.
func Workspace(t *testing.T, files map[string]string) string {
	t.Helper()
	ws := testbin.Workspace(t, sandbox.DefaultUID, sandbox.DefaultGID)
	for name, content := range files {
		p := filepath.Join(ws, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			if err := os.Chown(p, sandbox.DefaultUID, sandbox.DefaultGID); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ws
}

// StartBox starts a box with workspace "repo" on ws, as the box user, with
// mounts; it is destroyed when the test ends.
func StartBox(ctx context.Context, t *testing.T, p *local.Provider, ws string, mounts ...sandbox.Mount) *sandbox.Sandbox {
	t.Helper()
	sb, err := p.Start(ctx, sandbox.Spec{
		Workspaces: []sandbox.Workspace{{Name: "repo", HostPath: ws}},
		User:       sandbox.User{UID: sandbox.DefaultUID, GID: sandbox.DefaultGID},
		Mounts:     mounts,
	})
	if err != nil {
		t.Fatalf("starting a box: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("destroying the box: %v", err)
		}
	})
	return sb
}

// ServeIn serves h on a loopback listener inside sb until the test ends and
// returns its in-box URL.
func ServeIn(ctx context.Context, t *testing.T, sb *sandbox.Sandbox, h http.Handler) string {
	t.Helper()
	ln, err := sb.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening in the box: %v", err)
	}
	srv := &http.Server{Handler: h}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})
	return "http://" + ln.Addr().String()
}

// LogRequestsOnFailure logs every request s saw if the test fails.
func LogRequestsOnFailure(t *testing.T, s *sim.Server) {
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range s.Requests() {
				t.Logf("sim request #%d %s %s rule %q status %d %s", r.Seq, r.Method, r.Path, r.Rule, r.Status, r.Error)
			}
		}
	})
}
