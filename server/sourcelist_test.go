package server_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/wire"
)

// TestListSources: GET /v1/sources lists the directories under the
// server's repository roots (git or not; not files, hidden directories or
// symlinks), and says an admin token may name any directory and a user
// token may not.
func TestListSources(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	os.Mkdir(filepath.Join(e.RepoRoot, "plain"), 0o755)
	os.Mkdir(filepath.Join(e.RepoRoot, ".hidden"), 0o755)
	os.WriteFile(filepath.Join(e.RepoRoot, "file.txt"), nil, 0o644)
	os.Symlink("/etc", filepath.Join(e.RepoRoot, "etc-link"))
	testbin.Git(t, e.Repo, "init", "-q")

	l, err := e.AliceC.Sources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.SourceEntry{{Name: "plain", Source: filepath.Join(e.RepoRoot, "plain")}, {Name: "repo", Source: e.Repo, Git: true}}
	if !slices.Equal(l.Repositories, want) || l.AnyDirectory || l.GitHub {
		t.Errorf("a user token's sources: %+v\nwant repositories %+v, no other directory, no GitHub", l, want)
	}
	a, err := e.AdminC.Sources(ctx)
	if err != nil || !a.AnyDirectory || len(a.Repositories) != 2 {
		t.Errorf("the admin's sources: %+v, %v", a, err)
	}
}
