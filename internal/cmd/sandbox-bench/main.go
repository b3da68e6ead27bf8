// Command sandbox-bench measures Harvest's sandbox layer against the
// alternatives, side by side in one run, and prints a markdown table
// (scripts/bench-sandbox runs it; results go in BENCHMARKS.md).
//
//	create→first exit   Start + Run(true): local cold and with a pool of warm
//	                    boxes (server mode), docker, vs raw `docker run`
//	exec round trip     Run(true) in a live box (local, docker, host) vs
//	                    `docker exec`, a fresh bwrap per command, fork+exec
//	gVisor              the docker rows again with --runtime runsc, Harvest's
//	                    and raw docker's (-runsc=false: none)
//	warm create on a    a warm local box on a new 20 GiB disk, the disk made on
//	new disk            the spot (mkfs) or taken from a disk pool, vs no disk
//	                    and a bare bwrap
//	docker warm create  a docker box from a pool of warm containers vs cold,
//	                    raw `docker run` and `docker exec` (and under gVisor)
//	concurrent creates  50 boxes started at once (local)
//	destroy             Destroy of a box with one idle process
//	agent RSS           the in-box agent's resident memory
//
// -only picks groups of rows. It needs root, bwrap, a running dockerd and
// the base image (scripts/setup).
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/backends"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/sandbox/owner"
)

var (
	n          = flag.Int("n", 300, "samples for the fast measurements")
	nSlow      = flag.Int("n-slow", 30, "samples for docker create and docker exec")
	concurrent = flag.Int("concurrent", 50, "boxes created at once")
	runsc      = flag.Bool("runsc", true, "add docker's rows under gVisor (--runtime runsc) when dockerd has it")
	image      = flag.String("image", "harvest/base:bookworm", "docker image")
	agentBin   = flag.String("agent", "", "harvest-agent binary (default: next to this program, or $HARVEST_AGENT_BINARY)")
	harvestBin = flag.String("harvest", "", "the harvest binary: adds the CLI's rows (start, a one-shot sandbox run)")
	cliOnly    = flag.Bool("cli-only", false, "with -harvest: only the CLI's rows (-only cli)")
	only       = flag.String("only", "", "comma-separated groups to measure (default all): create, exec, docker, runsc, concurrent, destroy, disk, cli, env")
	nEnv       = flag.Int("n-env", 8, "samples of harvest run from a prepared environment (env)")
)

// want reports whether group is to be measured (-only).
func want(group string) bool {
	if *cliOnly {
		return group == "cli"
	}
	return *only == "" || slices.Contains(strings.Split(*only, ","), group)
}

type row struct {
	what, how string
	samples   []time.Duration
	value     string // instead of samples
}

