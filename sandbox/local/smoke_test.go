package local_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local"
)

func TestSmoke(t *testing.T) {
	p := local.New(local.Config{RunDir: testbin.TempDir(t), AgentBinary: testbin.Agent(t), CgroupParent: "harvest-test"})
	if err := p.Available(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws := testbin.Workspace(t, 1000, 1000)
	t0 := time.Now()
	sb, err := p.Start(ctx, sandbox.Spec{Workspaces: []sandbox.Workspace{{Name: "w", HostPath: ws}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("start: %v", time.Since(t0))
	defer func() {
		t0 := time.Now()
		if err := sb.Destroy(context.Background()); err != nil {
			t.Error(err)
		}
		t.Logf("destroy: %v", time.Since(t0))
	}()
	var out bytes.Buffer
	st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "id; pwd; echo $$; ls -la /proc/1/fd; cat /proc/self/status | grep -i 'seccomp\\|nonew'; touch /workspace/w/hello; ls /workspace/w"}, Stdout: &out, Stderr: &out})
	t.Logf("%v\n%s", st, out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !st.Success() {
		t.Fatalf("the smoke command: %v", st)
	}
	for _, want := range []string{"uid=1000(user) gid=1000(user)", "\n/workspace/w\n", "NoNewPrivs:\t1", "Seccomp:\t2", "\nhello\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the smoke command's output lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "hello")); err != nil {
		t.Errorf("the file touched in the box is not in the workspace on the host: %v", err)
	}
	// A failure comes back as one, code and all.
	if st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "exit 3"}}); err != nil || st.Code != 3 || st.Signal != 0 {
		t.Errorf("exit 3: %v, %v", st, err)
	}
	if st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "kill -TERM $$"}}); err != nil || st.Signal != syscall.SIGTERM {
		t.Errorf("kill -TERM $$: %v, %v", st, err)
	}
	t0 = time.Now()
	for i := 0; i < 100; i++ {
		if st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}}); err != nil || !st.Success() {
			t.Fatalf("true, run %d: %v, %v", i, st, err)
		}
	}
	t.Logf("100 x true: %v", time.Since(t0))
}

// TestFullBinaryAsAgent: without harvest-agent, the full harvest binary runs
// the shim and the in-box agent (the same code, slower to start).
func TestFullBinaryAsAgent(t *testing.T) {
	full := testbin.Harvest(t)
	p := local.New(local.Config{RunDir: testbin.TempDir(t), AgentBinary: full})
	testreq.Check(t, testreq.Local, p.Available(context.Background()))
	want, err := os.Stat(full)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := p.Start(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	var out bytes.Buffer
	if st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "cat /proc/1/cmdline | tr '\\0' ' '"}, Stdout: &out}); err != nil || !st.Success() {
		t.Fatal(st, err)
	}
	if got := out.String(); !strings.HasPrefix(got, "/.harvest/bin/harvest-agent sandbox-agent ") {
		t.Errorf("PID 1 in the box: %q", got)
	}
	if fi, err := sb.Stat(ctx, "/.harvest/bin/harvest-agent"); err != nil || fi.Size != want.Size() {
		t.Errorf("the box runs a %d-byte agent, not the %d-byte harvest binary (%v)", fi.Size, want.Size(), err)
	}
}
