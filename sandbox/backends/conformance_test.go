package backends_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/backends"
	"github.com/harvest-dev/harvest/sandbox/docker"
	"github.com/harvest-dev/harvest/sandbox/local/cgroups"
	"github.com/harvest-dev/harvest/sandbox/sandboxtest"
)

// backendReqs are the requirements the backends' variants stand for: where
// one is required (in CI, or named by HARVEST_REQUIRE), a backend doctor
// rejects is a failure, not a skip. The host backend needs nothing a
// machine may lack: unavailable, it fails.
var backendReqs = map[string]testreq.Req{
	"local":             testreq.Local,
	"local+pool":        testreq.Local,
	"docker":            testreq.Docker,
	"docker+pool":       testreq.Docker,
	"docker+runsc":      testreq.DockerRunsc,
	"docker+runsc+pool": testreq.DockerRunsc,
}

func dockerImage() string {
	if v := os.Getenv("HARVEST_TEST_DOCKER_IMAGE"); v != "" {
		return v
	}
	return "harvest/base:bookworm"
}

func options(t testing.TB, runDir string) backends.Options {
	return backends.Options{
		RunDir:          runDir,
		AgentBinary:     testbin.Agent(t),
		DockerImage:     dockerImage(),
		AllowUnsafeHost: true,
	}
}

// leftovers checks, per backend, what a destroyed box could leave behind
// besides processes and mounts (which the suite checks itself).
func leftovers(name string) func(t testing.TB, p sandbox.Provider, h sandbox.Handle) []string {
	return func(t testing.TB, p sandbox.Provider, h sandbox.Handle) []string {
		var out []string
		if l, ok := p.(sandbox.Lister); ok {
			hs, err := l.List(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range hs {
				if x.ID == h.ID {
					out = append(out, "listed by the provider: "+x.ID)
				}
			}
		}
		if name == "docker" {
			// dockerd (cgroupfs driver) keeps a container's cgroups under
			// docker/<id> until the container is removed.
			var d struct {
				ContainerID string `json:"container_id"`
				RunDir      string `json:"run_dir"`
				InitPID     int    `json:"init_pid"`
			}
			if json.Unmarshal(h.Data, &d) == nil && d.ContainerID != "" {
				// The container's host process (the agent under runc,
				// gVisor's sentry under runsc) is gone, or a zombie.
				if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.InitPID)); d.InitPID > 0 && err == nil && !strings.Contains(string(st), ") Z ") {
					out = append(out, fmt.Sprintf("the container's process %d: %s", d.InitPID, st))
				}
				dirs, _ := filepath.Glob("/sys/fs/cgroup/*/docker/" + d.ContainerID)
				out = append(out, dirs...)
				if _, err := os.Stat(d.RunDir); err == nil {
					out = append(out, "run dir "+d.RunDir)
				}
			}
		}
		if lp, ok := p.(interface{ CgroupParent() string }); ok && name == "local" {
			if m, err := cgroups.Detect(lp.CgroupParent()); err == nil {
				for _, d := range m.Open(h.ID).Dirs {
					if _, err := os.Stat(d); err == nil {
						out = append(out, "cgroup "+d)
					}
				}
			}
		}
		return out
	}
}

// forEachAvailable runs f for every backend doctor reports available, failing
// for a required backend that is not. The local and docker backends run
// twice: cold, and with a pool of warm boxes (how a server runs them).
func forEachAvailable(t *testing.T, f func(t *testing.T, b sandboxtest.Backend)) {
	forEachVariant(t, nil, f)
}

// forEachVariant is forEachAvailable for the variants only names (all when
// nil).
func forEachVariant(t *testing.T, only []string, f func(t *testing.T, b sandboxtest.Backend)) {
	reports := backends.Doctor(context.Background(), options(t, testbin.TempDir(t)))
	for _, r := range reports {
		variants := []string{r.Backend}
		if r.Backend == "local" || r.Backend == "docker" {
			variants = append(variants, r.Backend+"+pool")
		}
		if r.Runtime != "" {
			variants = []string{r.Backend + "+" + r.Runtime, r.Backend + "+" + r.Runtime + "+pool"}
		}
		for _, variant := range variants {
			if only == nil || slices.Contains(only, variant) {
				runVariant(t, r, variant, f)
			}
		}
	}
}

func runVariant(t *testing.T, r backends.Report, variant string, f func(t *testing.T, b sandboxtest.Backend)) {
	name := r.Backend
	pool := 0
	if strings.HasSuffix(variant, "+pool") {
		pool = 2
	}
	{
		t.Run(variant, func(t *testing.T) {
			if !r.Available {
				req, ok := backendReqs[variant]
				if !ok {
					t.Fatalf("backend %s unavailable: %s (%s)", variant, r.Reason, r.Fix)
				}
				testreq.Unavailable(t, req, "backend %s unavailable: %s (%s)", variant, r.Reason, r.Fix)
			}
			// A pool variant whose boxes all started cold would pass as
			// the cold one: docker's pools must have served some. (Not
			// checked on local: its first Start on a provider does not
			// wait for the pool, and many checks start one box.)
			var hits atomic.Uint64
			if pool > 0 && name == docker.Name {
				t.Cleanup(func() { // after every provider's (registered first)
					if !t.Failed() && !t.Skipped() && hits.Load() == 0 {
						t.Errorf("%s: no box came from a warm pool", variant)
					}
				})
			}
			b := sandboxtest.Backend{
				Name:     name,
				Pool:     pool > 0,
				Isolated: r.Isolating,
				New: func(t testing.TB, runDir string) sandbox.Provider {
					o := options(t, runDir)
					o.LocalPool, o.DockerPool = pool, pool
					o.DockerRuntime = r.Runtime
					p, err := backends.Open(name, o)
					if err != nil {
						t.Fatal(err)
					}
					if c, ok := p.(interface{ Close() error }); ok {
						t.Cleanup(func() {
							if pl, ok := p.(sandbox.Pooler); ok {
								hits.Add(pl.PoolStats().Hits)
							}
							c.Close()
						})
					}
					return p
				},
				Leftovers: leftovers(name),
				Cannot:    docker.RuntimeCaveats[r.Runtime],
			}
			f(t, b)
		})
	}
}

func TestConformance(t *testing.T) {
	forEachAvailable(t, func(t *testing.T, b sandboxtest.Backend) {
		sandboxtest.Run(t, b)
	})
}

func TestIsolation(t *testing.T) {
	forEachAvailable(t, func(t *testing.T, b sandboxtest.Backend) {
		if !b.Isolated {
			t.Skipf("%s has no isolation by design (it is labelled unsafe everywhere)", b.Name)
		}
		sandboxtest.RunIsolation(t, b)
	})
}

// TestLocalCycles: 1,000 create/exec/destroy cycles on local leave nothing
// behind (-short: 100).
func TestLocalCycles(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 100
	}
	forEachVariant(t, []string{"local", "local+pool"}, func(t *testing.T, b sandboxtest.Backend) {
		if testing.Short() && b.Pool {
			t.Skip("-short: cycles run once, without the pool")
		}
		sandboxtest.RunCycles(t, b, n)
	})
}

// TestUnsafeHostRefused: the host backend needs the explicit opt-in.
func TestUnsafeHostRefused(t *testing.T) {
	_, err := backends.Open("host", backends.Options{})
	if err != sandbox.ErrUnsafeNotAllowed {
		t.Fatalf("Open(host) without the opt-in: %v", err)
	}
	if _, err := backends.Open("nope", backends.Options{}); err == nil || !strings.Contains(err.Error(), "choose one of") {
		t.Fatalf("unknown backend: %v", err)
	}
}
