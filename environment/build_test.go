package environment_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/harvest-dev/harvest/environment"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
	"github.com/harvest-dev/harvest/workspace"
)

// newBuilder is a Builder on the test's local backend and a real store.
func newBuilder(t *testing.T) (*environment.Builder, store.Store, *stacktest.Stack) {
	t.Helper()
	s := stacktest.New(t, "rules:\n  - reply: {text: unused}\n")
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "h.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, err := environment.NewBuilder(environment.Config{
		Dir: filepath.Join(testbin.TempDir(t), "environments"), Store: st, Version: "test",
		Provider: func(string) (sandbox.Provider, error) { return s.Local, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return b, st, s
}

// repo makes a git repository with files (path → content).
func repo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(testbin.TempDir(t), "src")
	os.MkdirAll(dir, 0o755)
	for p, c := range files {
		f := filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(f), 0o755)
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(f, []byte(c), mode); err != nil {
			t.Fatal(err)
		}
	}
	testbin.Git(t, dir, "init", "-q", "-b", "main")
	testbin.Git(t, dir, "add", "-A")
	testbin.Git(t, dir, "commit", "-q", "-m", "first")
	return dir
}

func checkoutOf(t *testing.T, src string) func(context.Context, string) (string, error) {
	return func(ctx context.Context, dst string) (string, error) {
		if _, err := workspace.Copy(ctx, src, dst, workspace.Owner{UID: sandbox.DefaultUID, GID: sandbox.DefaultGID}); err != nil {
			return "", err
		}
		return testbin.Git(t, src, "rev-parse", "HEAD"), nil
	}
}

// TestBuildSetupScript: a repository's setup.sh runs in a box with its
// secrets and HARVEST_BOOT_MODE=setup; what it leaves in HOME and in the
// checkout is the environment; the same fingerprint is not built twice;
// a changed script is; a failing setup is stored failed with its output.
func TestBuildSetupScript(t *testing.T) {
	b, st, _ := newBuilder(t)
	src := repo(t, map[string]string{
		".gitignore": "deps/\n",
		".harvest/setup.sh": "echo mode=$HARVEST_BOOT_MODE secret=$SETUP_TOKEN\n" +
			"mkdir -p ~/.cache/tool && echo warm > ~/.cache/tool/cache\n" +
			"mkdir -p deps && echo installed > deps/lib.txt\n",
		"main.txt": "hello\n",
	})
	var log bytes.Buffer
	ctx := context.Background()
	req := environment.Request{Repo: "test:calc", Name: "calc", Ref: "main", Backend: "local",
		Checkout: checkoutOf(t, src), Env: []string{"SETUP_TOKEN=s3cret-canary"}, Log: &log}
	e, err := b.Build(ctx, req)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, log.String())
	}
	if e.State != store.EnvReady || e.Commit == "" || len(e.Detected) != 1 || e.Detected[0] != environment.SetupScript {
		t.Fatalf("environment: %+v", e)
	}
	// The setup got its secret; its output shows it masked.
	if !strings.Contains(log.String(), "mode=setup secret=[secret]") || strings.Contains(log.String(), "s3cret-canary") {
		t.Fatalf("the setup's output: %s", log.String())
	}
	if c, err := os.ReadFile(filepath.Join(b.Home(e.ID), ".cache/tool/cache")); err != nil || string(c) != "warm\n" {
		t.Fatalf("HOME cache: %q, %v", c, err)
	}
	if c := tarFile(t, b.Artifacts(e.ID), "deps/lib.txt"); c != "installed\n" {
		t.Fatalf("the checkout's installed deps in the artifacts: %q", c)
	}
	// The same as a tree, for the local backend's checkout layer: the
	// setup's files only, not the repository's.
	if c, err := os.ReadFile(filepath.Join(b.Layer(e.ID), "deps", "lib.txt")); err != nil || string(c) != "installed\n" {
		t.Fatalf("the checkout's installed deps in the layer: %q %v", c, err)
	}
	if _, err := os.Stat(filepath.Join(b.Layer(e.ID), "main.txt")); err == nil {
		t.Fatal("the layer holds the repository's own files")
	}
	if l, _ := os.ReadFile(b.LogPath(e.ID)); !strings.Contains(string(l), "mode=setup") || strings.Contains(string(l), "s3cret-canary") {
		t.Fatalf("build.log: %s", l)
	}
	// Nowhere in what sessions get: HOME, the setup's files.
	if leaks := grepTree(t, filepath.Dir(b.Home(e.ID)), "s3cret-canary"); len(leaks) > 0 {
		t.Fatalf("the environment holds the secret: %v", leaks)
	}

	again, err := b.Build(ctx, req)
	if err != nil || again.ID != e.ID {
		t.Fatalf("the same fingerprint built again: %v, %v", again, err)
	}
	// A new commit is a new environment.
	os.WriteFile(filepath.Join(src, "main.txt"), []byte("changed\n"), 0o644)
	testbin.Git(t, src, "commit", "-qam", "second")
	second, err := b.Build(ctx, req)
	if err != nil || second.ID == e.ID || second.Commit == e.Commit {
		t.Fatalf("after a commit: %+v, %v", second, err)
	}
	// The older one is collected unless a session uses it.
	if n, err := b.Collect(ctx, func(id string) bool { return id == e.ID }); err != nil || n != 0 {
		t.Fatalf("collect with the old one in use: %d, %v", n, err)
	}
	if n, err := b.Collect(ctx, func(string) bool { return false }); err != nil || n != 1 {
		t.Fatalf("collect: %d, %v", n, err)
	}
	if _, err := os.Stat(b.Home(e.ID)); err == nil {
		t.Fatal("a collected environment's files are still there")
	}
	if got, _ := st.GetEnvironment(ctx, e.ID); got.State != store.EnvRemoved {
		t.Fatalf("collected: %s", got.State)
	}

	// A setup that leaves its secret in HOME (npm's way with a token): the
	// build fails, naming the secret and the file, never the value.
	leaky := repo(t, map[string]string{".harvest/setup.sh": "echo \"//registry/:_authToken=$SETUP_TOKEN\" > ~/.npmrc\n"})
	_, err = b.Build(ctx, environment.Request{Repo: "test:leaky", Name: "leaky", Backend: "local", Checkout: checkoutOf(t, leaky),
		Env: []string{"SETUP_TOKEN=s3cret-canary"}})
	if err == nil || !strings.Contains(err.Error(), "SETUP_TOKEN in home/.npmrc") || strings.Contains(err.Error(), "s3cret-canary") {
		t.Fatalf("a setup that keeps its secret: %v", err)
	}

	// A setup that fails: stored failed, with its last lines; the good one
	// stays the newest ready.
	bad := repo(t, map[string]string{".harvest/setup.sh": "echo about to fail\nfalse\necho never\n"})
	log.Reset()
	f, err := b.Build(ctx, environment.Request{Repo: "test:bad", Name: "bad", Backend: "local", Checkout: checkoutOf(t, bad), Log: &log})
	if err == nil || !strings.Contains(err.Error(), "about to fail") || strings.Contains(log.String(), "never") {
		t.Fatalf("a failing setup: %v\n%s", err, log.String())
	}
	if f == nil || f.State != store.EnvFailed {
		t.Fatalf("the failed build: %+v", f)
	}
	if _, err := os.Stat(b.LogPath(f.ID)); err != nil {
		t.Fatalf("a failed build's log is gone: %v", err)
	}
}