func pct(s []time.Duration, p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := append([]time.Duration(nil), s...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	i := int(p*float64(len(c))+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(c) {
		i = len(c) - 1
	}
	return c[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "sandbox-bench: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	flag.Parse()
	ctx := context.Background()
	runDir, err := os.MkdirTemp("", "harvest-bench-*")
	if err != nil {
		die("%v", err)
	}
	os.Chmod(runDir, 0o711)
	defer os.RemoveAll(runDir)
	var rows []row
	if *harvestBin != "" && want("cli") {
		rows = append(rows, cliRows(runDir)...)
	}
	if want("env") {
		rows = append(rows, envRows()...)
	}
	defer func() { printRows(rows) }()
	opts := backends.Options{RunDir: runDir, AgentBinary: *agentBin, DockerImage: *image, AllowUnsafeHost: true}
	open := func(name string) sandbox.Provider {
		p, err := backends.Open(name, opts)
		if err != nil {
			die("%v", err)
		}
		if err := p.Available(ctx); err != nil {
			die("%s: %v", name, err)
		}
		return p
	}
	if !want("create") && !want("exec") && !want("runsc") && !want("concurrent") && !want("destroy") && !want("disk") && !want("docker") {
		return
	}
	local, docker, host := open("local"), open("docker"), open("host")
	pooledOpts := opts
	pooledOpts.LocalPool = 4
	pooledOpts.RunDir = runDir + "/pooled"
	os.MkdirAll(pooledOpts.RunDir, 0o711)
	pooled, err := backends.Open("local", pooledOpts)
	if err != nil {
		die("%v", err)
	}
	defer pooled.(interface{ Close() error }).Close()

	if want("disk") {
		rows = append(rows, diskRows(ctx, pooled, runDir)...)
	}
	var destroyLocal, destroyDocker []time.Duration
	if want("create") || want("destroy") {
		fmt.Fprintln(os.Stderr, "create → first exit ...")
		rows = append(rows, row{what: "create → first exit", how: "harvest local, cold (no idle shims)", samples: createToExit(ctx, local, *n, &destroyLocal)})
		var ignore []time.Duration
		rows = append(rows, row{what: "create → first exit", how: "harvest local, 4 warm boxes (server mode)", samples: createToExit(ctx, pooled, *n, &ignore)})
		rows = append(rows, row{what: "create → first exit", how: "harvest docker", samples: createToExit(ctx, docker, *nSlow, &destroyDocker)})
		rows = append(rows, row{what: "create → first exit", how: "raw `docker run --rm --network none IMAGE true`", samples: timeCmd(*nSlow, "docker", "run", "--rm", "--network", "none", *image, "true")})
	}
	var rss int64
	if want("exec") {
		fmt.Fprintln(os.Stderr, "exec round trip ...")
		rows = append(rows, row{what: "exec round trip (`true`)", how: "harvest agent, local box", samples: roundTrips(ctx, local, *n*3, &rss)})
		rows = append(rows, row{what: "exec round trip (`true`)", how: "harvest agent, docker box", samples: roundTrips(ctx, docker, *n*3, nil)})
		rows = append(rows, row{what: "exec round trip (`true`)", how: "harvest agent, host backend", samples: roundTrips(ctx, host, *n*3, nil)})
		rows = append(rows, row{what: "exec round trip (`true`)", how: "`docker exec` into a running container", samples: dockerExec(*nSlow, "")})
		rows = append(rows, row{what: "exec round trip (`true`)", how: "a fresh `bwrap` per command (same namespaces)", samples: freshBwrap(*n)})
		rows = append(rows, row{what: "exec round trip (`true`)", how: "plain fork+exec on the host", samples: timeCmd(*n*3, "/bin/true")})
	}
	if want("docker") {
		rows = append(rows, dockerRows(ctx, opts, "")...)
		if *runsc {
			rows = append(rows, dockerRows(ctx, opts, "runsc")...)
		}
	}
	if *runsc && want("runsc") {
		rows = append(rows, runscRows(ctx, opts)...)
	}
	if want("concurrent") {
		fmt.Fprintln(os.Stderr, "concurrent creates ...")
		rows = append(rows, row{what: fmt.Sprintf("%d concurrent creates → first exit", *concurrent), how: "harvest local, cold", samples: concurrentCreates(ctx, local, *concurrent)})
		rows = append(rows, row{what: fmt.Sprintf("%d concurrent creates → first exit", *concurrent), how: "harvest local, 4 warm boxes", samples: concurrentCreates(ctx, pooled, *concurrent)})
	}
	if want("destroy") {
		rows = append(rows, row{what: "destroy", how: "harvest local", samples: destroyLocal})
		rows = append(rows, row{what: "destroy", how: "harvest docker", samples: destroyDocker})
	}
	if want("exec") {
		rows = append(rows, row{what: "agent resident memory", how: "harvest-agent in a local box, after 900 execs", value: fmt.Sprintf("%.1f MB", float64(rss)/1e6)})
		rows = append(rows, row{what: "agent resident memory", how: "harvest-agent in a fresh local box", value: fmt.Sprintf("%.1f MB", float64(freshRSS(ctx, local))/1e6)})
	}
}

// diskRows: a session's warm create, box and disk: a warm box started on a
// new 20 GiB disk (its workspace on it, its /tmp and HOME bound from it:
// Spec.DiskDir) and running `true`, the disk made on the spot (mkfs.ext4,
// loop mount: what every create did before disk pools) or taken from a
// pool of disks made ahead of demand (disk.Pool, as harvest serve keeps),
// side by side with a bare bwrap running `true`. The three are
// interleaved, one sample of each per round, so that they see the same
// load. Before each pooled sample the pool is let refill (untimed): a
// server's sessions do not arrive back to back; what a burst costs is the
// made-on-the-spot row.
func diskRows(ctx context.Context, p sandbox.Provider, runDir string) []row {
	fmt.Fprintln(os.Stderr, "warm create on a new disk ...")
	dir := filepath.Join(runDir, "disks")
	ownersDir := filepath.Join(runDir, "owners")
	inst, err := owner.NewInstance(ownersDir)
	if err != nil {
		die("%v", err)
	}
	defer inst.Release()
	pool, err := disk.NewPool(disk.PoolConfig{Dir: filepath.Join(dir, "pool"), Count: 2, Owner: inst.ID(), OwnersDir: ownersDir})
	if err != nil {
		die("%v", err)
	}
	defer pool.Close()
	defer disk.UnmountUnder(dir)
	var made, taken, plain, bwrap []time.Duration
	// onDisk times getting a disk with mk, then a box on it running true.
	onDisk := func(i int, mk func(disk.Disk) error) time.Duration {
		d := disk.Disk{Image: filepath.Join(dir, "s", strconv.Itoa(i)+".img"), Dir: filepath.Join(dir, "w", strconv.Itoa(i))}
		t0 := time.Now()
		if err := mk(d); err != nil {
			die("disk: %v", err)
		}
		sp := spec()
		sp.DiskDir = filepath.Join(d.Dir, ".box")
		if err := os.Mkdir(sp.DiskDir, 0o700); err != nil {
			die("%v", err)
		}
		ws := filepath.Join(d.Dir, "w")
		if err := os.Mkdir(ws, 0o755); err != nil {
			die("%v", err)
		}
		os.Chown(ws, sandbox.DefaultUID, sandbox.DefaultGID)
		sp.Workspaces = []sandbox.Workspace{{Name: "w", HostPath: ws}}
		sb, err := p.Start(ctx, sp)
		if err != nil {
			die("start on a disk: %v", err)
		}
		if st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}}); err != nil || !st.Success() {
			die("run on a disk: %v %v", st, err)
		}
		el := time.Since(t0)
		if err := sb.Destroy(ctx); err != nil {
			die("destroy: %v", err)
		}
		if err := d.Remove(); err != nil {
			die("removing a disk: %v", err)
		}
		return el
	}
	create := func(d disk.Disk) error { return disk.Create(ctx, d, disk.Size{}) }
	take := func(d disk.Disk) error {
		ok, err := pool.Take(ctx, d, disk.Size{})
		if err == nil && !ok {
			err = fmt.Errorf("no pool disk ready (%+v)", pool.Stats())
		}
		return err
	}
	refilled := func() { // untimed: no disk being made during a sample
		for pool.Stats().Ready < 2 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	nd := max(*n/3, 10)
	for i := 0; i < nd; i++ {
		refilled()
		made = append(made, onDisk(2*i, create))
		refilled()
		taken = append(taken, onDisk(2*i+1, take))
		refilled()
		plain = append(plain, createToExit(ctx, p, 1, new([]time.Duration))...)
		refilled()
		bwrap = append(bwrap, freshBwrap(1)...)
	}
	return []row{
		{what: "warm create on a new disk → first exit", how: "harvest local, 4 warm boxes, disk made on the spot (mkfs.ext4 + loop mount; before)", samples: made},
		{what: "warm create on a new disk → first exit", how: "harvest local, 4 warm boxes, disk from the disk pool (rename + mount move)", samples: taken},
		{what: "warm create on a new disk → first exit", how: "harvest local, 4 warm boxes, no disk (no workspace)", samples: plain},
		{what: "warm create on a new disk → first exit", how: "a bare `bwrap` (same namespaces) running `true`", samples: bwrap},
	}
}

// envRows: what a prepared environment adds to a start, from `harvest
// run`'s start to its first command in the box, for an environment that
// is only HOME (like a Go repository's) and one whose setup left a 70 MB,
// 10,800-file node_modules in the checkout: internal/cli's
// BenchmarkRunFromEnvironment (a real harvest serve, harvest prepare and
// harvest run), run here with go test from the repository's root.
func envRows() []row {
	fmt.Fprintln(os.Stderr, "harvest run from a prepared environment ...")
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "RunFromEnvironment", "-benchtime", strconv.Itoa(*nEnv)+"x", "./internal/cli/")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		die("go test -bench RunFromEnvironment: %v\n%s", err, out)
	}
	metric := func(name string) string {
		m := regexp.MustCompile(`([-0-9.e]+) ` + regexp.QuoteMeta(name)).FindSubmatch(out)
		if m == nil {
			die("no %s in the benchmark's output:\n%s", name, out)
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return fmt.Sprintf("%.3f s (p50 of %d)", v, *nEnv)
	}
	what := "`harvest run` start → first command, from a prepared environment"
	return []row{
		{what: what, how: "environment: HOME only (like a Go repository's)", value: metric("home-only-p50-s")},
		{what: what, how: "environment: HOME and a 70 MB, 10,800-file node_modules in the checkout", value: metric("node_modules-70MB-p50-s")},
		{what: what, how: "difference (node_modules − HOME only, per pair)", value: metric("difference-p50-s")},
	}
}

