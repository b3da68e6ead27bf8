package local_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local"
	"github.com/harvest-dev/harvest/sandbox/local/cgroups"
)

// TestPool: boxes started from idle shims behave like any other (their own
// cgroup named after the box, their limits), the pool refills, and Close
// leaves no shim and no cgroup behind.
func TestPool(t *testing.T) {
	p := local.New(local.Config{RunDir: testbin.TempDir(t), AgentBinary: testbin.Agent(t), PoolSize: 2})
	testreq.Check(t, testreq.Local, p.Available(context.Background()))
	ctx := context.Background()
	mgr, err := cgroups.Detect(p.CgroupParent())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		sb, err := p.Start(ctx, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 96 << 20, Pids: 40}})
		if err != nil {
			t.Fatal(err)
		}
		out, err := sb.ReadFile(ctx, "/sys/fs/cgroup/memory/memory.limit_in_bytes")
		if err == nil && strings.TrimSpace(string(out)) != "100663296" {
			t.Errorf("box %d memory limit: %s", i, out)
		}
		if _, err := os.Stat(mgr.Open(sb.ID()).Dirs["pids"]); err != nil {
			t.Errorf("box %d has no cgroup named after it: %v", i, err)
		}
		if st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}}); err != nil || !st.Success() {
			t.Fatal(st, err)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Six starts, each served by a warm box or prepared on the spot
	// (PoolStats, what the metrics show).
	if ps := p.PoolStats(); ps.Size != 2 || ps.Hits+ps.Misses != 6 || ps.Hits == 0 || ps.Ready > 2 {
		t.Errorf("PoolStats after 6 starts = %+v: want size 2, 6 takes, some hits", ps)
	}
	// A box for another user cannot come from the pool: a miss.
	before := p.PoolStats()
	other, err := p.Start(ctx, sandbox.Spec{User: sandbox.User{UID: 4242, GID: 4242}})
	if err != nil {
		t.Fatal(err)
	}
	other.Destroy(ctx)
	if ps := p.PoolStats(); ps.Misses != before.Misses+1 || ps.Hits != before.Hits {
		t.Errorf("PoolStats after a start for another user = %+v (before %+v): want one more miss", ps, before)
	}
	bs, err := p.ListOwned(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pooled := 0
	for _, b := range bs {
		if b.Warm {
			pooled++
		}
	}
	if pooled == 0 {
		t.Error("no idle shims were waiting")
	}
	p.Close()
	ids, _ := mgr.List()
	for _, id := range ids {
		if strings.HasPrefix(id, "pool-") {
			t.Errorf("pool cgroup %s left after Close", id)
		}
	}
}

// TestAvailableWhileBoxesStart: Available (what GET /readyz runs) checks
// the backend again while boxes start and warm boxes are prepared, and
// changes nothing they run on. It once re-resolved the provider's cgroups
// under the pool's feet: -race saw it in CI.
func TestAvailableWhileBoxesStart(t *testing.T) {
	p := local.New(local.Config{RunDir: testbin.TempDir(t), AgentBinary: testbin.Agent(t), PoolSize: 2})
	defer p.Close()
	ctx := context.Background()
	testreq.Check(t, testreq.Local, p.Available(ctx))
	done := make(chan error, 1)
	go func() {
		for i := 0; i < 4; i++ {
			sb, err := p.Start(ctx, sandbox.Spec{})
			if err != nil {
				done <- err
				return
			}
			if err := sb.Destroy(ctx); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for running := true; running; {
		if err := p.Available(ctx); err != nil {
			t.Errorf("Available while boxes start: %v", err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		default:
		}
	}
	// The pool's boxes still start after all those checks.
	sb, err := p.Start(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	sb.Destroy(ctx)
}
