package session

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
)

// BenchmarkRealRepositories: for each real repository, on each backend,
// from session create to the first test command's exit — in a session
// started from its prepared environment with no network (prepared-ms),
// in one with no environment that installs what it needs through the
// egress proxy first (cold-ms) — against the same test command on the
// host with a warm cache (host-ms); and the environment's build time and
// size. One iteration each:
//
//	go test -run '^$' -bench RealRepositories -benchtime 1x ./session/
func BenchmarkRealRepositories(b *testing.B) {
	needDisks(b)
	index := testbin.PyIndex(b, testbin.Python3(b), testbin.Testdata(b, "pydeps", "text-unidecode-1.3.tar.gz"))
	for _, backend := range []string{"local", "docker"} {
		b.Run(backend, func(b *testing.B) {
			e, builder, pipIndex := realStack(b, backend, index)
			for _, spec := range testbin.RealRepos {
				b.Run(spec.Name, func(b *testing.B) {
					src := testbin.RealRepo(b, spec.Name)
					resolved, _ := filepath.EvalSymlinks(src)
					host := hostWarm(b, spec.Name, index)
					var prepared, cold, prep time.Duration
					var size int64
					prompt := "test " + spec.Name
					if spec.Name == "gjson" {
						prompt = "warm gjson" // go test -count=1, as on the host
					}
					// One iteration: the cold session runs before the
					// environment exists, so it starts from none.
					for b.Loop() {
						cold = firstTest(b, e, backend, src, "cold "+spec.Name, true)
						start := time.Now()
						built, err := builder.Build(context.Background(), realRequest(src, resolved, spec.Name, backend, pipIndex, io.Discard))
						if err != nil {
							b.Fatal(err)
						}
						prep, size = time.Since(start), built.SizeBytes
						prepared = firstTest(b, e, backend, src, prompt, false)
					}
					b.ReportMetric(ms(prepared), "prepared-ms")
					b.ReportMetric(ms(cold), "cold-ms")
					b.ReportMetric(ms(host), "host-ms")
					b.ReportMetric(float64(prepared)/float64(host), "prepared/host")
					b.ReportMetric(ms(prep), "prepare-ms")
					b.ReportMetric(float64(size)/(1<<20), "env-MB")
				})
			}
		})
	}
}

// firstTest creates a session on src that runs prompt's test command and
// returns the time from create to that command's end; cold sessions start
// from no environment and may use the egress proxy.
func firstTest(b *testing.B, e *env, backend, src, prompt string, cold bool) time.Duration {
	b.Helper()
	start := time.Now()
	v := e.create(prompt, func(r *CreateRequest) {
		r.Backend, r.Repos = backend, []RepoSpec{{Source: src}}
		if !cold {
			none := []string{}
			r.Egress = &none
		}
	})
	if cold != (v.Environment == "") {
		b.Fatalf("%s: the session's environment is %q", prompt, v.Environment)
	}
	w := e.watch(v.ID)
	out := stacktest.Typed[event.ToolFinished](w, "t1", nil).Output
	d := time.Since(start)
	if !strings.Contains(out, "EXIT=0") {
		b.Fatalf("%s: %s", prompt, out)
	}
	return d
}

// hostWarm runs the repository's test command on the host twice, with
// everything installed, and returns the second run's time.
func hostWarm(b *testing.B, name, index string) time.Duration {
	b.Helper()
	dir := testbin.RealRepo(b, name)
	run := func(script string) time.Duration {
		cmd := exec.Command("sh", "-c", "set -e\n"+script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "PIP_INDEX_URL="+index, "PIP_CONFIG_FILE=/dev/null")
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s on the host: %v\n%s", name, err, out)
		}
		return time.Since(start)
	}
	switch name {
	case "gjson":
		run("go mod download")
		run("go test -count=1 ./...")
		return run("go test -count=1 ./...")
	case "pump":
		run("npm ci --no-audit --no-fund")
		run("npm test")
		return run("npm test")
	case "dequal":
		run("npm install --no-package-lock --no-audit --no-fund")
		run("npm test")
		return run("npm test")
	default:
		run("/usr/bin/python3 -m venv .venv && .venv/bin/pip install -q .")
		run(".venv/bin/python test.py")
		return run(".venv/bin/python test.py")
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
