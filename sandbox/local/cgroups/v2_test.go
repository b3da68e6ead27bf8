package cgroups

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/internal/testreq"
)

// TestV2Files checks what the v2 code writes, against a plain directory
// standing in for a cgroup2 mount. This machine mounts cgroup v1, so the v2
// path is not exercised against a real kernel here (see docs/limitations.md); this
// test pins its files and values.
func TestV2Files(t *testing.T) {
	root := t.TempDir()
	write := func(rel, s string) {
		if err := os.WriteFile(filepath.Join(root, rel), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
	m := &Manager{Version: 2, Roots: map[string]string{"": root}, Parent: "harvest/abc"}

	// A CPU limit needs cpu.max, which only the kernel creates.
	if _, err := m.Create("box-0", Limits{MemoryBytes: 256 << 20, CPUs: 1}); err == nil || !strings.Contains(err.Error(), "cpu cgroup controller") {
		t.Errorf("a CPU limit without the cpu controller: %v", err)
	}
	// (A real cgroupfs removes a cgroup with its interface files; this
	// stand-in directory keeps the files Create wrote, so it cannot.)
	cg, err := m.Create("box-1", Limits{MemoryBytes: 256 << 20, Pids: 100})
	if err != nil {
		t.Fatal(err)
	}
	read := func(rel string) string {
		b, _ := os.ReadFile(filepath.Join(root, rel))
		return strings.TrimSpace(string(b))
	}
	for _, dir := range []string{"", "harvest", "harvest/abc"} {
		if got := read(filepath.Join(dir, "cgroup.subtree_control")); got != "+memory +pids +cpu" {
			t.Errorf("%s/cgroup.subtree_control = %q", dir, got)
		}
	}
	if got := read("harvest/abc/box-1/memory.max"); got != "268435456" {
		t.Errorf("memory.max = %q", got)
	}
	if got := read("harvest/abc/box-1/pids.max"); got != "100" {
		t.Errorf("pids.max = %q", got)
	}
	if cg.MemoryDir() != filepath.Join(root, "harvest/abc/box-1") {
		t.Errorf("MemoryDir = %s", cg.MemoryDir())
	}
	if err := cg.Join(42); err != nil || read("harvest/abc/box-1/cgroup.procs") != "42" {
		t.Errorf("Join: %v", err)
	}
	// A kernel with cgroup.kill (5.14+) has the file in every cgroup.
	write("harvest/abc/box-1/cgroup.kill", "")
	write("harvest/abc/box-1/memory.events", "low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n")
	if got := cg.OOMKills(); got != 2 {
		t.Errorf("OOMKills = %d", got)
	}
	if err := cg.Kill(context.Background()); err != nil {
		t.Errorf("Kill: %v", err)
	}
	if read("harvest/abc/box-1/cgroup.kill") != "1" {
		t.Error("Kill did not write cgroup.kill")
	}
}

// TestDetectThisMachine: detection finds the memory and pids controllers.
func TestDetectThisMachine(t *testing.T) {
	m, err := Detect("harvest/test")
	testreq.Check(t, testreq.Cgroups, err)
	if m.Version == 1 {
		for _, c := range []string{"memory", "pids", "freezer"} {
			if m.Roots[c] == "" {
				t.Errorf("v1 without %s: %v", c, m.Roots)
			}
		}
	} else if m.Roots[""] == "" {
		t.Errorf("v2 without a root: %v", m.Roots)
	}
}