// TestDetect: the usual kinds of repository are recognised and said; a
// setup.sh wins; a symlinked script is refused.
func TestDetect(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"go.mod", "package-lock.json", "requirements.txt", "pyproject.toml"} {
		os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644)
	}
	p, err := environment.Detect(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"go.mod: go mod download and a build of the test binaries", "package-lock.json: npm ci, devDependencies included",
		"requirements.txt: a virtualenv in .venv with requirements.txt installed"}
	if strings.Join(p.Detected, "|") != strings.Join(want, "|") || !strings.Contains(p.Setup, "npm ci") {
		t.Fatalf("detected %q\nsetup %q", p.Detected, p.Setup)
	}
	os.MkdirAll(filepath.Join(dir, ".harvest"), 0o755)
	os.WriteFile(filepath.Join(dir, environment.SetupScript), []byte("make deps\n"), 0o755)
	os.WriteFile(filepath.Join(dir, environment.StartScript), []byte("make serve &\n"), 0o755)
	if p, _ := environment.Detect(dir); p.Setup != "make deps\n" || p.Start != "make serve &\n" {
		t.Fatalf("with scripts: %+v", p)
	}
	os.Remove(filepath.Join(dir, environment.SetupScript))
	os.Symlink("/etc/shadow", filepath.Join(dir, environment.SetupScript))
	if _, err := environment.Detect(dir); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("a symlinked setup.sh: %v", err)
	}
}

// tarFile is a file's content in a tar ("" when absent).
func tarFile(t *testing.T, path, name string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			return ""
		}
		if h.Name == name {
			b, _ := io.ReadAll(tr)
			return string(b)
		}
	}
}

// grepTree lists the files under root holding s.
func grepTree(t *testing.T, root, s string) []string {
	t.Helper()
	var found []string
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), s) {
				found = append(found, p)
			}
		}
		return nil
	})
	return found
}