// cliRows times the harvest binary the way a user meets it: its start
// (--version: every `harvest session ...` call pays it) and a one-shot
// `harvest sandbox run -- true` (a cold box: no server keeps warm ones),
// side by side with fork+exec and a bare bwrap running the same command.
func cliRows(runDir string) []row {
	fmt.Fprintln(os.Stderr, "CLI start and one-shot sandbox run ...")
	env := append(os.Environ(), "HARVEST_RUN_DIR="+runDir+"/cli")
	os.MkdirAll(runDir+"/cli", 0o711)
	if *agentBin != "" {
		env = append(env, "HARVEST_AGENT_BINARY="+*agentBin)
	}
	run := func(n int, args ...string) []time.Duration {
		var out []time.Duration
		for i := 0; i < n; i++ {
			cmd := exec.Command(*harvestBin, args...)
			cmd.Env = env
			t0 := time.Now()
			if b, err := cmd.CombinedOutput(); err != nil {
				die("harvest %v: %v: %s", args, err, b)
			}
			out = append(out, time.Since(t0))
		}
		return out
	}
	run(3, "--version")
	return []row{
		{what: "CLI start", how: "`harvest --version`", samples: run(*n, "--version")},
		{what: "CLI start", how: "plain fork+exec of `/bin/true`", samples: timeCmd(*n, "/bin/true")},
		{what: "one-shot box running `true`", how: "`harvest sandbox run -- true` (cold local box)", samples: run(*n, "sandbox", "run", "--tty", "never", "--", "true")},
		{what: "one-shot box running `true`", how: "a bare `bwrap` (same namespaces) running `true`", samples: freshBwrap(*n)},
	}
}

