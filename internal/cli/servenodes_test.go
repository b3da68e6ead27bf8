package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
// clock must pass it for a takeover; not shorter, because a node whose
// renewals fail for 5/6 of it gives its sessions up (it did at 2 s, on a
// PostgreSQL busy with the takeover's restores and the rest of the suite).
const nodeTTL = 3 * time.Second

// nodesScript: "msg ..." gets "ok"; "long task" runs a bash command that
// waits for the file "go" in its workspace (as in serveScript); "long
// wait" one that waits for the file "stop", also in a session whose
// earlier tool said "released" (so it runs until cancelled). The commands
// look for their file every 0.1 s, not 0.01 s: 30 of them at once would
// fork 3,000 sleeps a second on a machine of two cores, and starve the
// nodes' lease renewals.
const nodesScript = `
rules:
  - name: msg
    when: {last_user_regexp: "^msg"}
    reply: {text: "ok", usage: {input_tokens: 100, output_tokens: 10}}
  - name: stopped
    when: {last_user: "long wait", tool_result: "stopped"}
    reply: {text: "long wait done", usage: {input_tokens: 100, output_tokens: 10}}
  - name: long wait
    when: {last_user: "long wait"}
    reply:
      tool_calls: [{name: bash, input: {command: "until [ -e stop ]; do sleep 0.1; done; echo stopped", timeout: 600000}}]
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

// perNode is how many sessions TestServeNodes creates on each node.
const perNode = 10

// TestServeNodes runs three `harvest serve` nodes, A, B and C, each with
// a data directory of its own (three machines' disks), on one
// PostgreSQL store and one NATS server (JetStream; every node publishes
// its events there; C serves its event streams from NATS, --nats-follow,
// while A and B forward a stream to the session's owner). 30 sessions, 10
// created on each node (a node at a time), each get two messages sent
// through the next node (forwarded to the owner, acknowledged, queued
// behind the "long task" turn) and are all in the middle of that turn
// when A is killed with SIGKILL.
//
// Before the kill, SSE clients (client.Stream, which reconnects with
// Last-Event-ID) follow each of A's 10 sessions three ways: on C (from
// NATS), on B (forwarded to A: B's forwarder goes on from the new owner
// in the same stream, the client never reconnects), and on A itself (when A
// stops answering, the client resumes on B or C with the last seq it
// got); and each of B's 10 sessions on C and on B.
//
// B and C take A's sessions over within 3×TTL of the kill, restore their
// workspaces from what A carried to the store, mark their turns
// interrupted and deliver the queued messages; C's sessions and two
// of B's, then released, finish their turns and deliver theirs. Each
// follower of A's sessions has seen every seq 1..N once, in order, equal
// to the stored log.
//
// Then B is paused with SIGSTOP past its leases, 8 of its sessions still
// mid-turn: C takes over everything B held, and B, resumed, finds its
// leases lost and stops its runners without writing (its turn ends are
// refused); C marks the turns interrupted and delivers their messages.
// The followers of B's sessions, on C and on B (whose streams go on from
// C when C takes the sessions, without a reconnect), have seen
// every seq once, in order. B's two idle sessions, moved to C with their
// workspaces, answer a message, a cancel and a delete sent through B. At the
// end every session's log is gapless, every acknowledged message was
// delivered exactly once, in order, and only the turns running on the
// killed and the paused node say they were interrupted.
func TestServeNodes(t *testing.T) {
	e := newServeEnvWith(t, nodesScript)
	e.onPostgres()
	ns := startNATSServer(t)
	repo := testRepo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	st := e.openStore(ctx)
	s3 := testbin.StartS3Server(t)
	node := func(name string, more ...string) *serveProc {
		return e.start(append([]string{"--node-id", name, "--lease-ttl=" + nodeTTL.String(), "--pool", "0", "--nats", ns.url(),
			"--checkpoint-store", "s3://" + s3.Bucket + "/nodes", "--checkpoint-endpoint", s3.Endpoint, "--checkpoint-credentials", s3.CredentialsFile}, more...)...)
	}
	// Three machines: each node has a data directory of its own, so a
	// session another node takes over has its workspace carried through
	// the store and the S3 bucket (not reattached: the box was on the
	// dead node's machine).
	a, b, c := node("a"), node("b", "--data", e.dataDir()), node("c", "--nats-follow", "--data", e.dataDir())
	ca, cb, cc := e.client(a), e.client(b), e.client(c)
	waitNodes(t, ctx, st, 3)
	defer func() {
		if t.Failed() {
			t.Logf("node A:\n%s\nnode B:\n%s\nnode C:\n%s", a.stderr, b.stderr, c.stderr)
		}
	}()
	names := []string{"a", "b", "c"}
	clients := []*client.Client{ca, cb, cc}

	// 30 sessions, 10 per node, each with two messages sent through the
	// next node (forwarded to the owner) while its first turn runs. A node
	// at a time: 30 boxes starting at once on two cores could starve the
	// nodes' lease renewals.
	var sessions []*nodeSession
	for owner := range names {
		via := (owner + 1) % 3
		wave := make([]*nodeSession, perNode)
		var wg sync.WaitGroup
		errs := make(chan error, perNode)
		for i := range wave {
			s := &nodeSession{owner: names[owner], interrupted: []string{}}
			wave[i] = s
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := clients[owner].CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "long task"})
				if err != nil {
					errs <- fmt.Errorf("creating a session on node %s: %w", names[owner], err)
					return
				}
				s.id = v.ID
				for _, text := range []string{"msg first queued", "msg second queued"} {
					m, err := clients[via].Send(ctx, v.ID, text, "")
					if err != nil {
						errs <- fmt.Errorf("sending to session %s (node %s) through node %s: %w", v.ID, names[owner], names[via], err)
						return
					}
					s.queued = append(s.queued, m.ID)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for _, s := range wave {
			// Followed through the node that forwarded its messages.
			follow(t, clients[via], s.id, 0, "the bash tool to start", func(ev event.Event) bool { return ev.Type() == event.TypeToolStarted })
			v, err := cc.GetSession(ctx, s.id)
			if err != nil || len(v.Repos) == 0 || v.Repos[0].Path == "" {
				t.Fatalf("session %s: its workspace: %+v %v", s.id, v, err)
			}
			s.workspace = v.Repos[0].Path
		}
		sessions = append(sessions, wave...)
	}
	for _, s := range sessions {
		if l, err := st.GetLease(ctx, s.id); err != nil || !strings.HasPrefix(l.Node, s.owner+"-") {
			t.Fatalf("session %s created on %s: lease %+v %v", s.id, s.owner, l, err)
		}
	}
	of := func(owner string) (out []*nodeSession) {
		for _, s := range sessions {
			if s.owner == owner {
				out = append(out, s)
			}
		}
		return out
	}

	// The followers, live before the kill: A's sessions on C (NATS), on B
	// (forwarded to A), on A (then elsewhere); B's sessions on C and on B.
	var followers []*liveFollower
	for i, s := range of("a") {
		other, otherName := cb, "b"
		if i%2 == 1 {
			other, otherName = cc, "c"
		}
		followers = append(followers,
			startFollower(ctx, s.id, "c", cc, nil, ""),
			startFollower(ctx, s.id, "b", cb, nil, ""),
			startFollower(ctx, s.id, "a", ca, other, otherName))
	}
	for _, s := range of("b") {
		followers = append(followers,
			startFollower(ctx, s.id, "c", cc, nil, ""),
			startFollower(ctx, s.id, "b", cb, nil, ""))
	}
	defer func() {
		for _, f := range followers {
			f.stop()
		}
	}()
	for _, f := range followers {
		waitUntil(t, ctx, "the follower of "+f.session+" on "+f.node+" to see the running tool", func() bool {
			seen, err := f.state()
			return err != nil || slices.ContainsFunc(seen, func(ev event.Event) bool { return ev.Type() == event.TypeToolStarted })
		})
	}

	// A dies mid-turn; B and C take its sessions over.
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.wait()
	killed := time.Now()
	took := map[string]int{}
	for _, s := range of("a") {
		took[waitLease(t, ctx, st, s.id, "b", "c")]++
		s.interrupted = []string{"t1"}
	}
	if d := time.Since(killed); d > 3*nodeTTL {
		t.Errorf("B and C took A's sessions over %s after the kill; the lease TTL is %s", d, nodeTTL)
	} else {
		t.Logf("A's %d sessions were taken over %s after the kill (B %d, C %d)", perNode, d.Round(time.Millisecond), took["b"], took["c"])
	}
	// C's sessions, and two of B's, finish their turns (and deliver their
	// messages): B's two go idle there.
	idleB, busyB := of("b")[:2], of("b")[2:]
	for _, s := range append(of("c"), idleB...) {
		if err := os.WriteFile(filepath.Join(s.workspace, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range slices.Concat(of("a"), of("c"), idleB) {
		checkDelivered(t, ctx, cc, s.id, s.queued, "t3", s.interrupted)
	}
	// A's sessions run on their new owner's disk, restored from what A
	// carried at the end of provisioning (t1 never ended there).
	for _, s := range of("a") {
		checkMoved(t, ctx, cc, s.id, "a")
	}
	ofB := func(f *liveFollower) bool {
		return slices.ContainsFunc(of("b"), func(s *nodeSession) bool { return s.id == f.session })
	}
	for _, f := range followers {
		if ofB(f) {
			continue // after B's pause
		}
		checkFollowed(t, ctx, cc, f)
		switch reconnects, resumed := f.moved(); {
		case f.node == "b" && reconnects != 0:
			// B relays the stream from whichever node serves it
			// (server/cluster, "Streams"): A's death is not the client's
			// business.
			t.Errorf("the follower of %s on B reconnected %d times: B's stream, forwarded to A, should have gone on from the new owner when A died", f.session, reconnects)
		case f.node == "a" && resumed == "":
			t.Errorf("the follower of %s on A never resumed on another node", f.session)
		}
	}

	// B pauses past its leases: 8 of its sessions mid-turn, 2 idle (and
	// those of A it took over, idle).
	var onB []*nodeSession
	for _, s := range sessions {
		if l, err := st.GetLease(ctx, s.id); err == nil && strings.HasPrefix(l.Node, "b-") {
			onB = append(onB, s)
		} else if s.owner == "b" {
			t.Fatalf("session %s, created on B: lease %+v %v", s.id, l, err)
		}
	}
	if err := b.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for _, s := range onB {
		waitLease(t, ctx, st, s.id, "c")
	}
	if err := b.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !b.stderr.WaitFor("lost the lease", time.Minute) {
		t.Errorf("B, resumed, never noticed it lost its leases")
	}
	// B's turn ends (turn.cancelled, written as its runners stopped) were
	// refused: C found the turns unended and marked them interrupted.
	for _, s := range busyB {
		s.interrupted = []string{"t1"}
		checkDelivered(t, ctx, cc, s.id, s.queued, "t3", s.interrupted)
	}
	for _, f := range followers {
		if ofB(f) {
			checkFollowed(t, ctx, cc, f)
			if reconnects, _ := f.moved(); f.node == "b" && reconnects != 0 {
				t.Errorf("the follower of %s on B reconnected %d times: its stream, served by B, should have gone on from C when C took the session over", f.session, reconnects)
			}
		}
	}

	// B's idle sessions moved to C with their workspaces: they still answer,
	// through B, which forwards to C.
	for _, s := range idleB {
		m, err := cb.Send(ctx, s.id, "msg once more", "")
		if err != nil {
			t.Fatal(err)
		}
		s.queued = append(s.queued, m.ID)
		checkDelivered(t, ctx, cc, s.id, s.queued, "t4", s.interrupted)
	}

	// Cancel and delete through B (which owns nothing now): forwarded to C.
	s := idleB[0]
	if _, err := cb.Send(ctx, s.id, "long wait", ""); err != nil {
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

	// The end: every other session's log, once more.
	for _, s := range sessions {
		if s != idleB[0] {
			checkLog(t, s.id, storedLog(t, ctx, cc, s.id), s.queued, s.interrupted)
		}
	}
	var viaA, viaB, resumed int
	for _, f := range followers {
		reconnects, on := f.moved()
		switch f.node {
		case "a":
			viaA += reconnects
			if on != "" {
				resumed++
			}
		case "b":
			viaB += reconnects
		}
	}
	t.Logf("%d followers: those on B reconnected %d times in all; %d of those on A resumed elsewhere (%d reconnects)", len(followers), viaB, resumed, viaA)
}

// nodeSession is a session of TestServeNodes.
type nodeSession struct {
	id          string
	owner       string   // the node it was created on: a, b or c
	queued      []string // the ids of the messages sent to it, acknowledged
	interrupted []string // the turns that must say they were interrupted
	workspace   string   // its repository's copy ("go" there ends a long task)
}

// liveFollower is an SSE client following one session's events through
// one node, in its own goroutine, as a real client does: client.Stream
// reconnects with Last-Event-ID when the stream breaks; with a failover,
// once the node stops answering, it resumes on the failover node from the
// last seq it got. Every event must be the next seq: no gap, no repeat.
type liveFollower struct {
	session, node string
	cancel        context.CancelFunc
	done          chan struct{}

	mu         sync.Mutex
	seen       []event.Event
	err        error // why it stopped by itself
	reconnects int
	resumedOn  string // the node it resumed on, after its own stopped answering
}

func startFollower(ctx context.Context, session, node string, c *client.Client, failover *client.Client, failoverNode string) *liveFollower {
	ctx, cancel := context.WithCancel(ctx)
	f := &liveFollower{session: session, node: node, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		opts := client.StreamOptions{MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
		if failover != nil {
			opts.MaxRetries = 3 // then try elsewhere
		}
		s := c.Events(ctx, session, opts)
		defer func() { s.Close() }()
		base := 0
		for {
			ev, err := s.Next()
			f.mu.Lock()
			f.reconnects = base + s.Reconnects()
			f.mu.Unlock()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if failover != nil {
					base += s.Reconnects() + 1
					after := s.LastSeq()
					s.Close()
					// A new stream: its first request carries Last-Event-ID.
					s = failover.Events(ctx, session, client.StreamOptions{After: after, MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
					f.mu.Lock()
					f.resumedOn = failoverNode
					f.mu.Unlock()
					failover = nil
					continue
				}
				f.mu.Lock()
				f.err = err
				f.mu.Unlock()
				return
			}
			if ev.Live > 0 {
				continue // a live piece: never stored, it carries the seq before it
			}
			f.mu.Lock()
			if want := int64(len(f.seen) + 1); ev.Seq != want {
				f.err = fmt.Errorf("got seq %d (%s %s), want %d: a gap or a repeat", ev.Seq, ev.Turn, ev.Type(), want)
				f.mu.Unlock()
				return
			}
			f.seen = append(f.seen, ev)
			f.mu.Unlock()
		}
	}()
	return f
}

// state returns what the follower has seen, and why it stopped if it did.
func (f *liveFollower) state() ([]event.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.seen), f.err
}

// moved says how often the follower reconnected, and where it resumed.
func (f *liveFollower) moved() (int, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reconnects, f.resumedOn
}

// stop ends the follower and waits for its goroutine.
func (f *liveFollower) stop() {
	f.cancel()
	<-f.done
}

// checkFollowed waits until f has seen the session's last stored event,
// stops it, and checks that it saw the stored log: every seq from 1 on
// once, in order, each the event the store has.
func checkFollowed(t *testing.T, ctx context.Context, c *client.Client, f *liveFollower) {
	t.Helper()
	all := storedLog(t, ctx, c, f.session)
	last := all[len(all)-1].Seq
	waitUntil(t, ctx, fmt.Sprintf("the follower of %s on %s to get seq %d", f.session, f.node, last), func() bool {
		seen, err := f.state()
		return err != nil || len(seen) > 0 && seen[len(seen)-1].Seq >= last
	})
	f.stop()
	seen, err := f.state()
	reconnects, resumed := f.moved()
	if err != nil {
		t.Errorf("the follower of %s on %s (resumed on %q, %d reconnects) stopped after seq %d: %v", f.session, f.node, resumed, reconnects, int64(len(seen)), err)
		return
	}
	all = storedLog(t, ctx, c, f.session) // it may have grown meanwhile
	for i, ev := range seen {
		if i >= len(all) {
			t.Errorf("the follower of %s on %s got seq %d, which the store does not have", f.session, f.node, ev.Seq)
			return
		}
		want := all[i]
		got, _ := json.Marshal(ev.Data)
		stored, _ := json.Marshal(want.Data)
		if ev.Seq != want.Seq || ev.Type() != want.Type() || ev.Turn != want.Turn || string(got) != string(stored) {
			t.Errorf("the follower of %s on %s: event %d is %d %s %s %s; the store has %d %s %s %s",
				f.session, f.node, i+1, ev.Seq, ev.Turn, ev.Type(), clipLog(got), want.Seq, want.Turn, want.Type(), clipLog(stored))
			return
		}
	}
}

// waitUntil waits until cond holds.
func waitUntil(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// waitLease waits until one of nodes holds session's lease, and says which.
func waitLease(t *testing.T, ctx context.Context, st store.Store, session string, nodes ...string) string {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		l, err := st.GetLease(ctx, session)
		if err == nil {
			for _, n := range nodes {
				if strings.HasPrefix(l.Node, n+"-") { // ids get a random suffix
					return n
				}
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("session %s: lease %+v %v; none of %v took it", session, l, err, nodes)
		}
	}
}

// checkDelivered follows session until turn last ends and checks its whole
// log (checkLog); the last turn finished.
func checkDelivered(t *testing.T, ctx context.Context, c *client.Client, session string, queued []string, last string, interrupted []string) {
	t.Helper()
	seen := follow(t, c, session, 0, "turn "+last+" to end", stacktest.TurnEnded(last))
	if ev := seen[len(seen)-1]; ev.Type() != event.TypeTurnFinished {
		t.Errorf("session %s: turn %s ended with %s", session, last, ev.Type())
	}
	checkLog(t, session, storedLog(t, ctx, c, session), queued, interrupted)
}

// storedLog reads a session's whole stored log.
func storedLog(t *testing.T, ctx context.Context, c *client.Client, session string) []event.Event {
	t.Helper()
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
	return all
}

// checkLog checks a session's log: seqs 1, 2, 3, ... without a gap; the
// prompt and then queued delivered exactly once each, in order; the turns
// interrupted say so, and no other.
func checkLog(t *testing.T, session string, all []event.Event, queued []string, interrupted []string) {
	t.Helper()
	failed := t.Failed()
	var delivered, intr []string
	for i, ev := range all {
		if ev.Seq != int64(i+1) {
			t.Fatalf("session %s: event %d has seq %d", session, i+1, ev.Seq)
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
	if len(delivered) != len(queued)+1 || !slices.Equal(delivered[1:], queued) {
		t.Errorf("session %s: delivered %v, want the prompt then %v", session, delivered, queued)
	}
	if len(intr) != len(interrupted) || !slices.Equal(intr, interrupted) {
		t.Errorf("session %s: turns interrupted %v, want %v", session, intr, interrupted)
	}
	if !failed && t.Failed() {
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

// checkMoved checks that session's log says its workspace was restored
// on another node from node from's checkpoint.
func checkMoved(t *testing.T, ctx context.Context, c *client.Client, session, from string) {
	t.Helper()
	for _, ev := range storedLog(t, ctx, c, session) {
		if st, ok := ev.Data.(event.SessionState); ok && strings.Contains(st.Reason, "moved from node "+from+"-") && strings.Contains(st.Reason, "workspace was restored") {
			return
		}
	}
	t.Errorf("session %s: no session.state event says its workspace was restored from node %s's checkpoint", session, from)
}
