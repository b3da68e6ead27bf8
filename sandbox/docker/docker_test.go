package docker_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/docker"
)

// These tests run real containers on the real dockerd. Without one (or without
// the image) they skip, except where testreq.Docker is required (in CI, or
// named by HARVEST_REQUIRE or HARVEST_REQUIRE_BACKENDS), where they fail.

func testImage() string {
	return cmp.Or(os.Getenv("HARVEST_TEST_DOCKER_IMAGE"), docker.DefaultImage)
}

// newProvider is a provider for the test image ($HARVEST_TEST_DOCKER_IMAGE,
// else the default image).
func newProvider(t *testing.T) (*docker.Provider, docker.Config) {
	t.Helper()
	return newProviderFor(t, testImage())
}

func newProviderFor(t *testing.T, image string) (*docker.Provider, docker.Config) {
	t.Helper()
	cfg := docker.Config{Image: image, RunDir: testbin.TempDir(t), AgentBinary: testbin.Agent(t)}
	p := docker.New(cfg)
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := p.Available(ctx); err != nil {
		testreq.Unavailable(t, testreq.Docker, "the docker backend is unavailable: %v", err)
	}
	return p, cfg
}

// dockerClient is a plain client, to look at and break boxes from outside.
func dockerClient(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// start starts a box destroyed when the test ends.
func start(t *testing.T, ctx context.Context, p sandbox.Provider, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
	sb, err := p.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("destroying box %s: %v", sb.ID(), err)
		}
	})
	return sb
}

func withWorkspace(t *testing.T) (sandbox.Spec, string) {
	ws := testbin.Workspace(t, 1000, 1000)
	return sandbox.Spec{Workspaces: []sandbox.Workspace{{Name: "ws", HostPath: ws}}}, ws
}

// sh runs a shell script in the box and returns its stdout and stderr.
func sh(t *testing.T, ctx context.Context, sb *sandbox.Sandbox, script string) (string, sandbox.ExitStatus) {
	t.Helper()
	var out bytes.Buffer
	st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", script}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("running %q: %v", script, err)
	}
	return out.String(), st
}

type handleData struct {
	ContainerID string `json:"container_id"`
	RunDir      string `json:"run_dir"`
	InitPID     int    `json:"init_pid"`
}

func dataOf(t *testing.T, h sandbox.Handle) handleData {
	t.Helper()
	var d handleData
	if err := json.Unmarshal(h.Data, &d); err != nil {
		t.Fatal(err)
	}
	if d.ContainerID == "" || d.RunDir == "" || d.InitPID <= 0 {
		t.Fatalf("incomplete handle data %s", h.Data)
	}
	return d
}

func isGone(t *testing.T, ctx context.Context, cli *client.Client, containerID string) bool {
	t.Helper()
	_, err := cli.ContainerInspect(ctx, containerID, client.ContainerInspectOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	return err != nil
}

func removeFromOutside(t *testing.T, ctx context.Context, cli *client.Client, containerID string) {
	t.Helper()
	if _, err := cli.ContainerRemove(ctx, containerID, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	d := time.Millisecond
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(d):
		}
		d = min(2*d, 50*time.Millisecond)
	}
}

