package cli

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox/docker"
	"github.com/harvest-dev/harvest/wire"
)

const prepareScript = `
rules:
  - name: ran
    when: {last_user: "run the tests", tool_result: "TESTS-RAN"}
    reply: {text: "the tests ran", usage: {input_tokens: 100, output_tokens: 10}}
  - name: run
    when: {last_user: "run the tests"}
    reply:
      tool_calls: [{name: bash, input: {command: "go test ./... 2>&1 | tail -5; echo TESTS-RAN", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

// TestPrepareRealGoRepository: harvest prepare on a real Go module with
// module dependencies (gjson) downloads them and builds its test binaries
// once, with egress to the registries; a session on it then runs the
// repository's own tests with no network at all, and they pass.
func TestPrepareRealGoRepository(t *testing.T) {
	testbin.Toolchain(t, "go")
	repo := testbin.RealRepo(t, "gjson")
	e := newServeEnvWith(t, prepareScript)
	s := e.start("--egress-allow", "registries")
	c := e.client(s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	id := prepareRepo(t, ctx, e, s, repo, "go.mod: go mod download and a build of the test binaries", "is ready")
	env, err := c.GetEnvironment(ctx, id)
	if err != nil || env.State != wire.EnvReady || env.Commit == "" {
		t.Fatalf("the environment: %+v, %v", env, err)
	}
	// Unchanged: not built again.
	again, err := c.PrepareEnvironment(ctx, wire.PrepareRequest{Repo: wire.RepoSpec{Source: repo}})
	if err != nil || again.ID != id {
		t.Fatalf("preparing it again: %+v, %v; want %s", again, err, id)
	}

	// A user token sees the environment without the server's path of the
	// repository, in its view and in its build log.
	tok, err := c.CreateToken(ctx, "bob", false)
	if err != nil {
		t.Fatal(err)
	}
	bob, err := client.New(s.url, tok.Secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen, err := bob.ListEnvironments(ctx, "", "", "")
	if err != nil || len(seen) != 1 || seen[0].Repo != "dir:gjson" {
		t.Fatalf("a user token's list: %+v, %v", seen, err)
	}
	lr, err := bob.EnvironmentLog(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	logText, _ := io.ReadAll(lr)
	lr.Close()
	if strings.Contains(string(logText), repo) || !strings.Contains(string(logText), "dir:gjson") {
		t.Fatalf("a user token's build log names the server's path:\n%s", logText)
	}

	got := testsInSession(t, ctx, c, repo, "run the tests", id)
	if !strings.Contains(got, "ok") || strings.Contains(got, "FAIL") || strings.Contains(got, "go: downloading") {
		t.Fatalf("gjson's tests in a session without network:\n%s", got)
	}

	// harvest run on the same repository starts from the same environment
	// (the server's data directory is $HARVEST_HOME): the tests pass with no
	// network; --cold starts without it, and they cannot even build.
	runOut, _ := testsInRun(t, e, repo, prepareScript, "run the tests", id)
	if !strings.Contains(runOut, `ok  \tgithub.com/tidwall/gjson`) || strings.Contains(runOut, "go: downloading") {
		t.Fatalf("gjson's tests in harvest run from the environment:\n%s", runOut)
	}
	runOut, errOut := testsInRun(t, e, repo, prepareScript, "run the tests", "")
	if strings.Contains(errOut, "prepared environment") || strings.Contains(runOut, `ok  \tgithub.com/tidwall/gjson`) {
		t.Fatalf("harvest run --cold started warm:\n%s\n%s", runOut, errOut)
	}
}

const prepareNodeScript = `
rules:
  - name: ran
    when: {last_user: "run the node tests", tool_result: "TESTS-RAN"}
    reply: {text: "the tests ran", usage: {input_tokens: 100, output_tokens: 10}}
  - name: run
    when: {last_user: "run the node tests"}
    reply:
      tool_calls: [{name: bash, input: {command: "set -o pipefail; npm test 2>&1 | tail -3; echo EXIT=$?; echo TESTS-RAN", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

// TestPrepareRealNodeRepositoryDocker: harvest prepare on a real Node
// package (npm ci from the npm registry through the egress proxy) for the
// docker backend; a session on it there runs npm test with no network.
func TestPrepareRealNodeRepositoryDocker(t *testing.T) {
	testbin.Toolchain(t, "npm")
	repo := testbin.RealRepo(t, "pump")
	e := newServeEnvWith(t, prepareNodeScript)
	t.Cleanup(func() { // after serve is killed (its cleanup runs first): the docker boxes it made
		p := docker.New(docker.Config{RunDir: filepath.Join(e.runDir, docker.Name), AgentBinary: testbin.Agent(t)})
		stacktest.DestroyAll(t, p)
		p.Close()
		// and its warm containers, which no list of boxes shows: what an
		// operator runs after a killed server.
		prune := exec.Command(testbin.Harvest(t), "sandbox", "prune")
		prune.Env = e.env
		if out, err := prune.CombinedOutput(); err != nil {
			t.Errorf("harvest sandbox prune: %v\n%s", err, out)
		}
	})
	s := e.start("--egress-allow", "registries", "--backend", "docker")
	c := e.client(s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testbin.Harvest(t), "prepare", "--server", s.url, "--data", e.home, "--repo", repo, "--json")
	cmd.Env = e.env
	var stderr testbin.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("harvest prepare: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "package-lock.json: npm ci") || !strings.Contains(string(out), `"backend": "docker"`) {
		t.Fatalf("harvest prepare:\n%s\n%s", out, stderr.String())
	}
	none := []string{}
	v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "run the node tests", Egress: &none})
	if err != nil {
		t.Fatal(err)
	}
	if v.Environment == "" || v.Backend != "docker" {
		t.Fatalf("the session: environment %q on %s", v.Environment, v.Backend)
	}
	evs := follow(t, c, v.ID, 0, "the tests' output", func(ev event.Event) bool {
		d, ok := ev.Data.(event.ToolFinished)
		return ok && strings.Contains(d.Output, "TESTS-RAN")
	})
	if got := evs[len(evs)-1].Data.(event.ToolFinished).Output; !strings.Contains(got, "EXIT=0") {
		t.Fatalf("pump's tests in a docker session without network:\n%s", got)
	}
}

const preparePythonScript = `
rules:
  - name: ran
    when: {last_user: "run the python tests", tool_result: "TESTS-RAN"}
    reply: {text: "the tests ran", usage: {input_tokens: 100, output_tokens: 10}}
  - name: run
    when: {last_user: "run the python tests"}
    reply:
      tool_calls: [{name: bash, input: {command: "set -o pipefail; .venv/bin/python test.py 2>&1 | tail -3; echo EXIT=$?; echo TESTS-RAN", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

// TestPrepareRealPythonRepository: harvest prepare on a real Python
// package (python-slugify, whose pyproject.toml needs text-unidecode)
// installs it into a virtualenv from a private package index on the
// host's network — PyPI is out of reach, so the index serves wheels built
// here from local sources — which the server reaches as an internal
// registry (--egress-internal) named in the server's settings for the
// repository (--repo-config env: PIP_INDEX_URL); a session on it then runs
// the package's own tests with no network, and they pass.
func TestPrepareRealPythonRepository(t *testing.T) {
	py := testbin.Python3(t)
	repo := testbin.RealRepo(t, "python-slugify")
	index := testbin.PyIndexAt(t, netip.AddrPortFrom(testbin.HostAddr(t), 0).String(), py,
		testbin.Testdata(t, "pydeps", "text-unidecode-1.3.tar.gz"))
	iu, err := url.Parse(index)
	if err != nil {
		t.Fatal(err)
	}
	e := newServeEnvWith(t, preparePythonScript)
	resolved, _ := filepath.EvalSymlinks(repo)
	cfg := filepath.Join(t.TempDir(), "repos.yaml")
	os.WriteFile(cfg, fmt.Appendf(nil, "repositories:\n  %s:\n    env:\n      PIP_INDEX_URL: http://pypi.corp.test:%s/simple\n      PIP_TRUSTED_HOST: pypi.corp.test\n", resolved, iu.Port()), 0o644)
	s := e.start("--egress-internal", "pypi.corp.test="+iu.Host, "--repo-config", cfg)
	c := e.client(s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	cmd := exec.CommandContext(ctx, testbin.Harvest(t), "prepare", "--server", s.url, "--data", e.home, "--repo", repo)
	cmd.Env = e.env
	var stderr testbin.Buffer
	cmd.Stderr = &stderr
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("harvest prepare: %v\n%s%s", err, out, stderr.String())
	}
	for _, want := range []string{"pyproject.toml: a virtualenv in .venv with the package installed", "Successfully installed", "text-unidecode", "is ready"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("harvest prepare's log lacks %q:\n%s", want, stderr.String())
		}
	}
	none := []string{}
	v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "run the python tests", Egress: &none})
	if err != nil {
		t.Fatal(err)
	}
	if v.Environment == "" {
		t.Fatalf("the session did not start from the environment")
	}
	evs := follow(t, c, v.ID, 0, "the tests' output", func(ev event.Event) bool {
		d, ok := ev.Data.(event.ToolFinished)
		return ok && strings.Contains(d.Output, "TESTS-RAN")
	})
	if got := evs[len(evs)-1].Data.(event.ToolFinished).Output; !strings.Contains(got, "EXIT=0") || !strings.Contains(got, "OK") {
		t.Fatalf("python-slugify's tests in a session without network:\n%s", got)
	}
}

const prepareNothingScript = `
rules:
  - name: checked
    when: {last_user: "check the box", tool_result: "CHECKED"}
    reply: {text: "checked", usage: {input_tokens: 100, output_tokens: 10}}
  - name: check
    when: {last_user: "check the box"}
    reply:
      tool_calls: [{name: bash, input: {command: "echo written > ~/probe && cat ~/probe; cat /tmp/start-marker; cat README.md; echo CHECKED"}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

// TestPrepareNothingToSetUp: harvest prepare on a repository with
// nothing to install says so and records an environment a box can start
// from — harvest run and a session on it work, with a writable HOME and
// its start script run (an environment recorded with no HOME once made
// harvest run fail with "home layer: ... no such file or directory");
// and one recorded without a HOME, as an older Harvest did, still starts.
func TestPrepareNothingToSetUp(t *testing.T) {
	repo := filepath.Join(testbin.TempDir(t), "plain")
	os.MkdirAll(filepath.Join(repo, ".harvest"), 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("a plain repository\n"), 0o644)
	os.WriteFile(filepath.Join(repo, ".harvest", "start.sh"), []byte("echo started > /tmp/start-marker\n"), 0o755)
	testbin.Git(t, repo, "init", "-q", "-b", "main")
	testbin.Git(t, repo, "add", "-A")
	testbin.Git(t, repo, "commit", "-qm", "first")
	e := newServeEnvWith(t, prepareNothingScript)
	s := e.start()
	c := e.client(s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	cmd := exec.CommandContext(ctx, testbin.Harvest(t), "prepare", "--server", s.url, "--data", e.home, "--repo", repo)
	cmd.Env = e.env
	var stderr testbin.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("harvest prepare: %v\n%s", err, stderr.String())
	}
	id := strings.TrimSpace(string(out))
	resolved, _ := filepath.EvalSymlinks(repo)
	for _, want := range []string{"harvest: nothing to install for " + resolved + " at ", "it has no .harvest/setup.sh and none of the files Harvest sets up from (go.work, go.mod, package-lock.json",
		"the environment is its checkout and an empty HOME (its start script runs at every box start)", id + " is ready"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("harvest prepare's log lacks %q:\n%s", want, stderr.String())
		}
	}
	if env, err := c.GetEnvironment(ctx, id); err != nil || env.State != wire.EnvReady || len(env.Detected) != 0 {
		t.Fatalf("the environment: %+v, %v", env, err)
	}
	checked := func(what, out string) {
		t.Helper()
		for _, want := range []string{"written", "started", "a plain repository", "CHECKED"} {
			if !strings.Contains(out, want) {
				t.Fatalf("%s: the box's output lacks %q:\n%s", what, want, out)
			}
		}
	}

	script := filepath.Join(t.TempDir(), "run.yaml")
	os.WriteFile(script, []byte(prepareNothingScript), 0o644)
	code, runOut, errOut := runHarvest(t, e.env, "", "run", "--repo", repo, "--sim-script", script, "--json", "check the box")
	if code != 0 || !strings.Contains(errOut, "starting from the prepared environment "+id) || strings.Contains(errOut, "no HOME") {
		t.Fatalf("harvest run: exit %d\n%s", code, errOut)
	}
	checked("harvest run", runOut)

	none := []string{}
	v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "check the box", Egress: &none})
	if err != nil {
		t.Fatal(err)
	}
	if v.Environment != id {
		t.Fatalf("the session's environment is %q, want %s", v.Environment, id)
	}
	evs := follow(t, c, v.ID, 0, "the box's check", func(ev event.Event) bool {
		d, ok := ev.Data.(event.ToolFinished)
		return ok && strings.Contains(d.Output, "CHECKED")
	})
	checked("the session", evs[len(evs)-1].Data.(event.ToolFinished).Output)
	if strings.Contains(s.stderr.String(), "no files on this node") {
		t.Fatalf("the session started without its environment's HOME:\n%s", s.stderr.String())
	}

	// An environment recorded without a HOME (by an older Harvest, when
	// nothing needed installing): harvest run says so and starts all the
	// same.
	if err := os.Remove(filepath.Join(e.home, "environments", id, "home")); err != nil {
		t.Fatal(err)
	}
	code, runOut, errOut = runHarvest(t, e.env, "", "run", "--repo", repo, "--sim-script", script, "--json", "check the box")
	if code != 0 || !strings.Contains(errOut, "the prepared environment "+id+" has no HOME on this machine: the box starts with a fresh one") {
		t.Fatalf("harvest run from an environment without a HOME: exit %d\n%s", code, errOut)
	}
	checked("harvest run without the environment's HOME", runOut)
}

