package local_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local"
	"github.com/harvest-dev/harvest/sandbox/local/cgroups"
	"github.com/harvest-dev/harvest/sandbox/owner"
)

// warmHolderEnv names the run dir of a warmHolder process.
const warmHolderEnv = "LOCAL_TEST_WARM"

// warmHolder keeps one warm box on runDir, prints its name once its shim
// runs, and waits for stdin to end (or to be killed).
func warmHolder(runDir string) int {
	p := local.New(local.Config{RunDir: runDir, PoolSize: 1})
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mgr, err := cgroups.Detect(p.CgroupParent())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for ctx.Err() == nil {
		bs, err := p.ListOwned(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for _, b := range bs {
			if !b.Warm || b.Owner != p.Instance() {
				continue // another provider's
			}
			// Prepared: its shim, bwrap and agent run, the socket is made.
			_, serr := os.Stat(filepath.Join(runDir, b.Handle.ID, "agent.sock"))
			if pids, _ := mgr.Open(b.Handle.ID).Procs(); serr == nil && len(pids) >= 3 {
				fmt.Println(b.Handle.ID, b.Owner)
				bufio.NewReader(os.Stdin).ReadString('\n')
				return 0
			}
		}
		time.Sleep(10 * time.Millisecond) // a poll in a helper process, not in a test
	}
	fmt.Fprintln(os.Stderr, "no warm box within a minute")
	return 1
}

// startWarmHolder runs a warmHolder on runDir: its pid, its warm box and
// the instance that owns it.
func startWarmHolder(t *testing.T, runDir string) (cmd *exec.Cmd, box, inst string) {
	t.Helper()
	cmd = exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), warmHolderEnv+"="+runDir, sandbox.EnvAgentBinary+"="+testbin.Agent(t))
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 2 {
		t.Fatalf("the warm holder: %q %v", line, err)
	}
	return cmd, f[0], f[1]
}

