package netlab_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/netlab"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/wire"
)

// failoverTTL is the nodes' lease TTL (internal/cli's TestServeNodes'
// reasons hold: short for a quick takeover, not so short that a busy
// PostgreSQL loses leases).
const failoverTTL = 3 * time.Second

// failoverScript: "msg ..." gets "ok"; "long task" runs a bash tool that
// waits for the file "go" in its workspace (every 0.1 s); "long again"
// one that waits for "go2" (a later turn's: the conversation holds the
// first one's result).
const failoverScript = `
rules:
  - name: msg
    when: {last_user_regexp: "^msg"}
    reply: {text: "ok", usage: {input_tokens: 100, output_tokens: 10}}
  - name: again done
    when: {last_user: "long again", tool_result: "released again"}
    reply: {text: "long again done", usage: {input_tokens: 100, output_tokens: 10}}
  - name: again
    when: {last_user: "long again"}
    reply:
      tool_calls: [{name: bash, input: {command: "until [ -e go2 ]; do sleep 0.1; done; echo released again", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: released
    when: {tool_result: "released"}
    reply: {text: "long task done", usage: {input_tokens: 100, output_tokens: 10}}
  - name: long
    when: {last_user: "long task"}
    reply:
      tool_calls: [{name: bash, input: {command: "until [ -e go ]; do sleep 0.1; done; echo released", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

// perNodeSessions is how many sessions TestFailover creates on each node.
const perNodeSessions = 3

type failSession struct {
	id, owner   string
	queued      []string
	interrupted []string
	workspace   string // as its node sees it
}

// TestFailover is internal/cli's TestServeNodes on separate machines:
// three nodes, sessions created through each, two messages each sent
// through the next node and queued behind a running tool. Node a is
// killed (SIGKILL): b and c take its sessions over, interrupt the turns,
// deliver the messages once, seqs gapless. Then node b is paused
// (SIGSTOP) past the TTL: c takes its sessions over, and b, resumed,
// finds its writes refused (fenced) and lost its leases. It logs what
// issue 26 measures (takeover time and spread, whether the old owners'
// tools run on), the "before" of that work; the known bugs it shows
// (a dead or paused owner's tools run on) are logged, not failed.
func TestFailover(t *testing.T) {
	lab := netlab.New(t)
	simURL := startSim(t, lab, failoverScript)
	nodes := startNodes(t, lab, simURL, 3, "--lease-ttl="+failoverTTL.String())
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	repo := filepath.Join(lab.SharedDir(), "repo")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tok := nodes[0].AdminToken()
	clients := map[string]*client.Client{}
	byName := map[string]*netlab.Node{}
	for _, n := range nodes {
		c, err := client.New(n.URL, tok, nil)
		if err != nil {
			t.Fatal(err)
		}
		clients[n.Name], byName[n.Name] = c, n
	}
	db, err := pgx.Connect(ctx, lab.LocalStoreURL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	leaseOf := func(id string) string {
		var node string
		if err := db.QueryRow(ctx, "SELECT node FROM session_leases WHERE session = $1", id).Scan(&node); err != nil {
			return ""
		}
		name, _, _ := strings.Cut(node, "-")
		return name
	}

	var sessions []*failSession
	for i, n := range nodes {
		via := nodes[(i+1)%3].Name
		for range perNodeSessions {
			v, err := clients[n.Name].CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "long task"})
			if err != nil {
				t.Fatalf("creating a session on node %s: %v", n.Name, err)
			}
			s := &failSession{id: v.ID, owner: n.Name, interrupted: []string{}}
			for _, text := range []string{"msg first queued", "msg second queued"} {
				m, err := clients[via].Send(ctx, v.ID, text, "")
				if err != nil {
					t.Fatalf("sending to %s (node %s) through node %s: %v", v.ID, n.Name, via, err)
				}
				s.queued = append(s.queued, m.ID)
			}
			sessions = append(sessions, s)
		}
	}
	for _, s := range sessions {
		followUntil(t, clients[s.owner], s.id, "the bash tool to start", func(ev event.Event) bool { return ev.Type() == event.TypeToolStarted })
		v, err := clients[s.owner].GetSession(ctx, s.id)
		if err != nil || len(v.Repos) == 0 {
			t.Fatalf("session %s: %+v %v", s.id, v, err)
		}
		s.workspace = v.Repos[0].Path
		if got := leaseOf(s.id); got != s.owner {
			t.Fatalf("session %s created on %s: its lease is %q's", s.id, s.owner, got)
		}
	}
	of := func(owner string) (out []*failSession) {
		for _, s := range sessions {
			if s.owner == owner {
				out = append(out, s)
			}
		}
		return out
	}
	release := func(s *failSession, node *netlab.Node) {
		t.Helper()
		if _, err := node.Run(ctx, "touch", filepath.Join(s.workspace, "go")); err != nil {
			t.Fatal(err)
		}
	}
	a, b, c := nodes[0], nodes[1], nodes[2]

	// a dies mid-turn.
	before := countTools(a)
	if before == 0 {
		t.Errorf("before the kill, node a runs no tool: the count of tools does not see them")
	}
	a.Kill()
	killed := time.Now()
	took := map[string]int{}
	for _, s := range of("a") {
		took[waitLeaseOn(t, ctx, leaseOf, s.id, "b", "c")]++
		s.interrupted = []string{"t1"}
	}
	takeover := time.Since(killed)
	if takeover > 3*failoverTTL {
		t.Errorf("b and c took a's sessions over %s after the kill; the TTL is %s", takeover, failoverTTL)
	}
	t.Logf("OBSERVED kill -9: a's %d sessions taken over %s after the kill (TTL %s): b %d, c %d",
		perNodeSessions, takeover.Round(time.Millisecond), failoverTTL, took["b"], took["c"])
	for _, s := range of("c") {
		release(s, c)
	}
	idleB, busyB := of("b")[:1], of("b")[1:]
	for _, s := range idleB {
		release(s, b)
	}
	for _, s := range slices.Concat(of("a"), of("c"), idleB) {
		checkDone(t, ctx, clients["c"], s, "t3")
	}
	t.Logf("OBSERVED kill -9: %d tool processes on a before the kill; %s after it, %d tools of a's interrupted turns still run on a's machine (nothing stops them)",
		before, time.Since(killed).Round(time.Millisecond), countTools(a))

	// b pauses past its leases.
	var onB []*failSession
	for _, s := range sessions {
		if leaseOf(s.id) == "b" {
			onB = append(onB, s)
		}
	}
	b.Pause()
	paused := time.Now()
	for _, s := range onB {
		waitLeaseOn(t, ctx, leaseOf, s.id, "c")
	}
	moved := time.Since(paused)
	toolsPaused := countTools(b)
	b.Resume()
	resumed := time.Now()
	if !b.Stderr.WaitFor("lost the lease", time.Minute) {
		t.Errorf("b, resumed, never noticed it lost its leases")
	}
	// How long b's tools run on after b resumes (issue 26: b acts only
	// when a renewal returns).
	for countTools(b) > 0 && time.Since(resumed) < 30*time.Second {
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	toolsGone := time.Since(resumed)
	for _, s := range busyB {
		s.interrupted = []string{"t1"}
		checkDone(t, ctx, clients["c"], s, "t3")
	}
	t.Logf("OBSERVED SIGSTOP: b's %d sessions moved to c %s after the pause; %d processes of b's tools ran through the pause (%s), while c owned the sessions; they ended %s after b resumed (%d still run)",
		len(onB), moved.Round(time.Millisecond), toolsPaused, resumed.Sub(paused).Round(time.Millisecond), toolsGone.Round(time.Millisecond), countTools(b))

	for _, s := range sessions {
		checkEvents(t, s, storedEvents(t, ctx, clients["c"], s.id))
	}

	// c cut off from PostgreSQL one way (its packets dropped) past the
	// TTL, two of its sessions mid-turn: b takes everything over. How long
	// c's tools run on after the lease moved is issue 26's "turn runs
	// twice" window.
	busyC := of("c")[:2]
	for _, s := range busyC {
		m, err := clients["b"].Send(ctx, s.id, "long again", "")
		if err != nil {
			t.Fatal(err)
		}
		s.queued = append(s.queued, m.ID)
		followUntil(t, clients["b"], s.id, "the bash tool of t4 to start", func(ev event.Event) bool {
			return ev.Turn == "t4" && ev.Type() == event.TypeToolStarted
		})
	}
	c.Partition(lab.Postgres(), netlab.Out)
	cut := time.Now()
	for _, s := range busyC {
		waitLeaseOn(t, ctx, leaseOf, s.id, "b")
	}
	leaseMoved := time.Now()
	toolsCut := countTools(c)
	for countTools(c) > 0 && time.Since(leaseMoved) < 20*time.Second {
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Logf("OBSERVED one-way partition from PostgreSQL: b took c's sessions %s after the cut; %d processes of c's tools were running then, and ran on %s after the lease moved (%d still run)",
		leaseMoved.Sub(cut).Round(time.Millisecond), toolsCut, time.Since(leaseMoved).Round(time.Millisecond), countTools(c))
	c.Heal()
	for _, s := range busyC {
		s.interrupted = append(s.interrupted, "t4")
		seen := followUntil(t, clients["b"], s.id, "turn t4 to end", stacktest.TurnEnded("t4"))
		if ev := seen[len(seen)-1]; ev.Type() != event.TypeTurnFailed {
			t.Errorf("session %s: turn t4, cut off from PostgreSQL on c, ended with %s", s.id, ev.Type())
		}
		checkEvents(t, s, storedEvents(t, ctx, clients["b"], s.id))
	}

	// PostgreSQL frozen past the TTL: how long reads through b and c take
	// (issue 26: they hang, no 503). Measured, not judged yet.
	lab.FreezePostgres()
	frozen := time.Now()
	type answer struct {
		node string
		took time.Duration
		err  error
	}
	answers := make(chan answer, 2)
	for _, name := range []string{"b", "c"} {
		go func() {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			start := time.Now()
			_, err := clients[name].GetSession(rctx, sessions[0].id)
			answers <- answer{name, time.Since(start), err}
		}()
	}
	select {
	case <-time.After(frozenFor): // the fault's length
	case <-ctx.Done():
	}
	lab.ThawPostgres()
	for range 2 {
		a := <-answers
		t.Logf("OBSERVED PostgreSQL frozen %s: GET /v1/sessions/{id} through node %s answered after %s: %v",
			frozenFor, a.node, a.took.Round(time.Millisecond), a.err)
	}
	t.Logf("OBSERVED PostgreSQL frozen: thawed %s after the freeze", time.Since(frozen).Round(time.Millisecond))
	t.Logf("OBSERVED kill -9: at the end, %s after the kill, %d tool processes of a's interrupted turns still run on a's machine",
		time.Since(killed).Round(time.Second), countTools(a))
	// After the thaw, the nodes answer and the logs are as they were.
	for _, s := range sessions {
		checkEvents(t, s, storedEvents(t, ctx, clients["b"], s.id))
	}
}

// frozenFor is how long TestFailover keeps PostgreSQL frozen: past the
// TTL, as issue 26's 20 s, shorter to keep the test short.
const frozenFor = 8 * time.Second

// followUntil reads a session's events through c until pred holds.
func followUntil(t *testing.T, c *client.Client, id, what string, pred func(event.Event) bool) []event.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	st := c.Events(ctx, id, client.StreamOptions{})
	defer st.Close()
	return stacktest.ReadUntil(t, st, what+" in session "+id, pred)
}

// waitLeaseOn waits until one of nodes holds session's lease.
func waitLeaseOn(t *testing.T, ctx context.Context, leaseOf func(string) string, id string, nodes ...string) string {
	t.Helper()
	for {
		if got := leaseOf(id); slices.Contains(nodes, got) {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("session %s: lease %q; none of %v took it", id, leaseOf(id), nodes)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// countTools counts the processes of "long task" and "long again" bash
// tools running on node (a tool may be more than one: its shell and a
// wrapper).
func countTools(n *netlab.Node) int {
	k := 0
	for _, p := range n.Procs() {
		if strings.Contains(p.Cmdline, "until [ -e go") {
			k++
		}
	}
	return k
}

// checkDone waits for turn last of s to finish and checks its log.
func checkDone(t *testing.T, ctx context.Context, c *client.Client, s *failSession, last string) {
	t.Helper()
	seen := followUntil(t, c, s.id, "turn "+last+" to end", stacktest.TurnEnded(last))
	if ev := seen[len(seen)-1]; ev.Type() != event.TypeTurnFinished {
		t.Errorf("session %s: turn %s ended with %s", s.id, last, ev.Type())
	}
	checkEvents(t, s, storedEvents(t, ctx, c, s.id))
}

// storedEvents reads a session's whole stored log.
func storedEvents(t *testing.T, ctx context.Context, c *client.Client, id string) []event.Event {
	t.Helper()
	var all []event.Event
	for after := int64(0); ; {
		p, err := c.EventLog(ctx, id, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, p.Events...)
		if len(p.Events) == 0 || p.Events[len(p.Events)-1].Seq >= p.LastSeq {
			return all
		}
		after = p.Events[len(p.Events)-1].Seq
	}
}

// checkEvents checks a log: seqs 1, 2, ... without a gap or repeat; the
// prompt and the queued messages delivered once each, in order; the
// interrupted turns say so, and no other.
func checkEvents(t *testing.T, s *failSession, all []event.Event) {
	t.Helper()
	var delivered, intr []string
	for i, ev := range all {
		if ev.Seq != int64(i+1) {
			t.Fatalf("session %s: event %d has seq %d", s.id, i+1, ev.Seq)
		}
		switch p := ev.Data.(type) {
		case event.MessageDelivered:
			delivered = append(delivered, p.MessageID)
		case event.TurnFailed:
			if p.Kind == event.FailInterrupted {
				intr = append(intr, ev.Turn)
			}
		}
	}
	if len(delivered) != len(s.queued)+1 || !slices.Equal(delivered[1:], s.queued) {
		t.Errorf("session %s (created on %s): delivered %v, want the prompt then %v", s.id, s.owner, delivered, s.queued)
	}
	if !slices.Equal(intr, s.interrupted) {
		t.Errorf("session %s (created on %s): turns interrupted %v, want %v", s.id, s.owner, intr, s.interrupted)
	}
}
