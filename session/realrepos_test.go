package session

import (
	"context"
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
  - name: done
    when: {last_user_regexp: "^test ", tool_result: "EXIT="}
    reply: {text: "tests ran", usage: {input_tokens: 100, output_tokens: 10}}
  - name: gjson
    when: {last_user: "test gjson"}
    reply: {tool_calls: [{name: bash, input: {command: "set -o pipefail; go test ./... 2>&1 | tail -5; echo EXIT=$?", timeout: 600000}}]}
  - name: pump
    when: {last_user: "test pump"}
    reply: {tool_calls: [{name: bash, input: {command: "set -o pipefail; npm test 2>&1 | tail -5; echo EXIT=$?", timeout: 600000}}]}
  - name: slugify
    when: {last_user: "test python-slugify"}
    reply: {tool_calls: [{name: bash, input: {command: "set -o pipefail; .venv/bin/python test.py 2>&1 | tail -5; echo EXIT=$?", timeout: 600000}}]}
`

// TestRealRepositoriesFromEnvironments: three real public repositories
// (a Go module with dependencies, a Node package with npm dependencies, a
// Python package), each prepared once — its dependencies fetched through
// the egress proxy from the Go module proxy, the npm registry and, for
// Python, a package index of wheels built here from local sources (PyPI is
// out of reach) — then a session with no network at all runs the
// repository's own tests, and they pass; on local and docker.
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
	// The builds' egress: the real registries, and pypi.harvest.test for
	// the index served on loopback (the proxy dials no loopback address
	// by name, so the name resolves to a public-looking one whose dial is
	// sent to the index).
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
	pipIndex := "http://pypi.harvest.test" + iu.Path
	var b *environment.Builder
	opts := []envOpt{withDisks, func(c *envConfig) {
		c.envs = func(e *env) Environments {
			if b, err = environment.NewBuilder(environment.Config{Dir: filepath.Join(e.DataDir, "environments"), Store: e.st,
				Provider: e.Backends, Version: "test", Logger: e.Logger(), Egress: ep}); err != nil {
				t.Fatal(err)
			}
			return b
		}
	}}
	if backend == "docker" {
		opts = append(opts, withDocker)
	}
	e := newEnv(t, opts...)
	s, err := sim.ParseScript("real.yaml", []byte(realScript))
	if err != nil {
		t.Fatal(err)
	}
	e.Sim.Store(sim.New(s))
	ctx := context.Background()
	for _, spec := range testbin.RealRepos {
		t.Run(spec.Name, func(t *testing.T) {
			src := testbin.RealRepo(t, spec.Name)
			resolved, _ := filepath.EvalSymlinks(src)
			built, err := b.Build(ctx, environment.Request{Repo: RepoKey(store.Repo{Source: src, Origin: resolved}), Name: spec.Name,
				Backend: backend, Image: testbin.DockerImage(), Env: []string{"PIP_INDEX_URL=" + pipIndex, "PIP_TRUSTED_HOST=pypi.harvest.test"},
				Checkout: func(ctx context.Context, dst string) (string, error) {
					_, err := workspace.Copy(ctx, src, dst, workspace.Owner{UID: sandbox.DefaultUID, GID: sandbox.DefaultGID})
					return workspace.ReadHead(dst), err
				}, Log: testLog{t}})
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
		})
	}
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