// TestRepoDefaults: the server's scripts for a repository that has none of
// its own replace detection; a repository's setup.sh wins over them; a
// config with mistakes says each.
func TestRepoDefaults(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "repos.yaml")
	os.WriteFile(cfg, []byte("repositories:\n  test:plain: {}\n  github:Acme/App:\n    setup: echo from the server > ~/server.txt\n    start: echo started\n  not a repo:\n    setup: x\n  /srv/empty: {}\n  /srv/env:\n    env: {1X: a, HTTPS_PROXY: b, HARVEST_X: c}\n"), 0o644)
	_, err := environment.LoadDefaults(cfg)
	for _, want := range []string{"repositories.not a repo: name a repository", "repositories./srv/empty: give setup, start, env or some of them", "repositories.test:plain",
		`repositories./srv/env.env: "1X" is not an environment variable name`, "repositories./srv/env.env: HTTPS_PROXY is set by Harvest itself", "HARVEST_X is set by Harvest itself"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadDefaults: %v; want %q", err, want)
		}
	}
	os.WriteFile(cfg, []byte("repositories:\n  github:acme/app:\n    setup: echo hi\n    bogus: 1\n"), 0o644)
	if _, err := environment.LoadDefaults(cfg); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("an unknown field: %v", err)
	}
	os.WriteFile(cfg, []byte("repositories:\n  github:Acme/App:\n    setup: echo from the server $INDEX_URL > ~/server.txt\n    start: echo started\n    env: {INDEX_URL: http://pypi.corp.test/simple}\n"), 0o644)
	d, err := environment.LoadDefaults(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d.For("github:acme/app").Start != "echo started" {
		t.Fatalf("For: %+v", d.For("github:acme/app"))
	}

	_, st, s := newBuilder(t)
	b, err := environment.NewBuilder(environment.Config{Dir: filepath.Join(testbin.TempDir(t), "envs"), Store: st, Version: "test",
		Provider: func(string) (sandbox.Provider, error) { return s.Local, nil }, Defaults: d})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	plain := repo(t, map[string]string{"go.mod": "module x\n"})
	e, err := b.Build(ctx, environment.Request{Repo: "github:acme/app", Name: "app", Backend: "local", Checkout: checkoutOf(t, plain)})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := os.ReadFile(filepath.Join(b.Home(e.ID), "server.txt")); string(c) != "from the server http://pypi.corp.test/simple\n" || !strings.Contains(e.Detected[0], "--repo-config") {
		t.Fatalf("the server's setup: %q, detected %v", c, e.Detected)
	}
	own := repo(t, map[string]string{".harvest/setup.sh": "echo own > ~/own.txt\n"})
	e, err = b.Build(ctx, environment.Request{Repo: "github:acme/app", Name: "app", Backend: "local", Checkout: checkoutOf(t, own)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b.Home(e.ID), "own.txt")); err != nil || e.Detected[0] != environment.SetupScript {
		t.Fatalf("the repository's own setup did not win: %v, %v", err, e.Detected)
	}
}

// TestBuildNothingToSetUp: a repository with nothing to install is
// ready at once, says what it found, and has the empty HOME a box starts
// from (a box's HOME layer must exist: without it `harvest run` failed to
// start its box).
func TestBuildNothingToSetUp(t *testing.T) {
	b, _, _ := newBuilder(t)
	src := repo(t, map[string]string{"README.md": "# plain\n", ".harvest/start.sh": "echo started\n"})
	var log bytes.Buffer
	e, err := b.Build(context.Background(), environment.Request{Repo: "test:plain", Name: "plain", Backend: "local", Checkout: checkoutOf(t, src), Log: &log})
	if err != nil {
		t.Fatalf("build: %v\n%s", err, log.String())
	}
	if e.State != store.EnvReady || len(e.Detected) != 0 {
		t.Fatalf("environment: %+v", e)
	}
	for _, want := range []string{"nothing to install for test:plain at " + e.Commit[:12], "none of the files Harvest sets up from (go.work, go.mod,",
		"Gemfile.lock); the environment is its checkout and an empty HOME (its start script runs at every box start)"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the build's log lacks %q:\n%s", want, log.String())
		}
	}
	fi, err := os.Lstat(b.Home(e.ID))
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the environment's HOME: %v, %v", fi, err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != sandbox.DefaultUID || st.Gid != sandbox.DefaultGID {
		t.Fatalf("the environment's HOME is owned by %d:%d, not the box user", st.Uid, st.Gid)
	}
	if entries, _ := os.ReadDir(b.Home(e.ID)); len(entries) != 0 {
		t.Fatalf("the environment's HOME is not empty: %v", entries)
	}
	if _, err := os.Stat(b.Artifacts(e.ID)); err == nil {
		t.Fatal("an environment whose setup did not run has artifacts")
	}
	if entries, _ := os.ReadDir(filepath.Dir(b.Home(e.ID))); len(entries) != 2 { // home, build.log
		t.Fatalf("the environment's directory: %v", entries)
	}
}
