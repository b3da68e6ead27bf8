package testbin

import (
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/harvest-dev/harvest/internal/testreq"
)

// A RealRepoSpec is one public repository kept as test data: a git bundle
// of its default branch at a pinned commit, full history included, under
// testdata/repos (testdata/SOURCES.md says where each came from and why).
// Each has a test suite of its own that passes offline once its
// dependencies are installed; realrepos_test.go proves it on the host.
type RealRepoSpec struct {
	Name     string // the bundle is testdata/repos/NAME.bundle
	Upstream string // owner/name on GitHub
	Branch   string // the bundle's one branch, checked out by RealRepo
	Commit   string // the branch's commit, pinned
	// Install and Test are the commands a person runs in the checkout,
	// by shell, in this order. Python's Install assumes a venv's bin on
	// PATH and PIP_INDEX_URL pointing at PyIndex.
	Install, Test string
	// PyDeps are the Python dependencies' sources, .tar.gz files under
	// testdata/pydeps, for PyIndex to build into wheels (PyPI is out of
	// reach).
	PyDeps []string
}

// RealRepos are the real repositories: one per toolchain, and a Node
// package that publishes no lockfile.
var RealRepos = []RealRepoSpec{
	{
		Name: "gjson", Upstream: "tidwall/gjson", Branch: "master",
		Commit:  "7d8b3821e9d2acf35e8a226b63fcf801078e9b96",
		Install: "go mod download", Test: "go test ./...",
	},
	{
		Name: "pump", Upstream: "mafintosh/pump", Branch: "master",
		Commit:  "714c0a70a8199104bf65a57582009d42f81d8d94",
		Install: "npm ci", Test: "npm test",
	},
	{
		// No lockfile: installed as npm install resolves package.json.
		Name: "dequal", Upstream: "lukeed/dequal", Branch: "master",
		Commit:  "37c21f675c1f538f2d4b63ebf19a161411e7a5fd",
		Install: "npm install --no-package-lock", Test: "npm test",
	},
	{
		Name: "python-slugify", Upstream: "un33k/python-slugify", Branch: "master",
		Commit:  "7b6d5d96c1995e6dccb39a19a13ba78d7d0a3ee4",
		Install: "pip install .", Test: "python test.py",
		PyDeps: []string{"text-unidecode-1.3.tar.gz"},
	},
}

// RealRepoByName returns the spec named name; an unknown name fails the
// test.
func RealRepoByName(t testing.TB, name string) RealRepoSpec {
	t.Helper()
	i := slices.IndexFunc(RealRepos, func(r RealRepoSpec) bool { return r.Name == name })
	if i < 0 {
		t.Fatalf("no real repository named %q", name)
	}
	return RealRepos[i]
}

// Testdata returns the path of a file under internal/testbin/testdata,
// from the tests of any package.
func Testdata(t testing.TB, elem ...string) string {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(append([]string{root, "internal", "testbin", "testdata"}, elem...)...)
}

// RealRepo clones the bundle of the real repository name into a fresh
// directory (TempDir: a box user can traverse it) and returns the
// checkout: a full clone with all the history up to the pinned commit,
// its branch checked out at that commit, no remote. The commit hashes are
// upstream's.
func RealRepo(t testing.TB, name string) string {
	t.Helper()
	spec := RealRepoByName(t, name)
	dir := filepath.Join(TempDir(t), name)
	bundle := Testdata(t, "repos", name+".bundle")
	Git(t, filepath.Dir(dir), "clone", "-q", "--branch", spec.Branch, bundle, dir)
	Git(t, dir, "remote", "remove", "origin")
	if head := Git(t, dir, "rev-parse", "HEAD"); head != spec.Commit {
		t.Fatalf("%s: the bundle's %s is %s, not the pinned %s", bundle, spec.Branch, head, spec.Commit)
	}
	return dir
}

// Toolchain returns the path of the program name (go, npm, python3) on
// PATH. When it is missing the test is skipped, or fails where
// testreq.Toolchains is required (in CI): CI must run the real
// repositories' suites.
func Toolchain(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testreq.Unavailable(t, testreq.Toolchains, "%s is not on PATH (scripts/setup installs it)", name)
	}
	return p
}

// ToolchainMissing ends the test as testreq.Unavailable(testreq.Toolchains):
// skipped, or failed where the toolchains are required (in CI).
func ToolchainMissing(t testing.TB, format string, args ...any) {
	t.Helper()
	testreq.Unavailable(t, testreq.Toolchains, format, args...)
}