func TestStartRunDestroy(t *testing.T) {
	t.Parallel()
	p, cfg := newProvider(t)
	ctx := testCtx(t)
	cli := dockerClient(t)
	spec, ws := withWorkspace(t)
	spec.Labels = map[string]string{"team": "harvest"}
	spec.Limits = sandbox.Limits{MemoryBytes: 256 << 20, Pids: 100, CPUs: 0.5}
	sb := start(t, ctx, p, spec)

	if sb.Backend() != docker.Name || sb.AgentPID() != 1 || sb.Workdir() != "/workspace/ws" || sb.Unsafe() {
		t.Fatalf("backend %q, agent pid %d, workdir %q, unsafe %v", sb.Backend(), sb.AgentPID(), sb.Workdir(), sb.Unsafe())
	}
	out, st := sh(t, ctx, sb, `id -u; id -g; pwd; hostname; ls /sys/class/net
		cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max
		echo hi > /workspace/ws/f
		touch /etc/x 2>/dev/null && echo rootfs-writable
		touch "$HOME/h" /tmp/t && echo home-and-tmp-writable
		cp /bin/true /tmp/true && /tmp/true && echo tmp-exec`)
	want := []string{"1000", "1000", "/workspace/ws", sb.ID(), "lo", "132", "home-and-tmp-writable", "tmp-exec"}
	if got := strings.Fields(out); !st.Success() || !slices.Equal(got, want) {
		t.Fatalf("got %v %q, want %q", st, got, want)
	}
	fi, err := os.Stat(filepath.Join(ws, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != 1000 {
		t.Errorf("a file the box wrote in its workspace is owned by uid %d on the host, want 1000", uid)
	}

	h := sb.Handle()
	d := dataOf(t, h)
	if d.RunDir != filepath.Join(cfg.RunDir, sb.ID()) {
		t.Errorf("run dir %s, want it under %s", d.RunDir, cfg.RunDir)
	}
	res, err := cli.ContainerInspect(ctx, d.ContainerID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Container
	hc := c.HostConfig
	if c.Name != "/harvest-"+sb.ID() || c.State.Pid != d.InitPID ||
		hc.NetworkMode != "none" || !hc.ReadonlyRootfs || !slices.Contains(hc.CapDrop, "ALL") ||
		hc.Memory != 256<<20 || hc.MemorySwap != 256<<20 || hc.PidsLimit == nil || *hc.PidsLimit != 132 ||
		hc.NanoCPUs != 5e8 || hc.Init == nil || *hc.Init || hc.AutoRemove {
		t.Errorf("container %s: pid %d (handle %d), host config %+v", c.Name, c.State.Pid, d.InitPID, hc)
	}
	labels := c.Config.Labels
	if labels["team"] != "harvest" || labels[docker.LabelManaged] != "true" || labels[docker.LabelBox] != sb.ID() || labels[docker.LabelRunDir] != cfg.RunDir {
		t.Errorf("labels %v", labels)
	}

	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if !isGone(t, ctx, cli, d.ContainerID) {
		t.Error("the container is still there after Destroy")
	}
	if _, err := os.Lstat(d.RunDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run dir is still there after Destroy: %v", err)
	}
}

func TestDestroyIsIdempotent(t *testing.T) {
	t.Parallel()
	p, _ := newProvider(t)
	ctx := testCtx(t)
	cli := dockerClient(t)

	t.Run("twice", func(t *testing.T) {
		h := start(t, ctx, p, sandbox.Spec{}).Handle()
		for i := 0; i < 2; i++ {
			if err := p.Destroy(ctx, h); err != nil {
				t.Fatalf("destroy %d: %v", i+1, err)
			}
		}
		if !isGone(t, ctx, cli, dataOf(t, h).ContainerID) {
			t.Error("container still there")
		}
	})
	t.Run("after docker rm -f", func(t *testing.T) {
		h := start(t, ctx, p, sandbox.Spec{}).Handle()
		d := dataOf(t, h)
		removeFromOutside(t, ctx, cli, d.ContainerID)
		for i := 0; i < 2; i++ {
			if err := p.Destroy(ctx, h); err != nil {
				t.Fatalf("destroy %d: %v", i+1, err)
			}
		}
		if _, err := os.Lstat(d.RunDir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the run dir is still there after Destroy: %v", err)
		}
	})
	t.Run("never started", func(t *testing.T) {
		h := sandbox.Handle{ID: "box-neverstarted", Backend: docker.Name}
		if err := p.Destroy(ctx, h); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRecoverWithAFreshProvider(t *testing.T) {
	t.Parallel()
	p, cfg := newProvider(t)
	ctx := testCtx(t)
	spec, _ := withWorkspace(t)
	sb := start(t, ctx, p, spec)
	if err := sb.WriteFile(ctx, "/workspace/ws/note", []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	proc, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	h := sb.Handle()
	sb.Close()

	p2 := docker.New(cfg) // as after a restart of harvest
	defer p2.Close()
	sb2, err := p2.Recover(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	defer sb2.Close()
	if sb2.ID() != h.ID || sb2.AgentPID() != 1 {
		t.Fatalf("recovered %s with agent pid %d", sb2.ID(), sb2.AgentPID())
	}
	if out, st := sh(t, ctx, sb2, "cat /workspace/ws/note"); out != "kept" || !st.Success() {
		t.Fatalf("got %v %q", st, out)
	}
	procs, err := sb2.Ps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(procs, func(pi sandbox.ProcInfo) bool { return pi.Proc == proc.ID() && pi.Exit == nil }) {
		t.Errorf("the process started before the reconnect is not listed as running: %+v", procs)
	}
}

func TestRecoverOfAGoneBoxIsNotFound(t *testing.T) {
	t.Parallel()
	p, _ := newProvider(t)
	ctx := testCtx(t)
	cli := dockerClient(t)

	t.Run("removed", func(t *testing.T) {
		sb := start(t, ctx, p, sandbox.Spec{})
		removeFromOutside(t, ctx, cli, dataOf(t, sb.Handle()).ContainerID)
		if _, err := p.Recover(ctx, sb.Handle()); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound", err)
		}
	})
	t.Run("agent exited", func(t *testing.T) {
		// Right after the agent exits, dockerd may still report the
		// container running; Recover must not mistake that for a live box.
		sb := start(t, ctx, p, sandbox.Spec{})
		if err := sb.Shutdown(ctx, 0); err != nil && !errors.Is(err, sandbox.ErrClosed) {
			t.Fatal(err)
		}
		if _, err := p.Recover(ctx, sb.Handle()); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound", err)
		}
	})
	t.Run("stopped", func(t *testing.T) {
		sb := start(t, ctx, p, sandbox.Spec{})
		if err := sb.Stop(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Recover(ctx, sb.Handle()); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound", err)
		}
	})
}

func TestList(t *testing.T) {
	t.Parallel()
	p, cfg := newProvider(t)
	ctx := testCtx(t)
	spec, _ := withWorkspace(t)
	a := start(t, ctx, p, spec)
	b := start(t, ctx, p, sandbox.Spec{})

	byID := func(p *docker.Provider) map[string]sandbox.Handle {
		t.Helper()
		hs, err := p.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]sandbox.Handle{}
		for _, h := range hs {
			m[h.ID] = h
		}
		return m
	}
	got := byID(p)
	if len(got) != 2 {
		t.Fatalf("List: %d boxes, want 2: %v", len(got), got)
	}
	if h := got[a.ID()]; h.Backend != docker.Name || !h.Created.Equal(a.Handle().Created) || len(h.Spec.Workspaces) != 1 || dataOf(t, h) != dataOf(t, a.Handle()) {
		t.Errorf("listed handle %+v, want %+v", h, a.Handle())
	}

	// Without handle.json (say /run was wiped), the labels are enough.
	if err := os.Remove(filepath.Join(dataOf(t, b.Handle()).RunDir, "handle.json")); err != nil {
		t.Fatal(err)
	}
	hb, ok := byID(p)[b.ID()]
	if !ok {
		t.Fatal("a box without handle.json is not listed")
	}
	if !hb.Deadline.Equal(b.Handle().Deadline.Truncate(time.Second)) || !hb.Created.Equal(b.Handle().Created) {
		t.Errorf("rebuilt handle %+v, want created %v deadline %v", hb, b.Handle().Created, b.Handle().Deadline)
	}
	if err := p.Destroy(ctx, hb); err != nil {
		t.Fatal(err)
	}
	if _, ok := byID(p)[b.ID()]; ok {
		t.Error("a destroyed box is still listed")
	}

	// Another run dir is another Harvest: its List does not see our boxes.
	other := docker.New(docker.Config{RunDir: testbin.TempDir(t), AgentBinary: cfg.AgentBinary})
	defer other.Close()
	if got := byID(other); len(got) != 0 {
		t.Errorf("a provider with another run dir lists %v", got)
	}
}

func TestStop(t *testing.T) {
	t.Parallel()
	p, _ := newProvider(t)
	ctx := testCtx(t)
	cli := dockerClient(t)

	// startReady starts script in a new box and waits for it to print "ready".
	startReady := func(t *testing.T, script string) (*sandbox.Sandbox, string) {
		spec, ws := withWorkspace(t)
		sb := start(t, ctx, p, spec)
		pr, pw := io.Pipe()
		defer pr.Close()
		if _, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", script}, Stdout: pw}); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(pr).ReadString('\n')
		if line != "ready\n" {
			t.Fatalf("got %q, %v", line, err)
		}
		return sb, ws
	}
	running := func(sb *sandbox.Sandbox) bool {
		res, err := cli.ContainerInspect(ctx, dataOf(t, sb.Handle()).ContainerID, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return res.Container.State.Running
	}

	t.Run("graceful", func(t *testing.T) {
		sb, ws := startReady(t, `trap 'echo term > /workspace/ws/term; exit 0' TERM; echo ready; while :; do sleep 1; done`)
		t0 := time.Now()
		if err := p.Stop(ctx, sb.Handle(), 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); d > 20*time.Second {
			t.Errorf("Stop took %v: it should end as soon as the box's processes exit", d)
		}
		if b, err := os.ReadFile(filepath.Join(ws, "term")); string(b) != "term\n" {
			t.Errorf("the process did not get SIGTERM: %q %v", b, err)
		}
		if running(sb) {
			t.Error("the box still runs after Stop")
		}
		if err := p.Stop(ctx, sb.Handle(), time.Second); err != nil {
			t.Errorf("Stop of a stopped box: %v", err)
		}
	})
	t.Run("grace then kill", func(t *testing.T) {
		sb, _ := startReady(t, `trap '' TERM; echo ready; while :; do sleep 1; done`)
		t0 := time.Now()
		if err := p.Stop(ctx, sb.Handle(), time.Second); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); d < time.Second {
			t.Errorf("Stop returned after %v, before the 1s grace", d)
		}
		if running(sb) {
			t.Error("the box still runs after Stop")
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.Stop(ctx, sb.Handle(), time.Second); err != nil {
			t.Errorf("Stop of a destroyed box: %v", err)
		}
	})
}

func TestDockerdUnreachable(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	runDir := filepath.Join(testbin.TempDir(t), "run")
	p := docker.New(docker.Config{Host: "unix:///nonexistent/docker.sock", RunDir: runDir, AgentBinary: testbin.Agent(t)})
	defer p.Close()

	check := func(what string, err error) {
		t.Helper()
		var ue *sandbox.UnavailableError
		if !errors.As(err, &ue) || ue.Backend != docker.Name {
			t.Fatalf("%s: got %v, want an *UnavailableError", what, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, "unix:///nonexistent/docker.sock") || !strings.Contains(msg, "`dockerd &`") {
			t.Errorf("%s: %q does not say which dockerd and how to start it", what, msg)
		}
		t.Logf("%s: %v", what, err)
	}
	check("Available", p.Available(ctx))
	_, err := p.Start(ctx, sandbox.Spec{})
	check("Start", err)
	if _, err := os.Stat(runDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Start left %s behind: %v", runDir, err)
	}
	if _, err := p.List(ctx); err == nil {
		t.Error("List succeeded without dockerd")
	}

	// A dynamically linked agent cannot run in an arbitrary image.
	dyn := docker.New(docker.Config{AgentBinary: "/bin/true"})
	defer dyn.Close()
	var ue *sandbox.UnavailableError
	if err := dyn.Available(ctx); !errors.As(err, &ue) || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("dynamic agent binary: got %v", err)
	}
}

func TestMissingImage(t *testing.T) {
	t.Parallel()
	p, cfg := newProvider(t)
	ctx := testCtx(t)
	const missing = "harvest-test/no-such-image:latest"

	bad := docker.New(docker.Config{Image: missing, RunDir: cfg.RunDir, AgentBinary: cfg.AgentBinary})
	defer bad.Close()
	for what, err := range map[string]error{
		"Available": bad.Available(ctx),
		"Start":     func() error { _, err := p.Start(ctx, sandbox.Spec{Image: missing}); return err }(),
	} {
		var ue *sandbox.UnavailableError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "scripts/build-base-image") {
			t.Errorf("%s: got %v, want an *UnavailableError naming the image and how to build it", what, err)
		}
	}
	entries, err := os.ReadDir(cfg.RunDir)
	entries = slices.DeleteFunc(entries, isOwnersDir)
	if err != nil || len(entries) != 0 {
		t.Errorf("Start left %v behind in the run dir (%v)", entries, err)
	}
	if hs, err := p.List(ctx); err != nil || len(hs) != 0 {
		t.Errorf("Start left containers behind: %v %v", hs, err)
	}
}

// TestPeerCheck: the box user owns /.harvest/run, so a box can replace its
// agent's socket. Harvest must refuse to talk to anything but the box's PID 1.
func TestPeerCheck(t *testing.T) {
	t.Parallel()
	p, _ := newProvider(t)
	ctx := testCtx(t)
	victim := start(t, ctx, p, sandbox.Spec{})
	victimSock := filepath.Join(dataOf(t, victim.Handle()).RunDir, "run", "agent.sock")

	t.Run("symlink to another box's socket", func(t *testing.T) {
		evil := start(t, ctx, p, sandbox.Spec{})
		if out, st := sh(t, ctx, evil, "rm /.harvest/run/agent.sock && ln -s "+victimSock+" /.harvest/run/agent.sock"); !st.Success() {
			t.Fatalf("%v %s", st, out)
		}
		_, err := p.Recover(ctx, evil.Handle())
		if err == nil || !strings.Contains(err.Error(), "refusing") || errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("Recover through a symlink to another box's socket: got %v, want a refusal", err)
		}
		t.Log(err)
	})
	t.Run("impostor agent", func(t *testing.T) {
		evil := start(t, ctx, p, sandbox.Spec{})
		sock := filepath.Join(dataOf(t, evil.Handle()).RunDir, "run", "agent.sock")
		before, err := os.Lstat(sock)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := evil.Start(ctx, &sandbox.Cmd{Args: []string{"/.harvest/bin/harvest-agent", "sandbox-agent",
			"--listen", "/.harvest/run/agent.sock", "--id", evil.ID()}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "the impostor's socket", func() bool {
			fi, err := os.Lstat(sock)
			if err != nil || os.SameFile(fi, before) {
				return false
			}
			// Bound is not listening: answered only once it accepts.
			c, err := net.Dial("unix", sock)
			if err != nil {
				return false
			}
			c.Close()
			return true
		})
		_, err = p.Recover(ctx, evil.Handle())
		if err == nil || !strings.Contains(err.Error(), "refusing") {
			t.Fatalf("Recover of a box whose socket is served by another process: got %v, want a refusal", err)
		}
		t.Log(err)
	})

	sb, err := p.Recover(ctx, victim.Handle())
	if err != nil {
		t.Fatalf("the victim box no longer recovers: %v", err)
	}
	sb.Close()
}

func TestMemoryLimitOOMKillsTheCommand(t *testing.T) {
	t.Parallel()
	p, _ := newProvider(t)
	ctx := testCtx(t)
	cli := dockerClient(t)
	sb := start(t, ctx, p, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 64 << 20}})

	var buf bytes.Buffer
	st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", `x=$(head -c 200000000 /dev/zero | tr '\0' x); echo ${#x}`}, Stdout: &buf, Stderr: &buf})
	if err != nil {
		// Say what happened to the box (the agent killed? its log?), for a
		// failure seen once in many runs.
		id := dataOf(t, sb.Handle()).ContainerID
		state, _ := exec.Command("docker", "inspect", "--format", "{{json .State}}", id).CombinedOutput()
		logs, _ := exec.Command("docker", "logs", "--tail", "40", id).CombinedOutput()
		t.Fatalf("the OOM command: %v\ncontainer state: %s\ncontainer log:\n%s", err, state, logs)
	}
	out := buf.String()
	if !st.OOMKilled || st.Signal != syscall.SIGKILL {
		t.Fatalf("got %v (output %q), want OOM-killed", st, out)
	}
	t.Log(st)
	if out, st := sh(t, ctx, sb, "echo still here"); out != "still here\n" || !st.Success() {
		t.Fatalf("the box is not usable after the OOM kill: %v %q", st, out)
	}
	res, err := cli.ContainerInspect(ctx, dataOf(t, sb.Handle()).ContainerID, client.ContainerInspectOptions{})
	if err != nil || !res.Container.State.Running {
		t.Fatalf("the container does not run after the OOM kill: %v", err)
	}
}

// TestMinimalImage: an image with nothing in it (the agent is static and
// bind-mounted) runs boxes with workspaces; without a workspace, the missing
// /workspace is a clear error and nothing is left behind.
func TestMinimalImage(t *testing.T) {
	t.Parallel()
	p, cfg := newProvider(t)
	ctx := testCtx(t)
	cli := dockerClient(t)

	var empty bytes.Buffer
	if err := tar.NewWriter(&empty).Close(); err != nil {
		t.Fatal(err)
	}
	image := "harvest-test/empty:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	rc, err := cli.ImageImport(ctx, client.ImageImportSource{Source: &empty, SourceName: "-"}, image, client.ImageImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, rc)
	rc.Close()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = cli.ImageRemove(ctx, image, client.ImageRemoveOptions{Force: true})
	})

	spec, _ := withWorkspace(t)
	spec.Image = image
	sb := start(t, ctx, p, spec)
	if err := sb.WriteFile(ctx, "/workspace/ws/f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"/.harvest/bin/harvest-agent", "no-such-subcommand"}})
	if err != nil || st.Code == 0 {
		t.Fatalf("running the only binary in the image: %v %v", st, err)
	}

	_, err = p.Start(ctx, sandbox.Spec{Image: image})
	if err == nil || !strings.Contains(err.Error(), "must provide /workspace") {
		t.Fatalf("got %v, want an error saying the image needs /workspace", err)
	}
	t.Log(err)
	if entries, _ := os.ReadDir(cfg.RunDir); len(slices.DeleteFunc(entries, isOwnersDir)) != 1 {
		t.Errorf("the failed Start left something in the run dir: %v", entries)
	}
	if hs, err := p.List(ctx); err != nil || len(hs) != 1 {
		t.Errorf("the failed Start left a container: %v %v", hs, err)
	}
}