func warmOf(t *testing.T, p *local.Provider) map[string]string {
	t.Helper()
	bs, err := p.ListOwned(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, b := range bs {
		if b.Warm {
			out[b.Handle.ID] = b.Owner
		}
	}
	return out
}

// TestWarmBoxesOfADeadHarvest: warm boxes are named for their provider's
// instance, not its pid. A Harvest killed with SIGKILL loses its warm
// boxes with it (their shims see their stdin end); what a dead Harvest's
// warm boxes leave when their shims were killed too (a container stopped:
// cgroups and run dirs) is removed by the next provider on the run dir,
// which never touches the warm boxes of a provider that runs (here, one in
// this very process, whose pid is the next provider's too).
func TestWarmBoxesOfADeadHarvest(t *testing.T) {
	runDir := testbin.TempDir(t)
	live := local.New(local.Config{RunDir: runDir, AgentBinary: testbin.Agent(t), PoolSize: 1})
	testreq.Check(t, testreq.Local, live.Available(context.Background()))
	defer live.Close()
	mgr, err := cgroups.Detect(live.CgroupParent())
	if err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, time.Minute, "a warm box of the provider in this process", func() bool { return len(warmOf(t, live)) == 1 })
	var liveBox, liveInst string
	for id, own := range warmOf(t, live) {
		liveBox, liveInst = id, own
	}
	if !strings.HasPrefix(liveBox, "pool-"+liveInst+"-") || strings.Contains(liveBox, fmt.Sprint(os.Getpid())) {
		t.Fatalf("warm box %s of instance %s: want it named pool-INSTANCE-N, not by pid", liveBox, liveInst)
	}

	// 1. kill -9: the shim sees EOF and ends its warm box.
	h1, box1, _ := startWarmHolder(t, runDir)
	h1.Process.Kill()
	h1.Wait()
	testbin.WaitFor(t, 30*time.Second, "the warm box of a Harvest killed with SIGKILL to end", func() bool {
		_, err := os.Stat(filepath.Join(runDir, box1))
		return os.IsNotExist(err) && mgr.Open(box1).Empty()
	})

	// 2. The shim killed too: its cgroup and run dir are left ...
	// The holder is stopped first: a running holder sees its warm box
	// die and cleans up after it, which is not the case under test.
	h2, box2, inst2 := startWarmHolder(t, runDir)
	if err := h2.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := mgr.Open(box2).Kill(ctx); err != nil {
		t.Fatal(err)
	}
	h2.Process.Kill()
	h2.Wait()
	if _, err := os.Stat(filepath.Join(runDir, box2)); err != nil {
		t.Fatalf("the dead warm box's run dir is already gone (%v): nothing to test", err)
	}
	// ... and the next provider removes them, and nothing of the live one.
	next := local.New(local.Config{RunDir: runDir, AgentBinary: testbin.Agent(t)})
	defer next.Close()
	if _, err := next.List(ctx); err != nil { // its first use
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(runDir, box2)); !os.IsNotExist(err) {
		t.Errorf("the dead instance %s's warm box %s: run dir %v, want removed", inst2, box2, err)
	}
	if ids, _ := mgr.List(); strings.Contains(strings.Join(ids, " "), box2) {
		t.Errorf("the dead warm box's cgroup is left: %v", ids)
	}
	if _, ok := warmOf(t, live)[liveBox]; !ok {
		t.Fatalf("the live provider's warm box %s was removed (its pid is the next provider's too)", liveBox)
	}
	// The live provider still serves from it.
	sb, err := live.Start(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}}); err != nil || !st.Success() {
		t.Fatal(st, err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestBoxOwners: a box records its owner (Config.Owner, else the
// provider's instance) from its start; owner.Prune destroys the boxes of
// owners nobody holds and only those, and a dry run destroys nothing.
func TestBoxOwners(t *testing.T) {
	runDir := testbin.TempDir(t)
	ownersDir := owner.DirFor(runDir, local.Name) // the providers' default
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	server, err := owner.Share(ctx, ownersDir, "serve-00000000000000aa", nil)
	if err != nil {
		t.Fatal(err)
	}
	served := local.New(local.Config{RunDir: runDir, AgentBinary: testbin.Agent(t), Owner: server.ID(), PoolSize: 1})
	testreq.Check(t, testreq.Local, served.Available(ctx))
	defer served.Close()
	oneShot := local.New(local.Config{RunDir: runDir, AgentBinary: testbin.Agent(t)})
	defer oneShot.Close()

	a, err := served.Start(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := oneShot.Start(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	b.Close()
	if _, err := served.Start(ctx, sandbox.Spec{ID: "pool-x-1"}); err == nil {
		t.Error("a box id that names a warm box was accepted")
	}
	owners := map[string]string{}
	bs, err := served.ListOwned(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, bx := range bs {
		owners[bx.Handle.ID] = bx.Owner
	}
	if owners[a.ID()] != server.ID() {
		t.Errorf("the server's box records owner %q, want %q", owners[a.ID()], server.ID())
	}
	if o := owners[b.ID()]; o == "" || o == server.ID() {
		t.Errorf("the one-shot box records owner %q, want its provider's instance", o)
	}

	// Both owners run: nothing to prune.
	prune := func(dry bool) map[string]owner.Action {
		t.Helper()
		rs, err := owner.Prune(ctx, ownersDir, []owner.Lister{local.New(local.Config{RunDir: runDir, AgentBinary: testbin.Agent(t)})}, dry)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]owner.Action{}
		for _, r := range rs {
			out[r.Box.Handle.ID] = r.Action
		}
		return out
	}
	for id, act := range prune(false) {
		if act != owner.Owned {
			t.Errorf("box %s with a running owner: %s", id, act)
		}
	}
	// The one-shot command ends (its box was kept): its box is no one's.
	oneShot.Close()
	got := prune(true)
	if got[b.ID()] != owner.WouldDestroy || got[a.ID()] != owner.Owned {
		t.Fatalf("dry run: %v, want %s would be destroyed and %s kept", got, b.ID(), a.ID())
	}
	if _, err := os.Stat(filepath.Join(runDir, b.ID())); err != nil {
		t.Fatalf("a dry run destroyed box %s: %v", b.ID(), err)
	}
	got = prune(false)
	if got[b.ID()] != owner.Destroyed || got[a.ID()] != owner.Owned {
		t.Fatalf("prune: %v", got)
	}
	if _, err := os.Stat(filepath.Join(runDir, b.ID())); !os.IsNotExist(err) {
		t.Errorf("the pruned box's run dir: %v", err)
	}
	// The server stops: its box is no one's now, its warm ones are gone.
	served.Close()
	server.Release()
	got = prune(false)
	if got[a.ID()] != owner.Destroyed || len(got) != 1 {
		t.Fatalf("prune after the server stopped: %v, want only %s destroyed", got, a.ID())
	}
	if left, _ := os.ReadDir(ownersDir); len(left) != 0 {
		t.Errorf("lock files left in %s after the prune: %v", ownersDir, left)
	}
}
