package cli

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox/local/cgroups"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// TestServeKill9Cgroups: `harvest serve` killed with SIGKILL never runs
// the local backend's Close, which removes the run's parent cgroups. Its
// warm boxes remove their own cgroups when they see it gone, and the
// parents are left empty; the next start of the backend removes them.
// (When the warm boxes were killed too and left their cgroups, the next
// start removes those first: TestStartAfterCrash in sandbox/local.)
func TestServeKill9Cgroups(t *testing.T) {
	e := newServeEnv(t)
	repo := filepath.Join(testbin.TempDir(t), "repo")
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644)
	mgr, err := cgroups.Detect(e.provider().CgroupParent())
	testreq.Check(t, testreq.Cgroups, err)
	var parents []string
	for _, root := range mgr.Roots {
		parents = append(parents, filepath.Join(root, mgr.Parent))
	}

	s := e.start() // with its default pool of warm boxes
	c := e.client(s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}})
	if err != nil {
		t.Fatal(err)
	}
	follow(t, c, v.ID, 0, "idle", func(ev event.Event) bool {
		st, ok := ev.Data.(event.SessionState)
		return ok && st.State == string(store.StateIdle)
	})
	if err := c.DeleteSession(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	s.cmd.Process.Kill()
	s.wait()
	// Its warm boxes go (their shims see their stdin close); the parents
	// stay, empty.
	testbin.WaitFor(t, 30*time.Second, "the warm boxes' cgroups to go", func() bool {
		ids, err := mgr.List()
		return err == nil && len(ids) == 0
	})
	for _, dir := range parents {
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("after the kill, the parent cgroup %s is already gone (%v): nothing left to test", dir, err)
		}
	}

	// The next start of the backend (here: listing its boxes) removes them.
	p := e.provider()
	defer p.Close()
	if hs, err := p.List(ctx); err != nil || len(hs) != 0 {
		t.Fatalf("boxes after the kill: %v %v", hs, err)
	}
	for _, dir := range parents {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the parent cgroup %s of the killed server is still there after the next start (%v)", dir, err)
		}
	}
}
