package local_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox/local"
	"github.com/harvest-dev/harvest/sandbox/local/cgroups"
)

// TestStartAfterCrash: a Harvest killed with SIGKILL, along with its warm
// boxes (a container killed whole, say), leaves their cgroups in the run's
// parent cgroups, and their run dirs; here an older Harvest's, named
// pool-PID-N after it (TestWarmBoxesOfADeadHarvest: today's, named for
// their instance).
// The next start of the backend removes all of it, the parents included:
// nothing else would (Close never ran), and they used to stay until a
// later clean stop.
func TestStartAfterCrash(t *testing.T) {
	cfg := local.Config{RunDir: testbin.TempDir(t), AgentBinary: testbin.Agent(t)}
	testreq.Check(t, testreq.Local, local.New(cfg).Available(context.Background()))
	mgr, err := cgroups.Detect(local.New(cfg).CgroupParent())
	if err != nil {
		t.Fatal(err)
	}
	// A pid that no longer runs: the dead Harvest's.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	var left []*cgroups.Cgroup
	for i := 1; i <= 2; i++ {
		name := fmt.Sprintf("pool-%d-%d", dead.Process.Pid, i)
		cg, err := mgr.Create(name, cgroups.Limits{Pids: 64})
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, cg)
		if err := os.Mkdir(filepath.Join(cfg.RunDir, name), 0o711); err != nil {
			t.Fatal(err)
		}
	}
	var parents []string
	for _, root := range mgr.Roots {
		parents = append(parents, filepath.Join(root, mgr.Parent))
	}
	t.Cleanup(func() { // whatever the test's outcome
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, cg := range left {
			cg.Remove(ctx)
		}
		mgr.RemoveParent()
	})

	p := local.New(cfg)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if hs, err := p.List(ctx); err != nil || len(hs) != 0 {
		t.Fatalf("List after the crash: %v %v, want no box", hs, err)
	}
	for _, cg := range left {
		for _, dir := range cg.DirList() {
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("the dead Harvest's warm box cgroup %s is still there (%v)", dir, err)
			}
		}
	}
	for _, dir := range parents {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the run's parent cgroup %s is still there, empty, after the next start (%v)", dir, err)
		}
	}
	if ents, _ := os.ReadDir(cfg.RunDir); len(ents) > 0 {
		for _, e := range ents {
			if e.Name() != "root" && e.Name() != "etc" {
				t.Errorf("run dir entry %s left", e.Name())
			}
		}
	}
}
