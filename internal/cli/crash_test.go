package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
	"github.com/harvest-dev/harvest/wire"
)

// crashScript: "sleeper task" runs a bash tool that would append to
// late.txt in the workspace after ~9 s (if anything let it live that
// long); "drain task" a tool that is done 2 s after it starts; "endless
// task" one that never ends; "msg ..." gets "ok". The sleeps carry odd
// fractions so that the test finds exactly its own processes.
const crashScript = `
rules:
  - name: drained
    when: {tool_result: "drain-done", last_user: "drain task"}
    reply: {text: "finished during the drain", usage: {input_tokens: 100, output_tokens: 10}}
  - name: drain
    when: {last_user: "drain task"}
    reply:
      tool_calls: [{name: bash, input: {command: "sleep 2.0417; echo drain-done", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: endless
    when: {last_user: "endless task"}
    reply:
      tool_calls: [{name: bash, input: {command: "sleep 3141.8; echo late >> /workspace/repo/late.txt", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: sleeper
    when: {last_user: "sleeper task"}
    reply:
      tool_calls: [{name: bash, input: {command: "sleep 9.31417; echo late >> /workspace/repo/late.txt", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: msg
    when: {last_user_regexp: "^msg"}
    reply: {text: "ok", usage: {input_tokens: 100, output_tokens: 10}}
`

// generation is one `harvest serve` of a test that restarts it.
type generation struct {
	n     int
	proc  *serveProc
	c     *client.Client
	start chan struct{} // closed when the senders may send their share
	next  chan struct{} // closed when the next generation serves
	// killed is set just before the server is sent SIGKILL: a request
	// begun while it was not set was sent to a live server.
	killed atomic.Bool
}

// TestServeKill9Repeated kills `harvest serve` with SIGKILL five times
// while clients send messages concurrently, retrying each send with its
// idempotency key until it is answered (and once more after that), and
// while a turn of another session runs a bash tool that would write to
// the workspace 9 s later. After every restart:
//
//   - the interrupted turn's turn.failed (kind interrupted) is journaled
//     only once no process of its tool runs any more;
//
// and at the end:
//
//   - some sends were cut by a kill (sent to the live server, answered by
//     no one), and each of them, retried with its idempotency key on the
//     next server, landed exactly once: one stored message, the one the
//     retry was given (a test where no kill cut a send proves nothing of
//     this, and fails);
//   - every send got one message: no text is stored twice, a retried key
//     always gave back the same message, across restarts too;
//   - every stored message has exactly one message.queued event, and
//     every session's seqs are 1..N;
//   - every message was delivered, in one turn each;
//   - the killed tools never wrote to the workspace, and none runs.
func TestServeKill9Repeated(t *testing.T) {
	testServeKill9Repeated(t, newServeEnvWith(t, crashScript))
}

