package local_test

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local"
)

// Commands in a box start with every signal at its default disposition:
// nothing the in-box agent ignores for itself (SIGPIPE, SIGHUP) is
// inherited, so a pipeline's writer dies of SIGPIPE and a process dies of
// its terminal's hangup, as outside a box.
func TestCommandsGetDefaultSignals(t *testing.T) {
	p := local.New(local.Config{RunDir: testbin.TempDir(t), AgentBinary: testbin.Agent(t)})
	t.Cleanup(func() { p.Close() })
	if err := p.Available(context.Background()); err != nil {
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
	if _, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"grep", "SigIgn", "/proc/self/status"}, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(out.String())
	if len(f) != 2 {
		t.Fatalf("status line %q", out.String())
	}
	mask, err := strconv.ParseUint(f[1], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []uint{1, 13} { // SIGHUP, SIGPIPE
		if mask&(1<<(sig-1)) != 0 {
			t.Errorf("a command in the box starts with signal %d ignored (SigIgn %s)", sig, f[1])
		}
	}
	// And the pipeline: yes ends when head is done.
	out.Reset()
	st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "yes | head -n 2; echo done"}, Stdout: &out, Timeout: 20 * time.Second})
	if err != nil || !st.Success() || out.String() != "y\ny\ndone\n" {
		t.Fatalf("yes | head: %v %v %q", st, err, out.String())
	}
}

// TestAgentIgnoresSignalsFromTheBox: the agent catches no signal (it runs
// with --no-signals, see package agentd), so the kernel drops SIGTERM,
// SIGINT and SIGHUP sent to the box's PID 1 from inside: a command cannot
// end its box, and the box keeps serving after it tried.
func TestAgentIgnoresSignalsFromTheBox(t *testing.T) {
	p := local.New(local.Config{RunDir: testbin.TempDir(t), AgentBinary: testbin.Agent(t)})
	t.Cleanup(func() { p.Close() })
	if err := p.Available(context.Background()); err != nil {
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
	st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "kill -TERM 1; kill -INT 1; kill -HUP 1; echo sent"}, Stdout: &out})
	if err != nil || !st.Success() || out.String() != "sent\n" {
		t.Fatalf("signalling PID 1: %v %v %q", st, err, out.String())
	}
	out.Reset()
	st, err = sb.Run(ctx, &sandbox.Cmd{Args: []string{"echo", "alive"}, Stdout: &out})
	if err != nil || !st.Success() || out.String() != "alive\n" {
		t.Fatalf("the box after its PID 1 was signalled: %v %v %q", st, err, out.String())
	}
}
