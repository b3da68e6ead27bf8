// Package testbin holds what Harvest's tests share that needs nothing of
// Harvest: the real binaries, built once per test process; temporary
// directories a box user can traverse; what CI requires (CLIs, backends);
// and the small helpers every package's tests used to copy — WaitFor
// (polling, where nothing notifies), Buffer (read while written, with
// WaitFor), ProcsWith and ProcsWithArgs (host processes), Context (a
// test's context) and Logger (silent unless $HARVEST_TEST_LOG is set), and
// HangingGitServer; and real repositories as test data (RealRepo, with
// PyIndex, a local Python package index, for the Python one). The stack
// itself (store, journal, providers, sim, Manager, server) is assembled in
// internal/stacktest.
//
// The binaries are built with CGO_ENABLED=0 so they run in any box image.
// Tests use the real harvest-agent (no fake of our own component): the build
// goes through the Go build cache, so after the first package it costs about a
// second. Binaries land in a directory readable by every uid (boxes run as an
// unprivileged user), are written to a temporary name and renamed into place,
// so test binaries of different packages building at once never see a
// half-written file.
package testbin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/harvest-dev/harvest/internal/mountinfo"
)

var (
	mu    sync.Mutex
	built = map[string]string{}
)

// Dir is where test binaries are built: one directory per user and
// checkout. Checkouts (git worktrees) on one machine must not share it:
// each test process renames its fresh build over the last one, so a test
// of one checkout would run, now and then, the agent or the harvest
// binary another checkout built from other code.
func Dir() string {
	name := fmt.Sprintf("harvest-testbin-%d", os.Geteuid())
	if root, err := ModuleRoot(); err == nil {
		sum := sha256.Sum256([]byte(root))
		name += "-" + hex.EncodeToString(sum[:])[:12]
	}
	return filepath.Join(os.TempDir(), name)
}

// ModuleRoot returns the directory holding go.mod.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the harvest module")
	}
	return filepath.Dir(mod), nil
}

// Build builds the main package pkg (like "./cmd/harvest-agent") as name.
func Build(t testing.TB, pkg, name string) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := Dir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o755)
	tmp, err := os.CreateTemp(dir, name+".tmp-*")
	if err != nil {
		t.Fatal(err)
	}
	tmp.Close()
	cmd := exec.Command("go", "build", "-o", tmp.Name(), pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp.Name())
		t.Fatalf("building %s: %v\n%s", pkg, err, out)
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, name)
	if err := os.Rename(tmp.Name(), dst); err != nil {
		t.Fatal(err)
	}
	built[pkg] = dst
	return dst
}

// Agent builds harvest-agent.
func Agent(t testing.TB) string { return Build(t, "./cmd/harvest-agent", "harvest-agent") }

// Harvest builds the full harvest binary.
func Harvest(t testing.TB) string { return Build(t, "./cmd/harvest", "harvest") }

// Probe builds the isolation probe that tests run inside boxes.
func Probe(t testing.TB) string { return Build(t, "./sandbox/sandboxtest/probe", "harvest-probe") }

// TempDir returns a fresh directory that the box user can traverse (0711,
// unlike t.TempDir's 0700 parent), removed when the test ends.
func TempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "harvest-test-*")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Session disks a server mounted below d (a harvest serve the test
		// ran as a process, a second node's data directory) would stay
		// mounted, and their loop devices attached, after d is gone.
		if _, err := mountinfo.UnmountLoopsUnder(d); err != nil {
			t.Errorf("cleaning up %s: %v", d, err)
		}
		os.RemoveAll(d)
	})
	return d
}

// Workspace returns a fresh directory owned by uid:gid (when running as root),
// for use as a box workspace.
func Workspace(t testing.TB, uid, gid int) string {
	t.Helper()
	d := filepath.Join(TempDir(t), "ws")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(d, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return d
}
