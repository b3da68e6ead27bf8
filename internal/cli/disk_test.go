package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox/disk"
)

// harvest run --disk: the workspace copies are on a disk of that size,
// kept mounted after the run; a repository that does not fit says so.
func TestRunDisk(t *testing.T) {
	needRoot(t)
	if err := disk.Check(context.Background(), ""); err != nil {
		testreq.Unavailable(t, testreq.Disks, "disks unavailable here: %v", err)
	}
	env, home := runEnv(t)
	t.Cleanup(func() { // before home is removed
		if _, err := disk.UnmountUnder(home); err != nil {
			t.Error(err)
		}
	})
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runHarvest(t, env, "", "run", "--disk", "2g", "--repo", filepath.Join(root, "examples/calc"), "Fix the failing test")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "the workspaces are on a 2GiB disk mounted at") {
		t.Errorf("the run does not say where its disk is:\n%s", errOut)
	}
	matches, _ := filepath.Glob(filepath.Join(home, "runs", "*", "disk", "calc", "calc.go"))
	if len(matches) != 1 {
		t.Fatalf("workspaces on the disk: %v\n%s", matches, errOut)
	}
	d := disk.Disk{Image: filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(matches[0]))), "disk.img"), Dir: filepath.Dir(filepath.Dir(matches[0]))}
	if m, err := d.Mounted(); err != nil || !m {
		t.Fatalf("the run's disk %+v is not mounted after the run: %v %v", d, m, err)
	}
	if b, _ := os.ReadFile(matches[0]); !strings.Contains(string(b), "for i := 0; i < len(xs); i++") {
		t.Errorf("the workspace does not have the fix:\n%s\nstdout:\n%s\nstderr:\n%s", b, out, errOut)
	}

	big := t.TempDir()
	if err := os.WriteFile(filepath.Join(big, "big.bin"), make([]byte, 40<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runHarvest(t, env, "", "run", "--disk", "32m", "--repo", big, "x")
	if code != 125 || !strings.Contains(errOut, "no space left on device: the repositories do not fit the run's disk (--disk 32m)") {
		t.Errorf("a repository larger than --disk: exit %d, stderr:\n%s", code, errOut)
	}
	code, _, errOut = runHarvest(t, env, "", "run", "--disk", "1m", "--repo", big, "x")
	if code != 2 || !strings.Contains(errOut, "--disk: disk 1MiB: must be at least 16MiB") {
		t.Errorf("--disk 1m: exit %d, stderr:\n%s", code, errOut)
	}
}