// dockerRows: a docker box's create → first exit from a pool of 4 warm
// boxes (harvest serve keeps --pool of them), cold, a raw `docker run`,
// and a `docker exec` into a running container, interleaved one sample
// of each per round so that they see the same load. Before each warm
// sample the pool is let refill (untimed): a server's sessions do not
// arrive back to back; what a burst costs is the cold row. The boxes ask
// for the default limits, as sessions do (under gVisor the pool serves
// only those: runsc cannot change a running box's limits).
func dockerRows(ctx context.Context, opts backends.Options, runtime string) []row {
	opts.DockerRuntime = runtime
	cold, err := backends.Open("docker", opts)
	if err == nil {
		err = cold.Available(ctx)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "no docker rows (runtime %q): %v\n", runtime, err)
		return nil
	}
	defer cold.(interface{ Close() error }).Close()
	fmt.Fprintf(os.Stderr, "docker warm and cold creates (runtime %q) ...\n", cmp.Or(runtime, "runc"))
	opts.DockerPool = 4
	opts.RunDir += "/docker-pooled-" + cmp.Or(runtime, "runc")
	os.MkdirAll(opts.RunDir, 0o711)
	pooled, err := backends.Open("docker", opts)
	if err != nil {
		die("%v", err)
	}
	defer pooled.(interface{ Close() error }).Close()
	pl := pooled.(sandbox.Pooler)
	refilled := func() {
		deadline := time.Now().Add(2 * time.Minute)
		for pl.PoolStats().Ready < 4 {
			if time.Now().After(deadline) {
				die("the docker pool did not refill in 2 minutes: %+v", pl.PoolStats())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	def := sandbox.Spec{}
	createToExitSpec(ctx, pooled, 1, new([]time.Duration), def) // starts the pool
	rt := cmp.Or(runtime, "runc")
	b, err := exec.Command("docker", "run", "-d", "--rm", "--network", "none", "--runtime", rt, *image, "sleep", "infinity").Output()
	if err != nil {
		die("docker run: %v", err)
	}
	id := strings.TrimSpace(string(b))
	defer exec.Command("docker", "rm", "-f", id).Run()
	timeCmd(3, "docker", "exec", id, "true")
	var warm, coldS, run, execS, warmDestroy, coldDestroy []time.Duration
	for i := 0; i < *nSlow; i++ {
		refilled()
		hits := pl.PoolStats().Hits
		warm = append(warm, createToExitSpec(ctx, pooled, 1, &warmDestroy, def)...)
		if st := pl.PoolStats(); st.Hits != hits+1 {
			die("a warm sample did not come from the pool: %+v", st)
		}
		coldS = append(coldS, createToExitSpec(ctx, cold, 1, &coldDestroy, def)...)
		run = append(run, timeCmd(1, "docker", "run", "--rm", "--network", "none", "--runtime", rt, *image, "true")...)
		execS = append(execS, timeCmd(1, "docker", "exec", id, "true")...)
	}
	what := "docker create → first exit"
	if runtime != "" {
		what += " (gVisor)"
	}
	return []row{
		{what: what, how: "harvest docker, 4 warm boxes (server mode), pool refilled between samples", samples: warm},
		{what: what, how: "harvest docker, cold", samples: coldS},
		{what: what, how: fmt.Sprintf("raw `docker run --rm --runtime %s --network none IMAGE true`", rt), samples: run},
		{what: what, how: "raw `docker exec` of `true` into a running container", samples: execS},
		{what: "destroy", how: "harvest docker box made warm", samples: warmDestroy},
		{what: "destroy", how: "harvest docker box made cold", samples: coldDestroy},
	}
}

// runscRows: docker's create and exec rows again under gVisor, Harvest's
// and raw docker's side by side (none when dockerd has no runsc).
func runscRows(ctx context.Context, opts backends.Options) []row {
	opts.DockerRuntime = "runsc"
	p, err := backends.Open("docker", opts)
	if err == nil {
		err = p.Available(ctx)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "no gVisor rows: %v\n", err)
		return nil
	}
	fmt.Fprintln(os.Stderr, "gVisor (runsc) ...")
	var destroys []time.Duration
	return []row{
		{what: "create → first exit", how: "harvest docker --runtime runsc (gVisor)", samples: createToExit(ctx, p, *nSlow, &destroys)},
		{what: "create → first exit", how: "raw `docker run --rm --runtime runsc --network none IMAGE true`", samples: timeCmd(*nSlow, "docker", "run", "--rm", "--runtime", "runsc", "--network", "none", *image, "true")},
		{what: "exec round trip (`true`)", how: "harvest agent, docker box under gVisor", samples: roundTrips(ctx, p, *n*3, nil)},
		{what: "exec round trip (`true`)", how: "`docker exec` into a running gVisor container", samples: dockerExec(*nSlow, "runsc")},
		{what: "destroy", how: "harvest docker --runtime runsc", samples: destroys},
	}
}

func printRows(rows []row) {
	fmt.Printf("| measurement | how | p50 | p99 | samples |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		if r.value != "" {
			fmt.Printf("| %s | %s | %s | | |\n", r.what, r.how, r.value)
			continue
		}
		fmt.Printf("| %s | %s | %s | %s | %d |\n", r.what, r.how, ms(pct(r.samples, 0.5)), ms(pct(r.samples, 0.99)), len(r.samples))
	}
}

