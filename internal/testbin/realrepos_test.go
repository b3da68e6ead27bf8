package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testreq"
)

// The real repositories' own suites pass on the host: the baseline the
// sandbox runs of issue 13 are held to. Each runs its install and test
// commands twice and logs the second run's timings (warm caches: Go's
// module and build caches, npm's cache, pip's cache).

func TestRealRepoGo(t *testing.T) {
	goBin := Toolchain(t, "go")
	dir := RealRepo(t, "gjson")
	// The module proxy is reached (GOPROXY as the host has it); -count=1
	// so that the warm run runs the tests instead of reporting them
	// cached.
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	for i := range 2 {
		d := runTimed(t, dir, env, goBin, "test", "-count=1", "./...")
		if i == 1 {
			t.Logf("host, warm: go test -count=1 ./... %v (%s)", d.Round(time.Millisecond), goVersion(t, goBin))
		}
	}
}

func TestRealRepoNode(t *testing.T) {
	npm := Toolchain(t, "npm")
	node := Toolchain(t, "node")
	dir := RealRepo(t, "pump")
	env := append(os.Environ(), "npm_config_fund=false", "npm_config_audit=false",
		"npm_config_update_notifier=false", "npm_config_loglevel=error")
	for i := range 2 {
		install := runTimed(t, dir, env, npm, "ci")
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "end-of-stream", "package.json")); err != nil {
			t.Fatalf("npm ci did not install the locked dependencies: %v", err)
		}
		test := runTimed(t, dir, env, npm, "test")
		if i == 1 {
			t.Logf("host, warm: npm ci %v, npm test %v (node %s)", install.Round(time.Millisecond),
				test.Round(time.Millisecond), output(t, dir, env, node, "--version"))
		}
	}
}

// TestRealRepoNodeNoLockfile: a package with no lockfile, whose tests
// need its devDependencies (uvu, and bundt for the build its pretest
// runs), installed as Harvest's environments install one.
func TestRealRepoNodeNoLockfile(t *testing.T) {
	npm := Toolchain(t, "npm")
	node := Toolchain(t, "node")
	dir := RealRepo(t, "dequal")
	env := append(os.Environ(), "npm_config_fund=false", "npm_config_audit=false",
		"npm_config_update_notifier=false", "npm_config_loglevel=error")
	for i := range 2 {
		install := runTimed(t, dir, env, npm, "install", "--no-package-lock", "--include=dev")
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "uvu", "package.json")); err != nil {
			t.Fatalf("npm install did not install the devDependencies: %v", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "package-lock.json")); err == nil {
			t.Fatal("npm install --no-package-lock wrote a package-lock.json")
		}
		test := runTimed(t, dir, env, npm, "test")
		if i == 1 {
			t.Logf("host, warm: npm install %v, npm test %v (node %s)", install.Round(time.Millisecond),
				test.Round(time.Millisecond), output(t, dir, env, node, "--version"))
		}
	}
}

func TestRealRepoPython(t *testing.T) {
	python := Python3(t)
	spec := RealRepoByName(t, "python-slugify")
	dir := RealRepo(t, spec.Name)
	var deps []string
	for _, d := range spec.PyDeps {
		deps = append(deps, Testdata(t, "pydeps", d))
	}
	cache := t.TempDir()
	var url string
	for i := range 2 {
		venv := filepath.Join(t.TempDir(), "venv")
		start := time.Now()
		if out, err := exec.Command(python, "-m", "venv", venv).CombinedOutput(); err != nil {
			testreq.Unavailable(t, testreq.Toolchains, "%s -m venv: %v (scripts/setup installs python3-venv)\n%s", python, err, out)
		}
		mkvenv := time.Since(start)
		if url == "" {
			url = PyIndex(t, filepath.Join(venv, "bin", "python"), deps...)
		}
		// No other index: PIP_INDEX_URL is the local one, and
		// PIP_CONFIG_FILE hides the host's configuration.
		env := append(PipEnv(t.TempDir()), "PIP_INDEX_URL="+url, "PIP_CACHE_DIR="+cache,
			"VIRTUAL_ENV="+venv, "PATH="+filepath.Join(venv, "bin")+":"+os.Getenv("PATH"))
		// exec looks commands up on the test's PATH: name the venv's python.
		vpython := filepath.Join(venv, "bin", "python")
		install := runTimed(t, dir, env, "sh", "-c", spec.Install)
		where := output(t, dir, env, vpython, "-c", "import text_unidecode; print(text_unidecode.__file__)")
		if !strings.HasPrefix(where, venv+"/") {
			t.Fatalf("text_unidecode comes from %s, not from the venv %s", where, venv)
		}
		test := runTimed(t, dir, env, "sh", "-c", spec.Test)
		if i == 1 {
			t.Logf("host, warm: python3 -m venv %v, %s %v, %s %v (%s)", mkvenv.Round(time.Millisecond),
				spec.Install, install.Round(time.Millisecond), spec.Test, test.Round(time.Millisecond),
				output(t, dir, env, vpython, "--version"))
		}
	}
}

// runTimed runs a command in dir and returns how long it took; a failure
// fails the test with the command's output.
func runTimed(t *testing.T, dir string, env []string, name string, args ...string) time.Duration {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	start := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(start)
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return d
}

func output(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func goVersion(t *testing.T, goBin string) string {
	return output(t, "", os.Environ(), goBin, "env", "GOVERSION")
}