const prepareNoLockfileScript = `
rules:
  - name: ran
    when: {last_user: "run the dequal tests", tool_result: "TESTS-RAN"}
    reply: {text: "the tests ran", usage: {input_tokens: 100, output_tokens: 10}}
  - name: run
    when: {last_user: "run the dequal tests"}
    reply:
      tool_calls: [{name: bash, input: {command: "set -o pipefail; npm test 2>&1 | tail -4; echo EXIT=$?; test -e package-lock.json || echo NO-LOCKFILE; echo TESTS-RAN", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

// TestPrepareRealNodeNoLockfile: harvest prepare on a real Node package
// that publishes no lockfile (dequal: package.json only, its tests need
// its devDependencies) installs what package.json names from the npm
// registry, through the egress proxy, writing no lockfile; then its own
// tests pass in a session with no network and in harvest run (without
// the environment, --cold, they cannot).
func TestPrepareRealNodeNoLockfile(t *testing.T) {
	testbin.Toolchain(t, "npm")
	repo := testbin.RealRepo(t, "dequal")
	e := newServeEnvWith(t, prepareNoLockfileScript)
	s := e.start("--egress-allow", "registries")
	c := e.client(s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	id := prepareRepo(t, ctx, e, s, repo, "package.json (no lockfile): npm install, devDependencies included, writing no package-lock.json", "added ", " is ready")
	passed := func(what, out string) {
		t.Helper()
		if !strings.Contains(out, "EXIT=0") || !strings.Contains(out, "Passed") || !strings.Contains(out, "NO-LOCKFILE") {
			t.Fatalf("dequal's tests in %s:\n%s", what, out)
		}
	}

	passed("a session without network", testsInSession(t, ctx, c, repo, "run the dequal tests", id))
	runOut, _ := testsInRun(t, e, repo, prepareNoLockfileScript, "run the dequal tests", id)
	passed("harvest run", runOut)
	runOut, errOut := testsInRun(t, e, repo, prepareNoLockfileScript, "run the dequal tests", "")
	if strings.Contains(errOut, "prepared environment") || strings.Contains(runOut, "EXIT=0") || !strings.Contains(runOut, "TESTS-RAN") {
		t.Fatalf("harvest run --cold started warm, or did not run the tests:\n%s\n%s", runOut, errOut)
	}
}

// prepareRepo runs harvest prepare on repo against the server s and
// returns the environment's id; its log must say each of wantLog.
func prepareRepo(t *testing.T, ctx context.Context, e *serveEnv, s *serveProc, repo string, wantLog ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, testbin.Harvest(t), "prepare", "--server", s.url, "--data", e.home, "--repo", repo)
	cmd.Env = e.env
	var stderr testbin.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("harvest prepare: %v\n%s", err, stderr.String())
	}
	id := strings.TrimSpace(string(out))
	for _, want := range wantLog {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("harvest prepare's log lacks %q:\n%s", want, stderr.String())
		}
	}
	return id
}

// testsInSession starts a session on repo with no network at all, which
// must start from the environment env, and returns the output of the
// bash call whose output says TESTS-RAN (the scripts above).
func testsInSession(t *testing.T, ctx context.Context, c *client.Client, repo, prompt, env string) string {
	t.Helper()
	none := []string{}
	v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: prompt, Egress: &none})
	if err != nil {
		t.Fatal(err)
	}
	if v.Environment != env {
		t.Fatalf("the session's environment is %q, want %s", v.Environment, env)
	}
	evs := follow(t, c, v.ID, 0, "the tests' output", func(ev event.Event) bool {
		d, ok := ev.Data.(event.ToolFinished)
		return ok && strings.Contains(d.Output, "TESTS-RAN")
	})
	return evs[len(evs)-1].Data.(event.ToolFinished).Output
}

// testsInRun runs harvest run on repo with the sim script and returns
// its events and its log. With env, it must start from that environment
// and succeed; without, it runs --cold.
func testsInRun(t *testing.T, e *serveEnv, repo, script, prompt, env string) (string, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if env == "" {
		_, out, errOut := runHarvest(t, e.env, "", "run", "--cold", "--repo", repo, "--sim-script", file, "--json", prompt)
		return out, errOut
	}
	code, out, errOut := runHarvest(t, e.env, "", "run", "--repo", repo, "--sim-script", file, "--json", prompt)
	if code != 0 || !strings.Contains(errOut, "starting from the prepared environment "+env) {
		t.Fatalf("harvest run: exit %d\n%s", code, errOut)
	}
	return out, errOut
}