func spec() sandbox.Spec {
	return sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 1 << 30, Pids: 256}}
}

func createToExit(ctx context.Context, p sandbox.Provider, n int, destroys *[]time.Duration) []time.Duration {
	return createToExitSpec(ctx, p, n, destroys, spec())
}

func createToExitSpec(ctx context.Context, p sandbox.Provider, n int, destroys *[]time.Duration, s sandbox.Spec) []time.Duration {
	var out []time.Duration
	for i := 0; i < n; i++ {
		t0 := time.Now()
		sb, err := p.Start(ctx, s)
		if err != nil {
			die("%s start: %v", p.Name(), err)
		}
		if st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}}); err != nil || !st.Success() {
			die("%s run: %v %v", p.Name(), st, err)
		}
		out = append(out, time.Since(t0))
		t1 := time.Now()
		if err := sb.Destroy(ctx); err != nil {
			die("%s destroy: %v", p.Name(), err)
		}
		*destroys = append(*destroys, time.Since(t1))
	}
	return out
}

func roundTrips(ctx context.Context, p sandbox.Provider, n int, rss *int64) []time.Duration {
	sb, err := p.Start(ctx, spec())
	if err != nil {
		die("%s start: %v", p.Name(), err)
	}
	defer sb.Destroy(ctx)
	for i := 0; i < 20; i++ { // warm up
		sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}})
	}
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}}); err != nil || !st.Success() {
			die("%s run: %v %v", p.Name(), st, err)
		}
		out = append(out, time.Since(t0))
	}
	if rss != nil {
		info, err := sb.Info(ctx)
		if err != nil {
			die("info: %v", err)
		}
		*rss = info.RSSBytes
	}
	return out
}