func testServeKill9Repeated(t *testing.T, e *serveEnv) {
	const (
		kills   = 5
		senders = 3
		perGen  = 6 // sends per sender per generation
		total   = perGen * (kills + 1)
	)
	repo := filepath.Join(testbin.TempDir(t), "repo")
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// The sleeper's command line (processesWith reads /proc's raw form).
	sleeper := "sleep\x009.31417\x00"

	var cur atomic.Pointer[generation]
	first := e.start()
	cur.Store(&generation{proc: first, c: e.client(first), start: make(chan struct{}), next: make(chan struct{})})
	addr := strings.TrimPrefix(first.url, "http://")
	restart := func() *generation {
		old := cur.Load()
		p := e.start("--listen", addr)
		g := &generation{n: old.n + 1, proc: p, c: e.client(p), start: make(chan struct{}), next: make(chan struct{})}
		cur.Store(g)
		close(old.next)
		return g
	}

	c := cur.Load().c
	sleepy, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "sleeper task"})
	if err != nil {
		t.Fatal(err)
	}
	busy, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "msg hello"})
	if err != nil {
		t.Fatal(err)
	}

	// The senders: each sends `total` messages to busy, perGen per
	// generation, retrying on the next generation when a send fails.
	var (
		mu      sync.Mutex
		byKey   = map[string]string{} // key -> message id
		textOf  = map[string]string{} // key -> text
		keys    []string
		progres = make(chan struct{}, senders*total)
		failed  atomic.Int64 // sends that failed: the server was down, or killed under them
		// cut: the keys of sends that were in flight to a live server
		// when it was killed, by the generation that was killed; and
		// the time of the kill.
		cut    = map[string]int{}
		killAt = map[int]time.Time{}
		wg     sync.WaitGroup
	)
	send := func(key, text string) bool {
		for {
			g := cur.Load()
			live := !g.killed.Load()
			m, err := g.c.SendOnce(ctx, busy.ID, key, text, "")
			if err == nil {
				mu.Lock()
				defer mu.Unlock()
				if prev, ok := byKey[key]; ok && prev != m.ID {
					t.Errorf("key %s gave message %s, then %s", key, prev, m.ID)
				}
				if _, ok := byKey[key]; !ok {
					keys = append(keys, key)
					textOf[key] = text
				}
				byKey[key] = m.ID
				return true
			}
			if st := client.StatusOf(err); st != 0 && st != http.StatusServiceUnavailable {
				t.Errorf("sending %q: %v", text, err)
				return false
			}
			// The server was killed under the send (or was down): did it
			// store it? The retry on the next one says.
			failed.Add(1)
			if live {
				mu.Lock()
				if _, ok := cut[key]; !ok {
					cut[key] = g.n
				}
				mu.Unlock()
			}
			select {
			case <-g.next:
			case <-ctx.Done():
				t.Errorf("sending %q: no server came back: %v", text, err)
				return false
			}
		}
	}
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range total {
				g := cur.Load()
				// A generation's share, once the test says go.
				for g.n < i/perGen {
					select {
					case <-g.next:
					case <-ctx.Done():
						return
					}
					g = cur.Load()
				}
				select {
				case <-g.start:
				case <-ctx.Done():
					return
				}
				key := client.NewIdempotencyKey()
				text := fmt.Sprintf("msg %d-%d", s, i)
				// Sent, then sent again as if the answer had been lost.
				if !send(key, text) || !send(key, text) {
					return
				}
				progres <- struct{}{}
			}
		}()
	}
	defer wg.Wait()
	defer cancel()

	for round := range kills {
		g := cur.Load()
		turn := fmt.Sprintf("t%d", round+1)
		if round > 0 {
			if _, err := g.c.SendOnce(ctx, sleepy.ID, client.NewIdempotencyKey(), "sleeper task", ""); err != nil {
				t.Fatal(err)
			}
		}
		follow(t, g.c, sleepy.ID, 0, turn+"'s tool to start", func(ev event.Event) bool {
			return ev.Turn == turn && ev.Type() == event.TypeToolStarted
		})
		testbin.WaitFor(t, time.Minute, "the sleeper to run", func() bool { return len(testbin.ProcsWith(sleeper)) > 0 })
		// Kill in the middle of the senders' share of this generation.
		close(g.start)
		for range senders * perGen / 2 {
			select {
			case <-progres:
			case <-ctx.Done():
				t.Fatal("the senders made no progress")
			}
		}
		g.killed.Store(true)
		mu.Lock()
		killAt[g.n] = time.Now()
		mu.Unlock()
		if err := g.proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		g.proc.wait()
		if len(testbin.ProcsWith(sleeper)) == 0 {
			t.Fatal("the sleeper died with the server: the test proves nothing")
		}
		g = restart()
		// The turn is reported interrupted only once its tool is dead.
		seen := follow(t, g.c, sleepy.ID, 0, turn+" to end", stacktest.TurnEnded(turn))
		last := seen[len(seen)-1]
		if f, ok := last.Data.(event.TurnFailed); !ok || f.Kind != "interrupted" {
			t.Fatalf("round %d: %s ended with %s %+v, want turn.failed kind interrupted", round, turn, last.Type(), last.Data)
		}
		if pids := testbin.ProcsWith(sleeper); len(pids) > 0 {
			t.Fatalf("round %d: %s was reported interrupted while its tool still runs (%q)", round, turn, pids)
		}
	}

	close(cur.Load().start)
	wg.Wait()
	if t.Failed() {
		return
	}
	mu.Lock()
	nCut := len(cut)
	mu.Unlock()
	t.Logf("%d sends failed across the %d kills, %d of them sent to a live server and cut by its kill; all retried", failed.Load(), kills, nCut)
	if nCut == 0 {
		t.Fatalf("no send was in flight when a server was killed: the test proved nothing about a send cut by a kill (%d kills)", kills)
	}
	g := cur.Load()
	// Every key once more, on the last server: the same messages, and
	// another text under a used key is refused.
	mu.Lock()
	retry := append([]string(nil), keys...)
	want := map[string]string{}
	for k, id := range byKey {
		want[k] = id
	}
	mu.Unlock()
	if len(retry) != senders*total {
		t.Fatalf("%d keys answered, want %d", len(retry), senders*total)
	}
	for _, k := range retry {
		m, err := g.c.SendOnce(ctx, busy.ID, k, textOf[k], "")
		if err != nil || m.ID != want[k] {
			t.Fatalf("key %s again on the last server: %+v, %v; want message %s", k, m, err, want[k])
		}
		if _, err := g.c.SendOnce(ctx, busy.ID, k, "msg retried", ""); client.StatusOf(err) != http.StatusConflict {
			t.Fatalf("key %s with another text on the last server: %v, want 409", k, err)
		}
	}
	// Every message delivered (the prompt's included), then its turn ended.
	delivered := map[string]bool{}
	lastTurn := ""
	follow(t, g.c, busy.ID, 0, "every message delivered and its turn ended", func(ev event.Event) bool {
		if d, ok := ev.Data.(event.MessageDelivered); ok {
			delivered[d.MessageID] = true
			if len(delivered) == senders*total+1 {
				lastTurn = ev.Turn
			}
		}
		return lastTurn != "" && stacktest.TurnEnded(lastTurn)(ev)
	})
	ws, err := g.c.GetSession(ctx, sleepy.ID)
	if err != nil {
		t.Fatal(err)
	}
	g.proc.cmd.Process.Signal(syscall.SIGTERM)
	if err := g.proc.wait(); err != nil {
		t.Fatalf("the last server after SIGTERM: %v\n%s", err, g.proc.stderr)
	}

	st := e.openStore(ctx)
	msgs, err := st.Messages(ctx, busy.ID)
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]int{}
	for _, m := range msgs {
		texts[m.Text]++
		if m.State != store.MessageDelivered {
			t.Errorf("message %s (%q) is %s at the end", m.ID, m.Text, m.State)
		}
	}
	for text, n := range texts {
		if n > 1 {
			t.Errorf("%q was stored %d times", text, n)
		}
	}
	if len(msgs) != senders*total+1 {
		t.Errorf("%d messages stored, want %d", len(msgs), senders*total+1)
	}
	for _, id := range want {
		if !containsMessage(msgs, id) {
			t.Errorf("message %s, given to a send, is not stored", id)
		}
	}
	// Each send a kill cut, retried with its key, landed once: one stored
	// message with its text, the one its retry was given. Stored by the
	// killed server (its retry was given that message back) or by the
	// retry itself, whichever the kill allowed.
	storedBefore := 0
	for key, n := range cut {
		var same []*store.Message
		for _, m := range msgs {
			if m.Text == textOf[key] {
				same = append(same, m)
			}
		}
		if len(same) != 1 || same[0].ID != want[key] {
			t.Errorf("the send of %q (key %s), cut by kill %d: stored %d times, want once as message %s", textOf[key], key, n+1, len(same), want[key])
			continue
		}
		if same[0].CreatedAt.Before(killAt[n]) {
			storedBefore++
		}
	}
	t.Logf("of the %d sends cut by a kill, %d had been stored before it (the retry got that message back), %d were stored by the retry", len(cut), storedBefore, len(cut)-storedBefore)
	for _, id := range []string{busy.ID, sleepy.ID} {
		checkQueuedEvents(t, st, id)
	}
	if len(ws.Repos) == 0 {
		t.Fatalf("the sleeper's session has no repositories: %+v", ws)
	}
	if _, err := os.Stat(filepath.Join(ws.Repos[0].Path, "late.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an interrupted tool wrote late.txt in the workspace (%v)", err)
	}
	if pids := testbin.ProcsWith(sleeper); len(pids) > 0 {
		t.Errorf("interrupted tools still run: %q", pids)
	}
}

