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
