package session

import (
	"context"
	"io"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/egress"
	"github.com/harvest-dev/harvest/environment"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/workspace"
)

// realScript runs a repository's own tests: "test gjson" → go test, and
// so on; the output ends with its exit status.
const realScript = `
rules:
  - name: cold-done
    when: {last_user_regexp: "^cold ", tool_result: "EXIT="}
    reply: {text: "tests ran cold", usage: {input_tokens: 100, output_tokens: 10}}
  - name: cold-gjson
    when: {last_user: "cold gjson"}
    reply: {tool_calls: [{name: bash, input: {command: "set -o pipefail; go test -count=1 ./... 2>&1 | tail -3; echo EXIT=$?", timeout: 600000}}]}
  - name: cold-pump
    when: {last_user: "cold pump"}
    reply: {tool_calls: [{name: bash, input: {command: "set -o pipefail; { npm ci --no-audit --no-fund && npm test; } 2>&1 | tail -3; echo EXIT=$?", timeout: 600000}}]}
  - name: cold-dequal
    when: {last_user: "cold dequal"}
    reply: {tool_calls: [{name: bash, input: {command: "set -o pipefail; { npm install --no-package-lock --no-audit --no-fund && npm test; } 2>&1 | tail -3; echo EXIT=$?", timeout: 600000}}]}
  - name: cold-slugify
    when: {last_user: "cold python-slugify"}
    reply: {tool_calls: [{name: bash, input: {command: "set -o pipefail; { python3 -m venv .venv && PIP_INDEX_URL=http://pypi.harvest.test/simple PIP_TRUSTED_HOST=pypi.harvest.test .venv/bin/pip install -q . && .venv/bin/python test.py; } 2>&1 | tail -3; echo EXIT=$?", timeout: 600000}}]}
  - name: rebuilt
    when: {last_user: "rebuild gjson", tool_result: "REBUILT"}
    reply: {text: "rebuilt", usage: {input_tokens: 100, output_tokens: 10}}
  - name: rebuild-gjson
    when: {last_user: "rebuild gjson"}
    reply: {tool_calls: [{name: bash, input: {command: "echo compiles=$(go test -count=1 -x -run '^$' ./... 2>&1 | grep -c '/compile '); echo REBUILT", timeout: 600000}}]}
  - name: warm-gjson
    when: {last_user: "warm gjson"}
    reply: {tool_calls: [{name: bash, input: {command: "set -o pipefail; go test -count=1 ./... 2>&1 | tail -3; echo EXIT=$?", timeout: 600000}}]}
  - name: done
    when: {last_user_regexp: "^(test|warm) ", tool_result: "EXIT="}
    reply: {text: "tests ran", usage: {input_tokens: 100, output_tokens: 10}}
  - name: gjson
    when: {last_user: "test gjson"}
    reply: {tool_calls: [{name: bash, input: {command: "set -o pipefail; go test ./... 2>&1 | tail -5; echo EXIT=$?", timeout: 600000}}]}
  - name: pump
    when: {last_user: "test pump"}
    reply: {tool_calls: [{name: bash, input: {command: "set -o pipefail; npm test 2>&1 | tail -5; echo EXIT=$?", timeout: 600000}}]}
  - name: dequal
    when: {last_user: "test dequal"}
    reply: {tool_calls: [{name: bash, input: {command: "set -o pipefail; npm test 2>&1 | tail -5; echo EXIT=$?", timeout: 600000}}]}
  - name: slugify
    when: {last_user: "test python-slugify"}
    reply: {tool_calls: [{name: bash, input: {command: "set -o pipefail; .venv/bin/python test.py 2>&1 | tail -5; echo EXIT=$?", timeout: 600000}}]}
`

// TestRealRepositoriesFromEnvironments: the real public repositories (a
// Go module with dependencies, a Node package with npm dependencies and
// one with no lockfile, a Python package), each prepared once — its
// dependencies fetched through the egress proxy from the Go module proxy,
// the npm registry and, for Python, a package index of wheels built here
// from local sources (PyPI is out of reach) — then a session with no
// network at all runs the repository's own tests, and they pass; on local
// and docker (the host's node, and the image's Debian node 18).
func TestRealRepositoriesFromEnvironments(t *testing.T) {
	needDisks(t)
	for _, tool := range []string{"go", "npm"} {
		testbin.Toolchain(t, tool)
	}
	index := testbin.PyIndex(t, testbin.Python3(t), testbin.Testdata(t, "pydeps", "text-unidecode-1.3.tar.gz"))
	for _, backend := range []string{"local", "docker"} {
		t.Run(backend, func(t *testing.T) { testRealRepositories(t, backend, index) })
	}
}

