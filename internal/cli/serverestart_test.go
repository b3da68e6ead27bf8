package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/wire"
)

// restartScript: "long task one" and "long task two" run a bash command
// that waits for the file go1, go2 in the workspace; "msg ..." gets "ok".
// (A turn's tool result stays the newest in later turns: the rules of the
// second task come first.)
const restartScript = `
rules:
  - name: msg
    when: {last_user_regexp: "^msg"}
    reply: {text: "ok", usage: {input_tokens: 100, output_tokens: 10}}
  - name: released two
    when: {tool_result: "released two"}
    reply: {text: "task two done", usage: {input_tokens: 100, output_tokens: 10}}
  - name: long two
    when: {last_user: "long task two"}
    reply:
      tool_calls: [{name: bash, input: {command: "until [ -e go2 ]; do sleep 0.01; done; echo released two", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: released one
    when: {tool_result: "released one"}
    reply: {text: "task one done", usage: {input_tokens: 100, output_tokens: 10}}
  - name: long one
    when: {last_user: "long task one"}
    reply:
      tool_calls: [{name: bash, input: {command: "until [ -e go1 ]; do sleep 0.01; done; echo released one", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

// TestServeRestartDependencies restarts PostgreSQL, then NATS, under a
// real `harvest serve` (--store postgres://, --nats, --nats-follow) in the
// middle of a turn: the turn stalls, then continues; a message sent while
// PostgreSQL is down gets an error (never a false success) and, sent
// again once it is back, is delivered once; seqs are gapless; and an SSE
// follower open throughout sees every event once, in order.
func TestServeRestartDependencies(t *testing.T) {
	e := newServeEnvWith(t, restartScript)
	pg := testbin.PostgresServer(t)
	e.store = pg.Database()
	e.env = append(e.env, "HARVEST_STORE="+e.store)
	ns := startNATSServer(t)
	s := e.start("--nats", ns.url(), "--nats-follow")
	c := e.client(s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	repo := filepath.Join(testbin.TempDir(t), "repo")
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644)
	v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "long task one"})
	if err != nil {
		t.Fatal(err)
	}
	id := v.ID

	// The follower open throughout: every seq once, in order.
	live := c.Events(ctx, id, client.StreamOptions{MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	defer live.Close()
	var seen []event.Event
	readUntil := func(what string, pred func(event.Event) bool) {
		t.Helper()
		for {
			ev, err := live.Next()
			if err != nil {
				t.Fatalf("following %s: waiting for %s: %v\nserve's log:\n%s", id, what, err, s.stderr)
			}
			if ev.Live > 0 {
				continue // a live piece: never stored, it carries the seq before it
			}
			if want := int64(len(seen) + 1); ev.Seq != want {
				t.Fatalf("the follower got seq %d (%s), want %d: a gap or a repeat", ev.Seq, ev.Type(), want)
			}
			seen = append(seen, ev)
			if pred(ev) {
				return
			}
		}
	}
	toolStarted := func(ev event.Event) bool { return ev.Type() == event.TypeToolStarted }
	readUntil("the bash tool to start", toolStarted)
	v, err = c.GetSession(ctx, id)
	if err != nil || len(v.Repos) == 0 || v.Repos[0].Path == "" {
		t.Fatalf("the session's workspace: %+v %v", v, err)
	}
	release := func(file string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(v.Repos[0].Path, file), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ended := func(turn string) func(event.Event) bool { return stacktest.TurnEnded(turn) }

	// 1. PostgreSQL stops mid-turn: a send fails (503), and succeeds
	// once it is back, sent again with the same idempotency key.
	pg.Stop()
	key := client.NewIdempotencyKey()
	const text1 = "msg during the database outage"
	_, err = c.SendOnce(ctx, id, key, text1, "")
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Fatalf("a send while PostgreSQL is down: %v, want a 503\nserve's log:\n%s", err, s.stderr)
	}
	pg.Start()
	m1, err := c.SendOnce(ctx, id, key, text1, "")
	if err != nil {
		t.Fatalf("the send again, PostgreSQL back: %v\nserve's log:\n%s", err, s.stderr)
	}
	release("go1")
	readUntil("turn t1 to end", ended("t1"))
	readUntil("turn t2 (the message) to end", ended("t2"))

	// 2. NATS stops mid-turn: sends go on (the store is the truth), the
	// follower reads on through --nats-follow.
	if _, err := c.Send(ctx, id, "long task two", ""); err != nil {
		t.Fatal(err)
	}
	readUntil("t3's bash tool to start", func(ev event.Event) bool { return ev.Turn == "t3" && toolStarted(ev) })
	ns.stop()
	const text2 = "msg during the bus outage"
	m2, err := c.SendOnce(ctx, id, client.NewIdempotencyKey(), text2, "")
	if err != nil {
		t.Fatalf("a send while NATS is down: %v\nserve's log:\n%s", err, s.stderr)
	}
	readUntil("the message queued while NATS is down", func(ev event.Event) bool {
		q, ok := ev.Data.(event.MessageQueued)
		return ok && q.MessageID == m2.ID
	})
	ns.start()
	release("go2")
	readUntil("turn t3 to end", ended("t3"))
	readUntil("turn t4 (the message) to end", ended("t4"))

	// Each turn finished; each message was delivered once; the store's
	// log is gapless and is what the follower saw.
	delivered := map[string]int{}
	for _, ev := range seen {
		switch p := ev.Data.(type) {
		case event.MessageDelivered:
			delivered[p.MessageID]++
		case event.TurnFailed, event.TurnCancelled:
			t.Errorf("turn %s: %s %+v", ev.Turn, ev.Type(), p)
		}
	}
	for _, m := range []string{m1.ID, m2.ID} {
		if delivered[m] != 1 {
			t.Errorf("message %s delivered %d times, want once (all: %v)", m, delivered[m], delivered)
		}
	}
	if len(delivered) != 4 {
		t.Errorf("delivered %v: want the 4 messages (2 prompts, 2 sent during the outages)", delivered)
	}
	all := storedLog(t, ctx, c, id)
	for i, ev := range all {
		if ev.Seq != int64(i+1) {
			t.Fatalf("the store's log: event %d has seq %d", i+1, ev.Seq)
		}
	}
	if len(seen) < len(all) { // what followed t4's end (the session going idle)
		last := all[len(all)-1].Seq
		readUntil(fmt.Sprintf("seq %d, the store's last", last), func(ev event.Event) bool { return ev.Seq == last })
	}
	for i, ev := range seen {
		if i >= len(all) || ev.Type() != all[i].Type() || ev.Turn != all[i].Turn {
			t.Fatalf("the follower's event %d is not the store's: %s %s", i+1, ev.Type(), ev.Turn)
		}
	}
	v, err = c.GetSession(ctx, id)
	if err != nil || len(v.Queue) != 0 || v.Turns != 4 {
		t.Errorf("the session at the end: %+v %v", v, err)
	}
}

// natsTestServer is a NATS server with JetStream in this process, which
// the test may stop and start again on the same port and store.
type natsTestServer struct {
	t    testing.TB
	dir  string
	port int
	s    *natsserver.Server
}

func startNATSServer(t testing.TB) *natsTestServer {
	n := &natsTestServer{t: t, dir: t.TempDir(), port: -1}
	n.start()
	t.Cleanup(n.stop)
	return n
}

// start starts it (again: on the same port and store directory) and
// waits until it accepts connections.
func (n *natsTestServer) start() {
	n.t.Helper()
	s, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: n.port, JetStream: true, StoreDir: n.dir, NoLog: true, NoSigs: true,
	})
	if err != nil {
		n.t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(time.Minute) {
		n.t.Fatal("the NATS server did not start")
	}
	n.s = s
	n.port = s.Addr().(*net.TCPAddr).Port
}

// stop shuts it down and waits until it is down.
func (n *natsTestServer) stop() {
	if n.s == nil {
		return
	}
	n.s.Shutdown()
	n.s.WaitForShutdown()
	n.s = nil
}

func (n *natsTestServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }
