// Package sandboxtest is the conformance suite every sandbox backend runs, and
// the isolation battery every isolating backend must pass. Like Nomad's driver
// conformance tests and litestream's RunWithReplicaClient, one suite runs
// against every backend: sandbox/backends runs it for each backend that
// `harvest doctor` reports available.
//
// Everything is real: the real harvest-agent, real boxes, and an escape probe
// (./probe) copied into each box through the file API. There are no sleeps:
// tests wait on conditions, bounded by contexts.
package sandboxtest

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
)

// Backend describes a backend under test.
type Backend struct {
	Name string
	// New returns a provider keeping its state in runDir. Calling it again
	// with the same runDir is what Harvest does after a restart.
	New func(t testing.TB, runDir string) sandbox.Provider
	// Isolated backends must pass the isolation battery.
	Isolated bool
	// Pool: the provider keeps warm boxes (local backend in server mode).
	Pool bool
	// Spec adjusts every spec before Start (e.g. the docker image).
	Spec func(*sandbox.Spec)
	// Leftovers lists what remains of a destroyed box besides processes and
	// mounts (which the suite checks itself): cgroups, containers, run dirs.
	Leftovers func(t testing.TB, p sandbox.Provider, h sandbox.Handle) []string
	// Cannot lists the checks (Check*) this backend is known not to pass,
	// each with why, as the backend documents it (docker.RuntimeCaveats).
	// The suite skips exactly those, saying why; every other check runs.
	Cannot map[string]string
}

// Checks a Backend may declare it cannot pass (Backend.Cannot).
const (
	// CheckTCPSplice: a box program splicing one TCP socket to another
	// (Go's io.Copy between two connections) gets the same bytes.
	CheckTCPSplice = "TCPSplice"
	// CheckForkBomb: Limits.Pids bounds the box's processes.
	CheckForkBomb = "ForkBomb"
	// CheckMemoryBomb: a command over the memory limit is OOM-killed and
	// reported so, and the box lives on.
	CheckMemoryBomb = "MemoryBomb"
	// CheckHostPIDs: the box's processes are host processes in its own pid
	// namespace, each gone after Destroy.
	CheckHostPIDs = "HostPIDs"
)

var knownChecks = []string{CheckTCPSplice, CheckForkBomb, CheckMemoryBomb, CheckHostPIDs}

// skipIfCannot skips t when the backend declares it cannot pass check.
func (s *suite) skipIfCannot(t testing.TB, check string) {
	t.Helper()
	if why, ok := s.b.Cannot[check]; ok {
		t.Skipf("%s cannot pass %s: %s", s.b.Name, check, why)
	}
}

// Timeout bounds every single operation in the suite.
const Timeout = 60 * time.Second

type suite struct {
	b      Backend
	runDir string
	p      sandbox.Provider
}

func newSuite(t *testing.T, b Backend) *suite {
	for c := range b.Cannot {
		if !slices.Contains(knownChecks, c) {
			t.Fatalf("%s declares it cannot pass %q, which is no check of the suite (one of %v)", b.Name, c, knownChecks)
		}
	}
	runDir := testbin.TempDir(t)
	return &suite{b: b, runDir: runDir, p: b.New(t, runDir)}
}

