package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
)

const envBenchScript = `
rules:
  - name: done
    when: {tool_result: "FIRST-CMD"}
    reply: {text: "done", usage: {input_tokens: 10, output_tokens: 1}}
  - name: first
    when: {last_user: "go"}
    reply:
      tool_calls: [{name: bash, input: {command: "date +%s%N; echo FIRST-CMD"}}]
      usage: {input_tokens: 10, output_tokens: 1}
`

// bigNodeModules is a setup that installs a node_modules like the one of
// issue 23's measurement (70 MB in 10,800 files: 1,080 packages of 10
// files of 6.5 KB), without a registry.
const bigNodeModules = `python3 -c '
import os
for p in range(1080):
    d = "node_modules/pkg%d/lib" % p
    os.makedirs(d)
    for f in range(10):
        with open("%s/f%d.js" % (d, f), "wb") as fh:
            fh.write(os.urandom(6500))
'
mkdir -p ~/.cache/tool && echo warm > ~/.cache/tool/warm
`

// BenchmarkRunFromEnvironment: the time from `harvest run`'s start to
// its first command in the box, on a repository whose prepared
// environment is only HOME (like a Go repository's) and on one whose
// setup left a 70 MB, 10,800-file node_modules in the checkout,
// interleaved. Metrics: the p50 of each, and of the difference.
//
//	go test -run '^$' -bench RunFromEnvironment -benchtime 10x ./internal/cli/
func BenchmarkRunFromEnvironment(b *testing.B) {
	testbin.Toolchain(b, "python3")
	e := newServeEnvWith(b, envBenchScript)
	s := e.start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	mkRepo := func(name, setup string) string {
		repo := filepath.Join(testbin.TempDir(b), name)
		for p, c := range map[string]string{".gitignore": "node_modules/\n", ".harvest/setup.sh": setup, "README.md": "# " + name + "\n"} {
			f := filepath.Join(repo, p)
			os.MkdirAll(filepath.Dir(f), 0o755)
			if err := os.WriteFile(f, []byte(c), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		testbin.Git(b, repo, "init", "-q", "-b", "main")
		testbin.Git(b, repo, "add", "-A")
		testbin.Git(b, repo, "commit", "-q", "-m", "first")
		cmd := exec.CommandContext(ctx, testbin.Harvest(b), "prepare", "--server", s.url, "--data", e.home, "--repo", repo)
		cmd.Env = e.env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("harvest prepare %s: %v\n%s", name, err, out)
		}
		return repo
	}
	small := mkRepo("small", "mkdir -p ~/.cache/tool && echo warm > ~/.cache/tool/warm\n")
	big := mkRepo("big", bigNodeModules)
	file := filepath.Join(testbin.TempDir(b), "run.yaml")
	if err := os.WriteFile(file, []byte(envBenchScript), 0o644); err != nil {
		b.Fatal(err)
	}
	first := regexp.MustCompile(`(\d{19})\\nFIRST-CMD`)
	run := func(repo string) time.Duration {
		cmd := exec.CommandContext(ctx, testbin.Harvest(b), "run", "--repo", repo, "--sim-script", file, "--json", "go")
		cmd.Env = e.env
		var errb strings.Builder
		cmd.Stderr = &errb
		t0 := time.Now()
		out, err := cmd.Output()
		if err != nil || !strings.Contains(errb.String(), "starting from the prepared environment") {
			b.Fatalf("harvest run: %v\n%s\n%s", err, out, errb.String())
		}
		m := first.FindSubmatch(out)
		if m == nil {
			b.Fatalf("harvest run: no first command's time in\n%s", out)
		}
		ns, _ := strconv.ParseInt(string(m[1]), 10, 64)
		return time.Unix(0, ns).Sub(t0)
	}
	run(small) // warm the page cache for both
	run(big)
	var ts, tb, diff []float64
	for b.Loop() {
		a, c := run(small), run(big)
		ts, tb, diff = append(ts, a.Seconds()), append(tb, c.Seconds()), append(diff, (c-a).Seconds())
	}
	med := func(v []float64) float64 {
		sort.Float64s(v)
		return v[len(v)/2]
	}
	b.ReportMetric(med(ts), "home-only-p50-s")
	b.ReportMetric(med(tb), "node_modules-70MB-p50-s")
	b.ReportMetric(med(diff), "difference-p50-s")
}