func containsMessage(msgs []*store.Message, id string) bool {
	for _, m := range msgs {
		if m.ID == id {
			return true
		}
	}
	return false
}

// checkQueuedEvents: the session's seqs are 1..N, and each of its messages
// has exactly one message.queued event.
func checkQueuedEvents(t *testing.T, st store.Store, id string) {
	t.Helper()
	queued := map[string]int{}
	for _, ev := range stacktest.CheckGapless(t, st, id) {
		if q, ok := ev.Data.(event.MessageQueued); ok {
			queued[q.MessageID]++
		}
	}
	msgs, err := st.Messages(testbin.Context(t), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if queued[m.ID] != 1 {
			t.Errorf("session %s: message %s (%q) has %d message.queued events, want 1", id, m.ID, m.Text, queued[m.ID])
		}
	}
}

// goneWithin waits up to d for the processes whose command line contains
// pattern to be gone (a killed tree dies a moment after its kill is sent)
// and returns those still there.
func goneWithin(d time.Duration, pattern string) []string {
	deadline := time.Now().Add(d)
	for {
		ps := testbin.ProcsWith(pattern)
		if len(ps) == 0 || time.Now().After(deadline) {
			return ps
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestServeSIGTERMDrains: SIGTERM while a turn is 2 s from done lets it
// finish (turn.finished, not interrupted) while the API keeps answering:
// reads and the open event stream work, new sessions and messages get 503
// with Retry-After, and the message queued behind the turn stays queued
// for the next start, which delivers it. Then a turn that would never end
// is interrupted once a short --shutdown-grace is over, serve exits soon
// after, and no process of that turn survives; and a second signal
// interrupts at once, whatever is left of a long grace.
func TestServeSIGTERMDrains(t *testing.T) {
	e := newServeEnvWith(t, crashScript)
	repo := filepath.Join(testbin.TempDir(t), "repo")
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	p := e.start()
	c := e.client(p)
	v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "drain task"})
	if err != nil {
		t.Fatal(err)
	}
	stream := c.Events(ctx, v.ID, client.StreamOptions{})
	defer stream.Close()
	for {
		ev, err := stream.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Turn == "t1" && ev.Type() == event.TypeToolStarted {
			break
		}
	}
	queued, err := c.Send(ctx, v.ID, "msg queued behind", "")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !p.stderr.WaitFor("harvest: draining", 30*time.Second) {
		t.Fatalf("serve did not say it drains:\n%s", p.stderr)
	}
	// Writes: 503 with Retry-After and a message that says why.
	tok, _ := os.ReadFile(filepath.Join(e.home, "admin-token"))
	for _, w := range []struct{ path, body string }{
		{"/v1/sessions/" + v.ID + "/messages", `{"text":"msg during the drain"}`},
		{"/v1/sessions", `{"repos":[{"source":"` + repo + `"}],"prompt":"msg"}`},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.url+w.path, strings.NewReader(w.body))
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST %s while draining: %v", w.path, err)
		}
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body.String(), server.CodeUnavailable) || !strings.Contains(body.String(), "restarting") {
			t.Fatalf("POST %s while draining: %d, Retry-After %q, %s; want 503 unavailable saying it restarts, with Retry-After", w.path, resp.StatusCode, resp.Header.Get("Retry-After"), body.String())
		}
	}
	// /readyz tells a load balancer to send new work elsewhere, and why;
	// /healthz that the process is alive (a liveness probe must not kill
	// a server finishing its turns).
	for _, probe := range []struct {
		path   string
		status int
		want   string
	}{
		{"/readyz", http.StatusServiceUnavailable, `"name":"draining","ok":false,"error":"the server is draining for a restart`},
		{"/healthz", http.StatusOK, `"status":"draining"`},
	} {
		resp, err := http.Get(p.url + probe.path)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != probe.status || !strings.Contains(body.String(), probe.want) {
			t.Fatalf("GET %s while draining: %d %s; want %d with %s", probe.path, resp.StatusCode, body.String(), probe.status, probe.want)
		}
	}
	// Reads work.
	if got, err := c.GetSession(ctx, v.ID); err != nil || len(got.Queue) != 1 || got.Queue[0].ID != queued.ID {
		t.Fatalf("GET the session while draining: %+v, %v", got, err)
	}
	// The open stream sees the turn finish.
	var end event.Event
	for {
		ev, err := stream.Next()
		if err != nil {
			t.Fatalf("the stream during the drain: %v\n%s", err, p.stderr)
		}
		if stacktest.TurnEnded("t1")(ev) {
			end = ev
			break
		}
	}
	if _, ok := end.Data.(event.TurnFinished); !ok {
		t.Fatalf("t1 ended with %s %+v, want turn.finished", end.Type(), end.Data)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, p.stderr)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("serve took %s to stop after its turn ended", d)
	}

	// The next start delivers the queued message; nothing was interrupted.
	p = e.start("--shutdown-grace", "1s")
	c = e.client(p)
	seen := follow(t, c, v.ID, 0, "t2 to end", stacktest.TurnEnded("t2"))
	for _, ev := range seen {
		switch d := ev.Data.(type) {
		case event.TurnFailed:
			t.Errorf("%s failed: %+v", ev.Turn, d)
		case event.MessageDelivered:
			if ev.Turn == "t2" && d.MessageID != queued.ID {
				t.Errorf("t2 took %s, want %s", d.MessageID, queued.ID)
			}
		}
	}

	// A turn that never ends: interrupted when the grace is over.
	if _, err := c.Send(ctx, v.ID, "endless task", ""); err != nil {
		t.Fatal(err)
	}
	follow(t, c, v.ID, 0, "t3's tool to start", func(ev event.Event) bool { return ev.Turn == "t3" && ev.Type() == event.TypeToolStarted })
	endless := "sleep\x003141.8\x00"
	testbin.WaitFor(t, time.Minute, "the endless tool to run", func() bool { return len(testbin.ProcsWith(endless)) > 0 })
	start = time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, p.stderr)
	}
	if d := time.Since(start); d > 1*time.Second+closeBound {
		t.Errorf("serve took %s to stop with a grace of 1s", d)
	}
	if pids := goneWithin(time.Second, endless); len(pids) > 0 {
		t.Errorf("the interrupted turn's tool survived serve by a second: %q", pids)
	}

	// A second signal skips the rest of a long grace.
	p = e.start()
	c = e.client(p)
	follow(t, c, v.ID, 0, "t3's interruption", stacktest.TurnEnded("t3"))
	if _, err := c.Send(ctx, v.ID, "endless task", ""); err != nil {
		t.Fatal(err)
	}
	follow(t, c, v.ID, 0, "t4's tool to start", func(ev event.Event) bool { return ev.Turn == "t4" && ev.Type() == event.TypeToolStarted })
	testbin.WaitFor(t, time.Minute, "the endless tool to run", func() bool { return len(testbin.ProcsWith(endless)) > 0 })
	start = time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if !p.stderr.WaitFor("harvest: draining", 30*time.Second) {
		t.Fatalf("serve did not say it drains:\n%s", p.stderr)
	}
	p.cmd.Process.Signal(syscall.SIGINT)
	if err := p.wait(); err != nil {
		t.Fatalf("serve after two signals: %v\n%s", err, p.stderr)
	}
	if d := time.Since(start); d > closeBound {
		t.Errorf("serve took %s to stop after a second signal (the grace is 30s)", d)
	}
	if pids := goneWithin(time.Second, endless); len(pids) > 0 {
		t.Errorf("the interrupted turn's tool survived serve by a second: %q", pids)
	}

	st, err := sqlite.Open(filepath.Join(e.home, "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	evs, err := st.Events(ctx, v.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, turn := range []string{"t3", "t4"} {
		interrupted := false
		for _, ev := range evs {
			if f, ok := ev.Data.(event.TurnFailed); ok && ev.Turn == turn && f.Kind == "interrupted" {
				interrupted = true
			}
		}
		if !interrupted {
			t.Errorf("%s was not marked interrupted at shutdown", turn)
		}
	}
	checkQueuedEvents(t, st, v.ID)
}