// waitWarm waits, on a backend with a pool, until the pool holds a ready
// box, so the shared box comes from it: a pool starts filling at its
// provider's first Start, which does not wait long for a warm box, so on
// a loaded machine the shared box would start cold, and a run of only
// the checks on the shared box would test the cold path twice. A first
// box, destroyed at once, starts the pool.
func (s *suite) waitWarm(t *testing.T) {
	pl, ok := s.p.(sandbox.Pooler)
	if !s.b.Pool || !ok {
		return
	}
	first := s.startUnmanaged(t, sandbox.Spec{})
	if err := first.Destroy(ctxFor(t)); err != nil {
		t.Fatalf("%s: Destroy: %v", s.b.Name, err)
	}
	if pl.PoolStats().Size == 0 {
		return // a pool that keeps no warm boxes (it logged why)
	}
	testbin.WaitFor(t, Timeout, s.b.Name+"'s pool to hold a ready box", func() bool { return pl.PoolStats().Ready > 0 })
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

// startUnmanaged creates a box the test destroys itself.
func (s *suite) startUnmanaged(t testing.TB, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
	if s.b.Spec != nil {
		s.b.Spec(&spec)
	}
	sb, err := s.p.Start(ctxFor(t), spec)
	if err != nil {
		t.Fatalf("%s: Start: %v", s.b.Name, err)
	}
	return sb
}

// start creates a box; it is destroyed when the test ends.
func (s *suite) start(t testing.TB, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
	sb := s.startUnmanaged(t, spec)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), Timeout)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("%s: Destroy: %v", s.b.Name, err)
		}
	})
	return sb
}

// withWorkspace is a spec with one workspace "w" owned by the box user.
func withWorkspace(t testing.TB) (sandbox.Spec, string) {
	ws := testbin.Workspace(t, sandbox.DefaultUID, sandbox.DefaultGID)
	return sandbox.Spec{Workspaces: []sandbox.Workspace{{Name: "w", HostPath: ws}}}, ws
}

type result struct {
	stdout, stderr string
	st             sandbox.ExitStatus
}

func (r result) out() string { return strings.TrimSpace(r.stdout) }

// run runs a command and fails the test on a transport error.
func run(t testing.TB, sb *sandbox.Sandbox, args ...string) result {
	t.Helper()
	return runCmd(t, sb, &sandbox.Cmd{Args: args})
}

func runCmd(t testing.TB, sb *sandbox.Sandbox, cmd *sandbox.Cmd) result {
	t.Helper()
	var out, errb testbin.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &errb
	}
	st, err := sb.Run(ctxFor(t), cmd)
	if err != nil {
		t.Fatalf("running %q: %v", cmd.Args, err)
	}
	return result{out.String(), errb.String(), st}
}

func sh(t testing.TB, sb *sandbox.Sandbox, script string) result {
	t.Helper()
	return run(t, sb, "sh", "-c", script)
}

// mustOK runs a command that must succeed and returns its stdout.
func mustOK(t testing.TB, sb *sandbox.Sandbox, args ...string) string {
	t.Helper()
	r := run(t, sb, args...)
	if !r.st.Success() {
		t.Fatalf("%q: %v\nstdout: %s\nstderr: %s", args, r.st, r.stdout, r.stderr)
	}
	return r.out()
}

var probeMu sync.Mutex

// installProbe copies the escape probe into the box and returns its path.
func installProbe(t testing.TB, sb *sandbox.Sandbox) string {
	t.Helper()
	probeMu.Lock()
	bin := testbin.Probe(t)
	probeMu.Unlock()
	data, err := readHostFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	path := "/tmp/harvest-probe-" + sb.ID()
	if err := sb.WriteFile(ctxFor(t), path, data, 0o755); err != nil {
		t.Fatalf("installing the probe: %v", err)
	}
	return path
}

// probe runs the probe and returns its verdict line ("ok ..." / "err ...").
func probe(t testing.TB, sb *sandbox.Sandbox, path string, args ...string) string {
	t.Helper()
	r := run(t, sb, append([]string{path}, args...)...)
	line := r.out()
	if line == "" {
		line = strings.TrimSpace(r.stderr)
	}
	if !strings.HasPrefix(line, "ok") && !strings.HasPrefix(line, "err") {
		t.Fatalf("probe %v: unexpected output %q (%v; stderr %q)", args, r.stdout, r.st, r.stderr)
	}
	return line
}

// denied asserts a probe attempt failed.
func denied(t testing.TB, what, verdict string) {
	t.Helper()
	if !strings.HasPrefix(verdict, "err") {
		t.Errorf("%s: the box was allowed to: %s", what, verdict)
	}
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
