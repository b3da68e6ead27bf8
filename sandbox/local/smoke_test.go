package local_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
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
	t0 = time.Now()
	for i := 0; i < 100; i++ {
		if _, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("100 x true: %v", time.Since(t0))
}

// TestFullBinaryAsAgent: without harvest-agent, the full harvest binary runs
// the shim and the in-box agent (the same code, slower to start).
func TestFullBinaryAsAgent(t *testing.T) {
	full := testbin.Harvest(t)
	p := local.New(local.Config{RunDir: testbin.TempDir(t), AgentBinary: full})
	if err := p.Available(context.Background()); err != nil {
		t.Skip(err)
	}
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
