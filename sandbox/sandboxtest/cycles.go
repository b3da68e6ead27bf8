package sandboxtest

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
)

// hostState is what must be the same before and after many boxes came and
// went: our own descriptors, goroutines and the host's mount table.
type hostState struct {
	fds, goroutines, mounts int
}

// snapshot counts what the cycles could leak. Only mounts of the suite's
// own paths count: other tests (other packages' boxes, dockerd) mount and
// unmount on the same host at the same time.
func snapshot(paths ...string) hostState {
	ents, _ := os.ReadDir("/proc/self/fd")
	b, _ := os.ReadFile("/proc/self/mountinfo")
	n := 0
	for _, line := range bytes.Split(b, []byte("\n")) {
		for _, p := range paths {
			if bytes.Contains(line, []byte(p)) {
				n++
				break
			}
		}
	}
	return hostState{fds: len(ents), goroutines: runtime.NumGoroutine(), mounts: n}
}

// RunCycles creates, uses and destroys n boxes one after another and checks
// that nothing accumulates: processes, descriptors, goroutines, mounts, boxes
// the provider still lists, and the backend's own leftovers.
func RunCycles(t *testing.T, b Backend, n int) {
	s := newSuite(t, b)
	spec, ws := withWorkspace(t)
	if b.Spec != nil {
		b.Spec(&spec)
	}
	// One warm-up box so lazily created state (parent cgroups, /etc files,
	// the client's first connection) is not counted as a leak.
	warm := s.start(t, spec)
	mustOK(t, warm, "true")
	if err := warm.Destroy(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	before := snapshot(s.runDir, ws)
	ids := map[string]bool{}
	var last sandbox.Handle
	start := time.Now()
	for i := 0; i < n; i++ {
		ctx := ctxFor(t)
		sb, err := s.p.Start(ctx, spec)
		if err != nil {
			t.Fatalf("cycle %d: Start: %v", i, err)
		}
		ids[sb.ID()] = true
		st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}})
		if err != nil || !st.Success() {
			t.Fatalf("cycle %d: Run: %v %v", i, st, err)
		}
		last = sb.Handle()
		if err := sb.Destroy(ctx); err != nil {
			t.Fatalf("cycle %d: Destroy: %v", i, err)
		}
	}
	t.Logf("%d create/exec/destroy cycles in %v (%v each)", n, time.Since(start), time.Since(start)/time.Duration(n))

	var after hostState
	testbin.WaitFor(t, 10*time.Second, "descriptors and goroutines to settle", func() bool {
		after = snapshot(s.runDir, ws)
		return after.fds <= before.fds && after.goroutines <= before.goroutines+2
	})
	if after.mounts != before.mounts {
		t.Errorf("host mount table: %d lines of the boxes' paths before, %d after", before.mounts, after.mounts)
	}
	// No process of any of those boxes (agent or shim) is alive on the host.
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		args := strings.Split(string(cmd), "\x00")
		for i, a := range args {
			if (a == "--id" && i+1 < len(args) && ids[args[i+1]]) || (a == "--config" && i+1 < len(args) && strings.HasPrefix(args[i+1], s.runDir)) {
				t.Errorf("process %s of a destroyed box is alive: %q", e.Name(), args)
			}
		}
	}
	if l, ok := s.p.(sandbox.Lister); ok {
		hs, err := l.List(ctxFor(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if ids[h.ID] {
				t.Errorf("the provider still lists destroyed box %s", h.ID)
			}
		}
	}
	if b.Leftovers != nil {
		if left := b.Leftovers(t, s.p, last); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	}
}