func testRealRepositories(t *testing.T, backend, index string) {
	e, b, pipIndex := realStack(t, backend, index)
	ctx := context.Background()
	for _, spec := range testbin.RealRepos {
		t.Run(spec.Name, func(t *testing.T) {
			src := testbin.RealRepo(t, spec.Name)
			resolved, _ := filepath.EvalSymlinks(src)
			built, err := b.Build(ctx, realRequest(src, resolved, spec.Name, backend, pipIndex, testLog{t}))
			if err != nil {
				t.Fatal(err)
			}
			v := e.create("test "+spec.Name, func(r *CreateRequest) {
				r.Backend, r.Repos = backend, []RepoSpec{{Source: src}}
				none := []string{}
				r.Egress = &none
			})
			if v.Environment != built.ID {
				t.Fatalf("the session did not start from %s: %q", built.ID, v.Environment)
			}
			w := e.watch(v.ID)
			out := stacktest.Typed[event.ToolFinished](w, "t1", nil).Output
			if !strings.Contains(out, "EXIT=0") {
				t.Fatalf("%s's tests in a session without network:\n%s", spec.Name, out)
			}
			t.Logf("%s on %s: %s", spec.Name, backend, strings.ReplaceAll(strings.TrimSpace(out), "\n", " | "))
			if spec.Name == "gjson" {
				// Suspend and resume: the build cache is still warm, the
				// environment's and the session's own (nothing compiles).
				w.IdleAfter("t1")
				e.Clock.Advance(DefaultIdleTimeout)
				w.State(store.StateSuspended)
				e.send(v.ID, "rebuild gjson", ModeQueue)
				if out := stacktest.Typed[event.ToolFinished](w, "t2", nil).Output; !strings.Contains(out, "compiles=0") {
					t.Fatalf("after resume, building gjson's tests compiled again:\n%s", out)
				}
			}
		})
	}
}

// realStack is a session stack whose environment builds reach the real
// registries and pypi.harvest.test, the index served on loopback (the
// egress proxy dials no loopback address by name, so the name resolves to
// a public-looking one whose dial is sent to the index); the sessions'
// own egress, when a session asks for the server's, is the same.
func realStack(t testing.TB, backend, index string) (*env, *environment.Builder, string) {
	iu, err := url.Parse(index)
	if err != nil {
		t.Fatal(err)
	}
	fake := netip.MustParseAddr("203.0.113.9")
	ep, err := egress.New(egress.Config{
		Allow:    append(append([]string{}, egress.DefaultRegistries...), "pypi.harvest.test"),
		Resolver: indexResolver{fake},
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			if strings.HasPrefix(addr, fake.String()+":") {
				return d.DialContext(ctx, network, iu.Host)
			}
			return d.DialContext(ctx, network, addr)
		},
		Logger: testbin.Logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var b *environment.Builder
	opts := []envOpt{withDisks, withEgress(ep), withBuilder(&b, func(_ *env, c *environment.Config) { c.Egress = ep })}
	if backend == "docker" {
		opts = append(opts, withDocker)
	}
	e := newEnv(t, opts...)
	s, err := sim.ParseScript("real.yaml", []byte(realScript))
	if err != nil {
		t.Fatal(err)
	}
	e.Sim.Store(sim.New(s))
	return e, b, "http://pypi.harvest.test" + iu.Path
}

// realRequest is the environment build of a real repository's checkout.
func realRequest(src, resolved, name, backend, pipIndex string, log io.Writer) environment.Request {
	return environment.Request{Repo: RepoKey(store.Repo{Source: src, Origin: resolved}), Name: name,
		Backend: backend, Image: testbin.DockerImage(), Env: []string{"PIP_INDEX_URL=" + pipIndex, "PIP_TRUSTED_HOST=pypi.harvest.test"},
		Checkout: func(ctx context.Context, dst string) (string, error) {
			_, err := workspace.Copy(ctx, src, dst, workspace.Owner{UID: sandbox.DefaultUID, GID: sandbox.DefaultGID})
			return workspace.ReadHead(dst), err
		}, Log: log}
}

type indexResolver struct{ addr netip.Addr }

func (r indexResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if host == "pypi.harvest.test" {
		return []netip.Addr{r.addr}, nil
	}
	return net.DefaultResolver.LookupNetIP(ctx, network, host)
}

// testLog writes a build's log to the test's.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
