package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// TestServeNodesPlace runs two `harvest serve --max-sessions 1` nodes on
// one PostgreSQL store. A first session created on A runs there; a second
// created on A (full) is forwarded to B; a third, created when both are
// full, is stored and queued (no owner, a state reason saying it waits)
// and starts on A as soon as A's session is deleted.
func TestServeNodesPlace(t *testing.T) {
	e := newServeEnv(t)
	e.onPostgres()
	repo := testRepo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st := e.openStore(ctx)

	for _, args := range [][]string{{"--node-id", "x", "--max-sessions", "-1"}, {"--max-sessions", "1"}} {
		cmd := exec.Command(testbin.Harvest(t), append([]string{"serve", "--listen", "127.0.0.1:0", "--quiet"}, args...)...)
		cmd.Env = e.env
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--max-sessions") {
			t.Errorf("serve %s: %v, %s; want a failure about --max-sessions", args, err, out)
		}
	}

	ttl := "--lease-ttl=" + nodeTTL.String()
	a := e.start("--node-id", "a", ttl, "--pool", "0", "--max-sessions", "1")
	b := e.start("--node-id", "b", ttl, "--pool", "0", "--max-sessions", "1")
	ca, cb := e.client(a), e.client(b)
	waitNodes(t, ctx, st, 2)
	create := func(c *client.Client, prompt string) string {
		t.Helper()
		v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: prompt})
		if err != nil {
			t.Fatal(err)
		}
		return v.ID
	}

	s1 := create(ca, "long task")
	waitLease(t, ctx, st, s1, "a")
	s2 := create(ca, "long task") // A is full: forwarded to B
	waitLease(t, ctx, st, s2, "b")
	for _, ev := range follow(t, cb, s2, 0, "the bash tool to start", func(ev event.Event) bool { return ev.Type() == event.TypeToolStarted }) {
		if p, ok := ev.Data.(event.SessionState); ok && p.Reason != "" && strings.Contains(p.Reason, "queued") {
			t.Errorf("session %s was queued (%s), not forwarded to B, which had room", s2, p.Reason)
		}
	}

	s3 := create(cb, "msg third") // both are full: queued
	follow(t, ca, s3, 0, "the queued state", func(ev event.Event) bool {
		p, ok := ev.Data.(event.SessionState)
		return ok && p.State == string(store.StatePending) && strings.Contains(p.Reason, "queued")
	})
	if l, err := st.GetLease(ctx, s3); err != nil || l.Node != "" {
		t.Errorf("queued session %s: lease %+v %v; want it released", s3, l, err)
	}
	if v, err := cb.GetSession(ctx, s3); err != nil || string(v.State) != string(store.StatePending) {
		t.Errorf("queued session %s: %+v %v; want it pending", s3, v, err)
	}

	if err := cb.DeleteSession(ctx, s1); err != nil { // forwarded to A, which then has room
		t.Fatal(err)
	}
	waitLease(t, ctx, st, s3, "a")
	checkDelivered(t, ctx, cb, s3, nil, "t1", nil)
	if l, err := st.GetLease(ctx, s2); err != nil || !strings.HasPrefix(l.Node, "b-") {
		t.Errorf("session %s: lease %+v %v; want B's still", s2, l, err)
	}
	if t.Failed() {
		t.Logf("node A:\n%s\nnode B:\n%s", a.stderr, b.stderr)
	}
}

// TestServeFailoverTime measures how long a session is without a node
// after its owner is killed (kill -9) mid-tool: from the kill to the
// survivor's first event for it, which must be the takeover's own (the
// owner's turn ended as interrupted), with a lease TTL of 1s, over
// $HARVEST_FAILOVER_KILLS kills (BENCHMARKS.md: 10). Without it the test
// makes one kill: the check that the survivor's first event is the
// takeover's runs in every suite, the measurement only when asked for.
func TestServeFailoverTime(t *testing.T) {
	kills := 1
	if v := os.Getenv("HARVEST_FAILOVER_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("HARVEST_FAILOVER_KILLS=%q: want a number of kills > 0", v)
		}
		kills = n
	}
	e := newServeEnv(t)
	e.onPostgres()
	repo := testRepo(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(kills)*time.Minute)
	defer cancel()
	st := e.openStore(ctx)
	const ttl = "--lease-ttl=1s"
	survivor := e.start("--node-id", "survivor", ttl, "--pool", "0")
	cs := e.client(survivor)
	var samples []time.Duration
	for i := range kills {
		o := e.start("--node-id", "owner", ttl, "--pool", "0")
		co := e.client(o)
		v, err := co.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "long task"})
		if err != nil {
			t.Fatal(err)
		}
		seen := follow(t, co, v.ID, 0, "the bash tool to start", func(ev event.Event) bool { return ev.Type() == event.TypeToolStarted })
		waitLease(t, ctx, st, v.ID, "owner")
		last := seen[len(seen)-1].Seq
		if err := o.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		o.wait()
		killed := time.Now()
		first := follow(t, cs, v.ID, last, "the survivor's first event", func(event.Event) bool { return true })[0]
		waitLease(t, ctx, st, v.ID, "survivor")
		// The takeover's own first act: the dead owner's turn ended as
		// interrupted (recoverTurn), right after the last event the owner
		// wrote, and after the kill. Any other event would measure
		// something else (the owner's, or a later step of the survivor's).
		if f, ok := first.Data.(event.TurnFailed); !ok || f.Kind != event.FailInterrupted || first.Turn != "t1" || first.Seq != last+1 {
			t.Fatalf("kill %d: session %s: the first event after the owner's last (seq %d) is %d %s %s %+v; want seq %d, t1's turn.failed kind interrupted, written by the survivor",
				i+1, v.ID, last, first.Seq, first.Turn, first.Type(), first.Data, last+1)
		}
		if !first.Time.After(killed) {
			t.Fatalf("kill %d: session %s: t1 was marked interrupted at %s, before the kill (%s): not by the survivor", i+1, v.ID, first.Time, killed)
		}
		d := first.Time.Sub(killed)
		samples = append(samples, d)
		t.Logf("kill %d: session %s: first event (%s) %s after the kill", i+1, v.ID, first.Type(), d.Round(time.Millisecond))
		if err := cs.DeleteSession(ctx, v.ID); err != nil { // its box goes too
			t.Fatal(err)
		}
	}
	slices.Sort(samples)
	pct := func(p float64) time.Duration { return samples[min(len(samples)-1, int(p*float64(len(samples))))] }
	t.Logf("failover with --lease-ttl 1s over %d kills: p50 %s, p99 %s, min %s, max %s", kills,
		pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), samples[0].Round(time.Millisecond), samples[len(samples)-1].Round(time.Millisecond))
}

// testRepo makes a repository directory for sessions.
func testRepo(t *testing.T) string {
	repo := filepath.Join(testbin.TempDir(t), "repo")
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644)
	return repo
}

// waitNodes waits until n nodes are live.
func waitNodes(t *testing.T, ctx context.Context, st store.Store, n int) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		nodes, err := st.ListNodes(ctx)
		if err == nil && len(nodes) == n {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("nodes %+v %v; want %d", nodes, err, n)
		}
	}
}