func freshRSS(ctx context.Context, p sandbox.Provider) int64 {
	sb, err := p.Start(ctx, spec())
	if err != nil {
		die("start: %v", err)
	}
	defer sb.Destroy(ctx)
	info, err := sb.Info(ctx)
	if err != nil {
		die("info: %v", err)
	}
	return info.RSSBytes
}

func timeCmd(n int, name string, args ...string) []time.Duration {
	var out []time.Duration
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if b, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			die("%s: %v: %s", name, err, b)
		}
		out = append(out, time.Since(t0))
	}
	return out
}

func dockerExec(n int, runtime string) []time.Duration {
	b, err := exec.Command("docker", "run", "-d", "--rm", "--network", "none", "--runtime", cmp.Or(runtime, "runc"), *image, "sleep", "infinity").Output()
	if err != nil {
		die("docker run: %v", err)
	}
	id := strings.TrimSpace(string(b))
	defer exec.Command("docker", "rm", "-f", id).Run()
	timeCmd(3, "docker", "exec", id, "true")
	return timeCmd(n, "docker", "exec", id, "true")
}

// freshBwrap runs one bwrap per command with the namespace set a box uses, as
// the unprivileged box user.
func freshBwrap(n int) []time.Duration {
	args := []string{"--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
		"--as-pid-1", "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr"}
	for _, d := range []string{"bin", "sbin", "lib", "lib64"} {
		if t, err := os.Readlink("/" + d); err == nil {
			args = append(args, "--symlink", t, "/"+d)
		}
	}
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/usr/bin/true")
	var out []time.Duration
	for i := 0; i < n; i++ {
		cmd := exec.Command("bwrap", args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{}}}
		t0 := time.Now()
		if b, err := cmd.CombinedOutput(); err != nil {
			die("bwrap: %v: %s", err, b)
		}
		out = append(out, time.Since(t0))
	}
	return out
}

func concurrentCreates(ctx context.Context, p sandbox.Provider, n int) []time.Duration {
	var (
		mu    sync.Mutex
		out   []time.Duration
		boxes []*sandbox.Sandbox
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			t0 := time.Now()
			sb, err := p.Start(ctx, spec())
			if err != nil {
				die("concurrent start: %v", err)
			}
			if _, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}}); err != nil {
				die("concurrent run: %v", err)
			}
			d := time.Since(t0)
			mu.Lock()
			out = append(out, d)
			boxes = append(boxes, sb)
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	for _, sb := range boxes {
		sb.Destroy(ctx)
	}
	return out
}
