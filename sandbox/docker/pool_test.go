package docker_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/docker"
	"github.com/harvest-dev/harvest/sandbox/owner"

	"github.com/harvest-dev/harvest/internal/mountinfo"
)

// newPooled is a provider keeping size warm boxes for a server's shared
// owner, closed when the test ends; its pool starts with a first box.
func newPooled(t *testing.T, size int) (*docker.Provider, docker.Config, *owner.Hold) {
	t.Helper()
	_, cfg := newProvider(t) // skips without dockerd
	srv, err := owner.Share(testCtx(t), owner.DirFor(cfg.RunDir, docker.Name), "serve-00000000000000aa", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Release() })
	cfg.Owner, cfg.PoolSize = srv.ID(), size
	p := docker.New(cfg)
	t.Cleanup(func() { p.Close() })
	return p, cfg, srv
}

// warmReady starts a first (cold) box to start the pool and waits until
// it has n boxes ready.
func warmReady(t *testing.T, ctx context.Context, p *docker.Provider, n int) {
	t.Helper()
	sb, err := p.Start(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "warm boxes", func() bool { return p.PoolStats().Ready >= n })
}

// mountsUnderT lists this process's mount points at or below dir.
func mountsUnderT(t *testing.T, dir string) []string {
	t.Helper()
	ms, err := mountinfo.Under(dir)
	if err != nil {
		t.Fatal(err)
	}
	var pts []string
	for _, m := range ms {
		pts = append(pts, m.Point)
	}
	return pts
}

// poolContainers lists the containers made warm for the run dir, and its
// image probes.
func poolContainers(t *testing.T, ctx context.Context, cli *client.Client, runDir string) []string {
	t.Helper()
	f := make(client.Filters).Add("label", docker.LabelPool, docker.LabelRunDir+"="+runDir)
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range res.Items {
		out = append(out, c.Names...)
	}
	return out
}

