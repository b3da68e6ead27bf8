package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// nodeTTL is the lease TTL of TestServeNodes: short, because the store's
// clock must pass it for a takeover.
const nodeTTL = 2 * time.Second

// TestServeNodes runs three `harvest serve` nodes on one PostgreSQL store.
// Sessions created on node A, with messages sent to them through node B
// (forwarded to A, their owner), are in the middle of a turn when A is
// killed with SIGKILL; B takes them over within the lease TTL (and a scan),
// marks the turns interrupted, and delivers every queued message exactly
// once, with gapless seqs. Then B is paused with SIGSTOP past its leases:
// C takes its sessions over, and B, resumed, finds its lease lost and
// stops its runners without writing (the events stay gapless, every
// message is delivered once).
func TestServeNodes(t *testing.T) {
	e := newServeEnv(t)
	e.onPostgres()
	repo := filepath.Join(testbin.TempDir(t), "repo")
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	st := e.openStore(ctx)
	ttl := "--lease-ttl=" + nodeTTL.String()
	a := e.start("--node-id", "a", ttl, "--pool", "0")
	b := e.start("--node-id", "b", ttl, "--pool", "0")
	ca, cb := e.client(a), e.client(b)

	type sess struct {
		id     string
		queued []string
	}
	var sessions []*sess
	for range 2 {
		v, err := ca.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "long task"})
		if err != nil {
			t.Fatal(err)
		}
		s := &sess{id: v.ID}
		for _, text := range []string{"msg first queued", "msg second queued"} {
			m, err := cb.Send(ctx, v.ID, text, "") // forwarded to A
			if err != nil {
				t.Fatal(err)
			}
			s.queued = append(s.queued, m.ID)
		}
		sessions = append(sessions, s)
	}
	for _, s := range sessions {
		// B streams A's session (forwarded) up to the running tool.
		follow(t, cb, s.id, 0, "the bash tool to start", func(ev event.Event) bool { return ev.Type() == event.TypeToolStarted })
		if l, err := st.GetLease(ctx, s.id); err != nil || !strings.HasPrefix(l.Node, "a-") {
			t.Fatalf("session %s created on A: lease %+v %v", s.id, l, err)
		}
	}

	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.wait()
	killed := time.Now()
	for _, s := range sessions {
		waitLease(t, ctx, st, s.id, "b")
	}
	if d := time.Since(killed); d > 3*nodeTTL {
		t.Errorf("B took A's sessions over %s after the kill; the lease TTL is %s", d, nodeTTL)
	}
	for _, s := range sessions {
		checkDelivered(t, ctx, cb, s.id, s.queued, "t3", []string{"t1"})
	}

	// C joins; B gets a turn running, then pauses past its leases.
	c := e.start("--node-id", "c", ttl, "--pool", "0")
	cc := e.client(c)
	v, err := cb.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "long task"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cc.Send(ctx, v.ID, "msg after the pause", "") // forwarded to B
	if err != nil {
		t.Fatal(err)
	}
	follow(t, cc, v.ID, 0, "the bash tool to start", func(ev event.Event) bool { return ev.Type() == event.TypeToolStarted })
	if err := b.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{v.ID, sessions[0].id, sessions[1].id} {
		waitLease(t, ctx, st, id, "c")
	}
	if err := b.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !b.stderr.WaitFor("lost the lease", time.Minute) {
		t.Errorf("B, resumed, never noticed it lost its leases:\n%s", b.stderr)
	}
	// B's turn end (turn.cancelled, written as its runner stopped) was
	// refused: C found the turn unended and marked it interrupted.
	checkDelivered(t, ctx, cc, v.ID, []string{m.ID}, "t2", []string{"t1"})
	for _, s := range sessions {
		// Idle sessions move with their boxes: they still answer.
		m, err := cb.Send(ctx, s.id, "msg once more", "") // B forwards to C now
		if err != nil {
			t.Fatal(err)
		}
		checkDelivered(t, ctx, cc, s.id, append(slices.Clone(s.queued), m.ID), "t4", []string{"t1"})
	}

	// Cancel and delete through B (which owns nothing now): forwarded to C.
	s := sessions[0]
	if _, err := cb.Send(ctx, s.id, "long task", ""); err != nil {
		t.Fatal(err)
	}
	follow(t, cb, s.id, 0, "the bash tool of t5 to start", func(ev event.Event) bool { return ev.Turn == "t5" && ev.Type() == event.TypeToolStarted })
	if err := cb.Cancel(ctx, s.id); err != nil {
		t.Fatal(err)
	}
	if ev := follow(t, cb, s.id, 0, "turn t5 to end", stacktest.TurnEnded("t5")); ev[len(ev)-1].Type() != event.TypeTurnCancelled {
		t.Errorf("turn t5 after a cancel through B: %s", ev[len(ev)-1].Type())
	}
	if err := cb.DeleteSession(ctx, s.id); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.GetSession(ctx, s.id); err == nil {
		t.Errorf("session %s is still there after a delete through B", s.id)
	}
	if t.Failed() {
		t.Logf("node B:\n%s\nnode C:\n%s", b.stderr, c.stderr)
	}
}

// waitLease waits until node holds session's lease.
func waitLease(t *testing.T, ctx context.Context, st store.Store, session, node string) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		l, err := st.GetLease(ctx, session)
		if err == nil && strings.HasPrefix(l.Node, node+"-") { // ids get a random suffix
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("session %s: lease %+v %v; node %s never took it", session, l, err, node)
		}
	}
}

// checkDelivered follows session until turn last ends and checks its whole
// log: seqs 1, 2, 3, ... without a gap; the prompt and then queued
// delivered exactly once each, in order; the turns interrupted say so;
// the last turn finished.
func checkDelivered(t *testing.T, ctx context.Context, c *client.Client, session string, queued []string, last string, interrupted []string) {
	t.Helper()
	seen := follow(t, c, session, 0, "turn "+last+" to end", stacktest.TurnEnded(last))
	if ev := seen[len(seen)-1]; ev.Type() != event.TypeTurnFinished {
		t.Errorf("session %s: turn %s ended with %s", session, last, ev.Type())
	}
	var all []event.Event
	for after := int64(0); ; {
		p, err := c.EventLog(ctx, session, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, p.Events...)
		if len(p.Events) == 0 || p.Events[len(p.Events)-1].Seq >= p.LastSeq {
			break
		}
		after = p.Events[len(p.Events)-1].Seq
	}
	var delivered, failed []string
	for i, ev := range all {
		if ev.Seq != int64(i+1) {
			t.Fatalf("session %s: event %d has seq %d", session, i+1, ev.Seq)
		}
		switch p := ev.Data.(type) {
		case event.MessageDelivered:
			delivered = append(delivered, p.MessageID)
		case event.TurnFailed:
			if p.Kind == event.FailInterrupted {
				failed = append(failed, ev.Turn)
			}
		}
	}
	if len(delivered) != len(queued)+1 || !slices.Equal(delivered[1:], queued) {
		t.Errorf("session %s: delivered %v, want the prompt then %v", session, delivered, queued)
	}
	if !slices.Equal(failed, interrupted) {
		t.Errorf("session %s: turns interrupted %v, want %v", session, failed, interrupted)
	}
	if t.Failed() {
		for _, ev := range all {
			b, _ := json.Marshal(ev.Data)
			t.Logf("%s %d %s %s %s", session, ev.Seq, ev.Turn, ev.Type(), clipLog(b))
		}
	}
}

func clipLog(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
