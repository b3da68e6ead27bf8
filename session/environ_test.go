package session

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/environment"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/workspace"
)

const envScript = `
rules:
  - name: rechecked
    when: {last_user: "env recheck", tool_result: "ENV-RECHECKED"}
    reply: {text: "rechecked", usage: {input_tokens: 100, output_tokens: 10}}
  - name: recheck
    when: {last_user: "env recheck"}
    reply:
      tool_calls: [{name: bash, input: {command: "cat ~/.cache/tool/warm ~/.cache/tool/session /tmp/started deps/lib.txt deps/other.txt deps/new.txt; echo ENV-RECHECKED"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: checked
    when: {last_user: "env check", tool_result: "ENV-CHECKED"}
    reply: {text: "checked", usage: {input_tokens: 100, output_tokens: 10}}
  - name: check
    when: {last_user: "env check"}
    reply:
      tool_calls: [{name: bash, input: {command: "cat ~/.cache/tool/warm deps/lib.txt /tmp/started; echo mine >> ~/.cache/tool/session; echo session >> deps/lib.txt; echo new > deps/new.txt; echo ENV-CHECKED"}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

// TestSessionStartsFromEnvironment: a session on a repository with a
// prepared environment starts with its HOME's caches and the checkout's
// installed dependencies, runs start.sh, writes its own changes above the
// environment (never into it), and keeps them across suspend and resume;
// on local (an overlay) and docker (a copy).
func TestSessionStartsFromEnvironment(t *testing.T) {
	needDisks(t)
	t.Run("local", func(t *testing.T) { testSessionEnvironment(t, "local") })
	t.Run("docker", func(t *testing.T) { testSessionEnvironment(t, "docker") })
}

func testSessionEnvironment(t *testing.T, backend string) {
	var b *environment.Builder
	opts := []envOpt{withDisks, withBuilder(&b, nil)}
	if backend == "docker" {
		opts = append(opts, withDocker)
	}
	e := newEnv(t, opts...)
	s, err := sim.ParseScript("env.yaml", []byte(envScript))
	if err != nil {
		t.Fatal(err)
	}
	e.Sim.Store(sim.New(s))
	for p, c := range map[string]string{
		".gitignore":        "deps/\n",
		".harvest/setup.sh": "mkdir -p ~/.cache/tool deps && echo warm > ~/.cache/tool/warm && echo installed > deps/lib.txt && echo other > deps/other.txt\n",
		".harvest/start.sh": "echo started $HARVEST_BOOT_MODE > /tmp/started\n",
	} {
		f := filepath.Join(e.Repo, p)
		os.MkdirAll(filepath.Dir(f), 0o755)
		os.WriteFile(f, []byte(c), 0o644)
	}
	testbin.Git(t, e.Repo, "init", "-q", "-b", "main")
	testbin.Git(t, e.Repo, "add", "-A")
	testbin.Git(t, e.Repo, "commit", "-q", "-m", "first")
	resolved, _ := filepath.EvalSymlinks(e.Repo)
	key := RepoKey(store.Repo{Source: e.Repo, Origin: resolved})
	ctx := context.Background()
	built, err := b.Build(ctx, environment.Request{Repo: key, Name: "repo", Backend: backend, Image: testbin.DockerImage(),
		Checkout: func(ctx context.Context, dst string) (string, error) {
			_, err := workspace.Copy(ctx, e.Repo, dst, workspace.Owner{UID: sandbox.DefaultUID, GID: sandbox.DefaultGID})
			return testbin.Git(t, e.Repo, "rev-parse", "HEAD"), err
		}})
	if err != nil {
		t.Fatal(err)
	}

	v := e.create("env check", func(r *CreateRequest) { r.Backend = backend })
	if v.Environment != built.ID {
		t.Fatalf("the session's environment is %q, want %s", v.Environment, built.ID)
	}
	w := e.watch(v.ID)
	out := stacktest.Typed[event.ToolFinished](w, "t1", nil).Output
	for _, want := range []string{"warm", "installed", "started start"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the session's box lacks %q from its environment:\n%s", want, out)
		}
	}
	w.IdleAfter("t1")
	if _, err := os.Stat(filepath.Join(b.Home(built.ID), ".cache/tool/session")); err == nil {
		t.Fatal("the session wrote into its environment's HOME")
	}
	// The checkout's installed files: on local a layer under the
	// checkout (nothing copied into it but what the session changed), on
	// docker unpacked into it. Either way the session's writes land in
	// its checkout, never in the environment.
	checkout := v.Repos[0].Path
	if b, err := os.ReadFile(filepath.Join(checkout, "deps", "lib.txt")); err != nil || string(b) != "installed\nsession\n" {
		t.Fatalf("the session's change to an installed file on the host: %q %v", b, err)
	}
	_, otherErr := os.Stat(filepath.Join(checkout, "deps", "other.txt"))
	if backend == "local" {
		if b, err := os.ReadFile(filepath.Join(b.Layer(built.ID), "deps", "lib.txt")); err != nil || string(b) != "installed\n" {
			t.Fatalf("the environment's layer after the session wrote to it: %q %v", b, err)
		}
		if _, err := os.Stat(filepath.Join(b.Layer(built.ID), "deps", "new.txt")); err == nil {
			t.Fatal("the session's new file landed in its environment's layer")
		}
		if otherErr == nil {
			t.Fatal("an installed file the session never touched was copied into its checkout: the layer was not used")
		}
	} else if otherErr != nil {
		t.Fatalf("docker: the installed files were not unpacked into the checkout: %v", otherErr)
	}

	// Suspend, then resume: the session's own HOME changes are kept.
	e.Clock.Advance(DefaultIdleTimeout)
	w.State(store.StateSuspended)
	e.send(v.ID, "env recheck", ModeQueue)
	out = stacktest.Typed[event.ToolFinished](w, "t2", nil).Output
	if !strings.Contains(out, "mine") || !strings.Contains(out, "warm") || !strings.Contains(out, "started start") {
		t.Fatalf("after resume the HOME lost the session's changes or the environment's caches:\n%s", out)
	}
	if !strings.Contains(out, "installed\nsession\nother\nnew") {
		t.Fatalf("after resume the checkout lost the environment's files or the session's changes to them:\n%s", out)
	}
}

// TestEnvironmentRefresh: every 30 minutes on the Manager's clock, an
// unchanged repository is not built again, a new commit is, and a broken
// setup leaves the previous environment the one sessions start from; a
// failing repository is retried with a growing backoff.
func TestEnvironmentRefresh(t *testing.T) {
	needDisks(t)
	var b *environment.Builder
	e := newEnv(t, withDisks, withBuilder(&b, func(e *env, c *environment.Config) { c.Now = e.Clock.Now }))
	ctx := context.Background()
	os.MkdirAll(filepath.Join(e.Repo, ".harvest"), 0o755)
	setup := filepath.Join(e.Repo, ".harvest/setup.sh")
	os.WriteFile(setup, []byte("mkdir -p ~/.cache && echo v1 > ~/.cache/v\n"), 0o644)
	testbin.Git(t, e.Repo, "init", "-q", "-b", "main")
	testbin.Git(t, e.Repo, "add", "-A")
	testbin.Git(t, e.Repo, "commit", "-q", "-m", "first")
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	list := func() []*store.Environment {
		es, err := b.List(ctx, store.EnvironmentFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return es
	}
	settled := func(what string, n int) []*store.Environment {
		t.Helper()
		var es []*store.Environment
		testbin.WaitFor(t, 2*time.Minute, what, func() bool {
			es = list()
			if len(es) != n {
				return false
			}
			for _, x := range es {
				if x.State == store.EnvBuilding {
					return false
				}
			}
			return true
		})
		return es
	}
	round := func(what string) {
		t.Helper()
		n := e.m.refreshed.Load()
		e.Clock.Advance(DefaultRefreshEvery)
		testbin.WaitFor(t, time.Minute, what, func() bool { return e.m.refreshed.Load() > n })
	}

	first, err := e.m.Prepare(ctx, PrepareRequest{Repo: RepoSpec{Source: e.Repo}, Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	es := settled("the first build", 1)
	if es[0].ID != first.ID || es[0].State != store.EnvReady {
		t.Fatalf("first build: %+v", es[0])
	}
	round("a refresh with nothing changed")
	settled("no build for an unchanged repository", 1)

	os.WriteFile(setup, []byte("mkdir -p ~/.cache && echo v2 > ~/.cache/v\n"), 0o644)
	testbin.Git(t, e.Repo, "commit", "-qam", "second")
	round("a refresh after a commit")
	es = settled("the second build", 2)
	second := es[0]
	if second.State != store.EnvReady || second.Commit == first.Commit {
		t.Fatalf("after a commit: %+v", second)
	}

	os.WriteFile(setup, []byte("echo broken; exit 3\n"), 0o644)
	testbin.Git(t, e.Repo, "commit", "-qam", "break the setup")
	round("a refresh after a broken commit")
	es = settled("the failed build", 3)
	if es[0].State != store.EnvFailed || !strings.Contains(es[0].Error, "broken") {
		t.Fatalf("a broken setup: %+v", es[0])
	}
	v := e.create("msg hi")
	if v.Environment != second.ID {
		t.Fatalf("a new session starts from %q, want the newest good one %s", v.Environment, second.ID)
	}
	round("the first retry, one interval after the failure")
	settled("a second failed build", 4)
	round("half the doubled backoff")
	settled("no third attempt yet", 4)
	round("the doubled backoff over")
	settled("the third attempt", 5)
	// Collected after the rounds: the first environment (older than the
	// newest ready one, used by no session), not the second (v's).
	if got, _ := b.Get(ctx, first.ID); got.State != store.EnvRemoved {
		t.Errorf("the first environment is %s, want removed", got.State)
	}
	if got, _ := b.Get(ctx, second.ID); got.State != store.EnvReady {
		t.Errorf("the environment a live session uses is %s, want ready", got.State)
	}
}

// TestServerStartScript: a repository without .harvest/start.sh runs the
// server's start script for it (serve --repo-config) at its box's start.
func TestServerStartScript(t *testing.T) {
	needDisks(t)
	var b *environment.Builder
	var key string
	e := newEnv(t, withDisks, withBuilder(&b, func(e *env, c *environment.Config) {
		resolved, _ := filepath.EvalSymlinks(e.Repo)
		key = RepoKey(store.Repo{Source: e.Repo, Origin: resolved})
		c.Defaults = &environment.Defaults{Repos: map[string]environment.RepoDefaults{
			key: {Setup: "mkdir -p ~/.cache/tool deps && echo warm > ~/.cache/tool/warm && echo installed > deps/lib.txt", Start: "echo server-start $HARVEST_BOOT_MODE > /tmp/started"},
		}}
	}))
	s, err := sim.ParseScript("env.yaml", []byte(envScript))
	if err != nil {
		t.Fatal(err)
	}
	e.Sim.Store(sim.New(s))
	os.WriteFile(filepath.Join(e.Repo, ".gitignore"), []byte("deps/\n"), 0o644)
	testbin.Git(t, e.Repo, "init", "-q", "-b", "main")
	testbin.Git(t, e.Repo, "add", "-A")
	testbin.Git(t, e.Repo, "commit", "-q", "-m", "first")
	if _, err := e.m.Prepare(context.Background(), PrepareRequest{Repo: RepoSpec{Source: e.Repo}, Admin: true}); err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, time.Minute, "the environment", func() bool {
		env, _ := b.Latest(context.Background(), key, "local")
		return env != nil
	})
	v := e.create("env check")
	out := stacktest.Typed[event.ToolFinished](e.watch(v.ID), "t1", nil).Output
	if !strings.Contains(out, "server-start start") || !strings.Contains(out, "installed") {
		t.Fatalf("the server's scripts: %s", out)
	}
}