// TestPoolClaim: a box taken from the pool is the box asked for: its
// workspace (writable, the host's) in an otherwise read-only /workspace,
// /tmp and HOME fresh, the requested limits, the environment a cold box
// gets, its name and owner; Destroy leaves no container, mount or slot.
func TestPoolClaim(t *testing.T) {
	p, cfg, srv := newPooled(t, 1)
	ctx := testCtx(t)
	warmReady(t, ctx, p, 1)
	spec, ws := withWorkspace(t)
	spec.Env = map[string]string{"HARVEST_POOL_TEST": "warm value"}
	spec.Limits = sandbox.Limits{MemoryBytes: 300 << 20, Pids: 77, CPUs: 0.5}
	before := p.PoolStats()
	sb := start(t, ctx, p, spec)
	if st := p.PoolStats(); st.Hits != before.Hits+1 {
		t.Fatalf("the box did not come from the pool: %+v then %+v", before, st)
	}
	d := dataOf(t, sb.Handle())
	out, st := sh(t, ctx, sb, `set -e
echo hi > /workspace/ws/from-box
echo t > /tmp/t; echo h > $HOME/h
stat -c '%U %a' $HOME
touch /workspace/nope 2>&1 || true
echo $HARVEST_POOL_TEST; echo $HOSTNAME
cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max`)
	if !st.Success() {
		t.Fatalf("box script: %v: %s", st, out)
	}
	for _, want := range []string{"user 700", "Read-only file system", "warm value", strings.ReplaceAll(sb.ID(), "_", "-"), fmt.Sprint(77 + sandbox.AgentPidsReserve)} {
		if !strings.Contains(out, want) {
			t.Errorf("box script output lacks %q:\n%s", want, out)
		}
	}
	if b, err := os.ReadFile(filepath.Join(ws, "from-box")); err != nil || string(b) != "hi\n" {
		t.Errorf("the box's write to its workspace: %q %v", b, err)
	}
	cli := dockerClient(t)
	c, err := cli.ContainerInspect(ctx, d.ContainerID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hc := c.Container.HostConfig; c.Container.Name != "/harvest-"+sb.ID() || hc.Memory != 300<<20 || hc.MemorySwap != 300<<20 || hc.NanoCPUs != 5e8 {
		t.Errorf("container %s: memory %d, swap %d, nanocpus %d", c.Container.Name, hc.Memory, hc.MemorySwap, hc.NanoCPUs)
	}
	lister := docker.New(cfg)
	t.Cleanup(func() { lister.Close() })
	bs, err := lister.ListOwned(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, b := range bs {
		if b.Handle.ID == sb.ID() {
			found = true
			if b.Owner != srv.ID() || b.Warm {
				t.Errorf("listed %s owned by %q (warm %v), want %q", b.Handle.ID, b.Owner, b.Warm, srv.ID())
			}
		}
	}
	if !found {
		t.Errorf("the claimed box is not listed: %+v", bs)
	}

	// The same spec cold: the same environment but for what names the box.
	cold, _ := newProvider(t)
	spec2 := spec
	spec2.ID = ""
	cb := start(t, ctx, cold, spec2)
	envOf := func(sb *sandbox.Sandbox) []string {
		out, _ := sh(t, ctx, sb, "env")
		var kv []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasPrefix(l, "HOSTNAME=") && !strings.HasPrefix(l, "HARVEST_AGENT_PROC=") {
				kv = append(kv, l)
			}
		}
		slices.Sort(kv)
		return kv
	}
	if w, c := envOf(sb), envOf(cb); !slices.Equal(w, c) {
		t.Errorf("environment of a warm box:\n%q\nof a cold one:\n%q", w, c)
	}

	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if !isGone(t, ctx, cli, d.ContainerID) {
		t.Error("the container outlived Destroy")
	}
	slot := filepath.Join(cfg.RunDir, ".slots")
	waitFor(t, ctx, "only the next warm box's slot", func() bool { return len(mountsUnderT(t, slot)) <= 2 })
	if _, err := os.Stat(d.RunDir); !os.IsNotExist(err) {
		t.Errorf("run dir %s: %v", d.RunDir, err)
	}
}

// TestPoolBoxesAreUsedOnce: nothing of one box is in the next one taken
// from the pool.
func TestPoolBoxesAreUsedOnce(t *testing.T) {
	p, _, _ := newPooled(t, 1)
	ctx := testCtx(t)
	warmReady(t, ctx, p, 1)
	a := start(t, ctx, p, sandbox.Spec{})
	if out, st := sh(t, ctx, a, "echo a > /tmp/mark; echo a > $HOME/mark; sleep 1000 & echo started"); !st.Success() {
		t.Fatalf("%v: %s", st, out)
	}
	waitFor(t, ctx, "a second warm box", func() bool { return p.PoolStats().Ready >= 1 })
	b := start(t, ctx, p, sandbox.Spec{})
	if st := p.PoolStats(); st.Hits < 2 {
		t.Fatalf("both boxes should come from the pool: %+v", st)
	}
	if dataOf(t, a.Handle()).ContainerID == dataOf(t, b.Handle()).ContainerID {
		t.Fatal("two boxes in one container")
	}
	out, _ := sh(t, ctx, b, "ls -A /tmp $HOME; ps -e -o comm=")
	if strings.Contains(out, "mark") || strings.Contains(out, "sleep") {
		t.Errorf("the second box sees the first's files or processes:\n%s", out)
	}
}

// TestPoolDiesWithItsServer: warm boxes never outlive their provider: a
// Close destroys them; after a kill -9, harvest sandbox prune (owner.Prune)
// does, and so does the next provider's pool; neither touches a box
// claimed from the dead one's pool.
func TestPoolDiesWithItsServer(t *testing.T) {
	_, cfg := newProvider(t)
	ctx := testCtx(t)
	cli := dockerClient(t)

	cfg.PoolSize = 2
	p := docker.New(cfg)
	warmReady(t, ctx, p, 2)
	p.Close()
	if left := poolContainers(t, ctx, cli, cfg.RunDir); len(left) > 0 {
		t.Fatalf("Close left warm containers: %v", left)
	}
	if m := mountsUnderT(t, cfg.RunDir); len(m) > 0 {
		t.Fatalf("Close left mounts: %v", m)
	}

	for _, reaper := range []string{"prune", "next pool"} {
		t.Run(reaper, func(t *testing.T) {
			claimed := killedServer(t, ctx, cfg)
			var dead []string
			for _, name := range poolContainers(t, ctx, cli, cfg.RunDir) {
				if name != "/harvest-"+claimed {
					dead = append(dead, name)
				}
			}
			if len(dead) != 2 {
				t.Fatalf("the killed server's warm boxes: %v", dead)
			}
			switch reaper {
			case "prune":
				l := docker.New(cfg)
				defer l.Close()
				rs, err := owner.Prune(ctx, owner.DirFor(cfg.RunDir, docker.Name), []owner.Lister{l}, false)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("prune: %s", owner.Summary(rs))
			case "next pool":
				next := cfg
				next.PoolSize = 1
				n := docker.New(next)
				defer n.Close()
				sb, err := n.Start(ctx, sandbox.Spec{})
				if err != nil {
					t.Fatal(err)
				}
				defer sb.Destroy(ctx)
			}
			waitFor(t, ctx, "the dead server's warm boxes gone", func() bool {
				for _, name := range poolContainers(t, ctx, cli, cfg.RunDir) {
					if slices.Contains(dead, name) {
						return false
					}
				}
				return true
			})
			// The box claimed from the dead pool is kept: its owner runs.
			c, err := cli.ContainerInspect(ctx, "harvest-"+claimed, client.ContainerInspectOptions{})
			if err != nil || !c.Container.State.Running {
				t.Fatalf("the claimed box %s: %v", claimed, err)
			}
			l := docker.New(cfg)
			defer l.Close()
			bs, _ := l.ListOwned(ctx)
			for _, b := range bs {
				if b.Handle.ID == claimed {
					if err := l.Destroy(ctx, b.Handle); err != nil {
						t.Fatal(err)
					}
				}
			}
			if n := poolContainers(t, ctx, cli, cfg.RunDir); reaper == "prune" && len(n) > 0 {
				t.Errorf("left: %v", n)
			}
		})
	}
	// The next pool was closed right after it started: what it was
	// making then (a warm box, its image probe) went too.
	if left := poolContainers(t, ctx, cli, cfg.RunDir); len(left) > 0 {
		t.Errorf("containers left on the run dir: %v", left)
	}
	if m := mountsUnderT(t, cfg.RunDir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
}

// killedServer runs a server's provider in a child process (this test
// binary, TestPoolHelperProcess), which claims one box for a shared owner
// this test holds and keeps two warm, then kills it with SIGKILL. It
// returns the claimed box's id.
func killedServer(t *testing.T, ctx context.Context, cfg docker.Config) string {
	t.Helper()
	srv, err := owner.Share(ctx, owner.DirFor(cfg.RunDir, docker.Name), "serve-00000000000000cc", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Release() })
	cmd := exec.Command(os.Args[0], "-test.run", "^TestPoolHelperProcess$")
	cmd.Env = append(os.Environ(), "HARVEST_POOL_HELPER="+cfg.RunDir, "HARVEST_POOL_HELPER_AGENT="+cfg.AgentBinary, "HARVEST_POOL_HELPER_IMAGE="+cfg.Image, "HARVEST_POOL_HELPER_OWNER="+srv.ID())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "claimed "); ok {
			cmd.Process.Signal(syscall.SIGKILL)
			return id
		}
	}
	t.Fatalf("the helper ended without a box: %v", sc.Err())
	return ""
}

// TestPoolHelperProcess is killedServer's child.
func TestPoolHelperProcess(t *testing.T) {
	runDir := os.Getenv("HARVEST_POOL_HELPER")
	if runDir == "" {
		t.Skip("the child of TestPoolDiesWithItsServer")
	}
	p := docker.New(docker.Config{RunDir: runDir, AgentBinary: os.Getenv("HARVEST_POOL_HELPER_AGENT"), Image: os.Getenv("HARVEST_POOL_HELPER_IMAGE"),
		Owner: os.Getenv("HARVEST_POOL_HELPER_OWNER"), PoolSize: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	warmReady(t, ctx, p, 2)
	sb, err := p.Start(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "a full pool", func() bool { return p.PoolStats().Ready >= 2 })
	fmt.Println("claimed " + sb.ID())
	<-ctx.Done() // killed
}

// TestPoolServesWhatItCan: a spec a warm box cannot become (read-only
// mounts: their box paths are anywhere) starts cold; an image with files
// in /workspace, which a warm box's slot would hide, gets no pool at all,
// and says why.
func TestPoolServesWhatItCan(t *testing.T) {
	_, cfg := newProvider(t)
	ctx := testCtx(t)
	cli := dockerClient(t)

	p, _, _ := newPooled(t, 1)
	warmReady(t, ctx, p, 1)
	before := p.PoolStats()
	ro := t.TempDir()
	os.WriteFile(filepath.Join(ro, "f"), []byte("ro"), 0o644)
	sb := start(t, ctx, p, sandbox.Spec{Mounts: []sandbox.Mount{{HostPath: ro, BoxPath: "/opt/ro"}}})
	if out, _ := sh(t, ctx, sb, "cat /opt/ro/f"); out != "ro" {
		t.Errorf("the read-only mount: %q", out)
	}
	if st := p.PoolStats(); st.Hits != before.Hits || st.Ready != 1 {
		t.Errorf("a box with read-only mounts came from the pool: %+v then %+v", before, st)
	}

	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for _, h := range []*tar.Header{{Name: "workspace/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "workspace/README", Mode: 0o644, Size: 5}} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	tw.Write([]byte("image"))
	tw.Close()
	image := "harvest-test/workspace-files:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	rc, err := cli.ImageImport(ctx, client.ImageImportSource{Source: &layer, SourceName: "-"}, image, client.ImageImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, rc)
	rc.Close()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = cli.ImageRemove(ctx, image, client.ImageRemoveOptions{Force: true})
	})
	var logs syncBuffer
	cfg.Image, cfg.PoolSize = image, 2
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	q := docker.New(cfg)
	t.Cleanup(func() { q.Close() })
	spec, _ := withWorkspace(t)
	for range 2 {
		sb := start(t, ctx, q, spec)
		if b, err := sb.ReadFile(ctx, "/workspace/README"); err != nil || string(b) != "image" {
			t.Errorf("the image's /workspace/README: %q %v", b, err)
		}
	}
	if st := q.PoolStats(); st.Hits != 0 || st.Ready != 0 {
		t.Errorf("a pool for an image with files in /workspace: %+v", st)
	}
	if !strings.Contains(logs.String(), "has files in /workspace") {
		t.Errorf("no warning says why there is no pool: %s", logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPoolUnderGVisor: runsc cannot change a running container's limits
// (dockerd's `docker update` fails), so under gVisor a box asking for the
// default limits comes from the pool, with them, and one asking for
// others starts cold with its own: never a warm box with the wrong ones.
// Its /tmp and HOME work (dockerd's tmpfs there, not the slot's).
func TestPoolUnderGVisor(t *testing.T) {
	_, cfg := newProvider(t)
	ctx := testCtx(t)
	cfg.Runtime = "runsc"
	probe := docker.New(cfg)
	err := probe.Available(ctx)
	probe.Close()
	if err != nil {
		testreq.Unavailable(t, testreq.DockerRunsc, "docker with runsc: %v", err)
	}
	srv, err := owner.Share(ctx, owner.DirFor(cfg.RunDir, docker.Name), "serve-00000000000000dd", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Release() })
	cfg.Owner, cfg.PoolSize = srv.ID(), 1
	p := docker.New(cfg)
	t.Cleanup(func() { p.Close() })
	warmReady(t, ctx, p, 1)
	cli := dockerClient(t)
	memory := func(sb *sandbox.Sandbox) int64 {
		c, err := cli.ContainerInspect(ctx, dataOf(t, sb.Handle()).ContainerID, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c.Container.HostConfig.Memory
	}

	before := p.PoolStats()
	def := start(t, ctx, p, sandbox.Spec{})
	if st := p.PoolStats(); st.Hits != before.Hits+1 || st.Misses != before.Misses {
		t.Errorf("a box with the default limits did not come from the pool: %+v then %+v", before, st)
	}
	if m := memory(def); m != sandbox.DefaultMemory {
		t.Errorf("the warm box's memory limit: %d, want %d", m, int64(sandbox.DefaultMemory))
	}
	// /tmp and HOME are the box user's to write (gVisor does not see a
	// mount on the root of a bind made after the start: not the slot's).
	if out, st := sh(t, ctx, def, "echo t > /tmp/t && echo h > $HOME/h && cat /tmp/t $HOME/h"); !st.Success() || out != "t\nh\n" {
		t.Errorf("writing /tmp and HOME in a warm gVisor box: %v: %q", st, out)
	}
	waitFor(t, ctx, "a warm box", func() bool { return p.PoolStats().Ready >= 1 })
	before = p.PoolStats()
	other := start(t, ctx, p, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 300 << 20}})
	if st := p.PoolStats(); st.Hits != before.Hits || st.Ready != 1 {
		t.Errorf("a box with other limits came from the pool: %+v then %+v", before, st)
	}
	if m := memory(other); m != 300<<20 {
		t.Errorf("the cold box's memory limit: %d, want %d", m, 300<<20)
	}
}
