package netlab_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/netlab"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/wire"
)

// failFastBudget is the nodes' --store-timeout in TestFailFast.
const failFastBudget = 2 * time.Second

// failFastSlack is what an answer may take beyond the budget: the
// request's own work, the network, a loaded machine.
const failFastSlack = 1500 * time.Millisecond

// pgFrozenFor is how long TestFailFast keeps PostgreSQL frozen (issue
// 26's 20 s).
const pgFrozenFor = 20 * time.Second

// call is one API call of TestFailFast, as the client saw it.
type call struct {
	node, what string
	status     int
	retryAfter string
	took       time.Duration
	err        error
}

// TestFailFast is issue 26's "fail fast, follow the owner" on separate
// machines, three nodes. PostgreSQL frozen 20 s: every API call (list,
// get, events, send, create) through every node answers within the store
// budget (503 with Retry-After, or success), /readyz says the store does
// not answer; after the thaw no message is lost or stored twice and the
// logs have no gap. Then the owner of a session is paused (SIGSTOP) past
// its lease: a send forwarded to it meanwhile succeeds through the new
// owner within a second of the lease moving, and followers through the
// other nodes see every event, without a reconnect, within a second.
func TestFailFast(t *testing.T) {
	lab := netlab.New(t)
	simURL := startSim(t, lab, failoverScript)
	nodes := startNodes(t, lab, simURL, 3, "--lease-ttl="+failoverTTL.String(), "--store-timeout="+failFastBudget.String())
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	repo := filepath.Join(lab.SharedDir(), "repo")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tok := nodes[0].AdminToken()
	clients := labClients(t, nodes)
	leaseOf := leaseReader(t, ctx, lab)

	// One idle session per node.
	sessions := map[string]*failSession{}
	var ids []string
	for _, n := range nodes {
		v := createSession(t, ctx, clients[n.Name], wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "msg hello"})
		sessions[v.ID] = &failSession{id: v.ID, owner: n.Name, interrupted: []string{}}
		ids = append(ids, v.ID)
		followUntil(t, clients[n.Name], v.ID, "turn t1 to end", stacktest.TurnEnded("t1"))
	}

	// PostgreSQL frozen.
	raw := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 60 * time.Second}
	do := func(node *netlab.Node, what, method, path, key string, body any) call {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequestWithContext(ctx, method, node.URL+path, rd)
		req.Header.Set("Authorization", "Bearer "+tok)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		start := time.Now()
		resp, err := raw.Do(req)
		c := call{node: node.Name, what: what, took: time.Since(start), err: err}
		if err == nil {
			c.status, c.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
			resp.Body.Close() // a stream: its headers are its answer
		}
		return c
	}
	type keyed struct{ session, key, text string }
	var sent []keyed
	var sentMu sync.Mutex
	var calls []call
	var callsMu sync.Mutex
	lab.FreezePostgres()
	frozen := time.Now()
	var wg sync.WaitGroup
	round := 0
	for time.Since(frozen) < pgFrozenFor-3*time.Second {
		round++
		for i, n := range nodes {
			id := ids[(i+1)%len(ids)] // a session another node owns
			k := keyed{session: id, key: fmt.Sprintf("frozen-%d-%s", round, n.Name), text: fmt.Sprintf("msg frozen %d via %s", round, n.Name)}
			sentMu.Lock()
			sent = append(sent, k)
			sentMu.Unlock()
			for _, c := range []struct {
				what, method, path, key string
				body                    any
			}{
				{"list", http.MethodGet, "/v1/sessions", "", nil},
				{"get", http.MethodGet, "/v1/sessions/" + id, "", nil},
				{"events", http.MethodGet, "/v1/sessions/" + id + "/events", "", nil},
				{"log", http.MethodGet, "/v1/sessions/" + id + "/log", "", nil},
				{"send", http.MethodPost, "/v1/sessions/" + id + "/messages", k.key, wire.SendRequest{Text: k.text}},
				{"create", http.MethodPost, "/v1/sessions", "", wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "msg created while frozen"}},
				{"readyz", http.MethodGet, "/readyz", "", nil},
			} {
				wg.Go(func() {
					r := do(n, c.what, c.method, c.path, c.key, c.body)
					callsMu.Lock()
					calls = append(calls, r)
					callsMu.Unlock()
				})
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	wg.Wait()
	select {
	case <-ctx.Done():
	case <-time.After(pgFrozenFor - time.Since(frozen)):
	}
	lab.ThawPostgres()
	t.Logf("OBSERVED PostgreSQL frozen %s (--store-timeout %s): %d calls in %d rounds", time.Since(frozen).Round(time.Millisecond), failFastBudget, len(calls), round)
	slowest := map[string]time.Duration{}
	outcomes := map[string]map[int]int{}
	for _, c := range calls {
		slowest[c.what] = max(slowest[c.what], c.took)
		if outcomes[c.what] == nil {
			outcomes[c.what] = map[int]int{}
		}
		outcomes[c.what][c.status]++
		switch {
		case c.err != nil:
			t.Errorf("%s through %s, PostgreSQL frozen: %v after %s", c.what, c.node, c.err, c.took)
		case c.took > failFastBudget+failFastSlack:
			t.Errorf("%s through %s, PostgreSQL frozen: answered %d after %s; the budget is %s", c.what, c.node, c.status, c.took.Round(time.Millisecond), failFastBudget)
		case c.status == http.StatusServiceUnavailable && c.retryAfter == "":
			t.Errorf("%s through %s, PostgreSQL frozen: 503 without Retry-After", c.what, c.node)
		case c.status >= 300 && c.status != http.StatusServiceUnavailable:
			t.Errorf("%s through %s, PostgreSQL frozen: %d, want success or 503", c.what, c.node, c.status)
		}
	}
	if outcomes["readyz"][http.StatusServiceUnavailable] == 0 {
		t.Errorf("/readyz never said the store does not answer while PostgreSQL was frozen: %v", outcomes["readyz"])
	}
	for what, d := range slowest {
		t.Logf("OBSERVED PostgreSQL frozen: %-6s slowest answer %s; statuses %v", what, d.Round(time.Millisecond), outcomes[what])
	}

	// After the thaw: every send answered, once; the logs whole.
	for _, k := range sent {
		var m *wire.Message
		var err error
		for attempt := 0; attempt < 20; attempt++ {
			if m, err = clients["a"].SendOnce(ctx, k.session, k.key, k.text, ""); err == nil {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
		if err != nil {
			t.Fatalf("retrying send %s after the thaw: %v", k.key, err)
		}
		sessions[k.session].queued = append(sessions[k.session].queued, m.ID)
	}
	for _, id := range ids {
		s := sessions[id]
		waitDelivered(t, ctx, clients["a"], s)
		evs := storedEvents(t, ctx, clients["a"], id)
		// A stall past the TTL moves leases (issue 26's takeover work,
		// not this test's): a turn running then may be interrupted.
		// Its messages are still delivered once.
		s.interrupted = interruptedTurns(evs)
		if len(s.interrupted) > 0 {
			t.Logf("OBSERVED PostgreSQL frozen: session %s: turns %v interrupted after the thaw (leases moved)", id, s.interrupted)
		}
		checkEvents(t, s, evs)
	}
	checkForwardedAudit(t, ctx, clients["a"], simURL)

	// The owner of a session pauses: a send through another node goes to
	// the new owner once the lease moves; followers through the others
	// go on without a reconnect.
	s := sessions[ids[0]]
	byName := map[string]*netlab.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	ownerName := leaseOf(s.id) // a's unless the freeze moved it
	owner := byName[ownerName]
	if owner == nil {
		t.Fatalf("session %s: its lease is %q's, want a node's", s.id, ownerName)
	}
	var others []string
	for _, n := range nodes {
		if n.Name != ownerName {
			others = append(others, n.Name)
		}
	}
	type seen struct {
		ev event.Event
		at time.Time
	}
	followers := map[string]chan seen{}
	streams := map[string]*client.Stream{}
	last, err := clients[others[0]].EventLog(ctx, s.id, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range others {
		st := clients[name].Events(ctx, s.id, client.StreamOptions{After: last.LastSeq})
		defer st.Close()
		streams[name] = st
		ch := make(chan seen, 1024)
		followers[name] = ch
		wg.Go(func() {
			defer close(ch)
			for {
				ev, err := st.Next()
				if err != nil {
					return
				}
				ch <- seen{ev, time.Now()}
			}
		})
	}
	owner.Pause()
	paused := time.Now()
	sendDone := make(chan time.Time, 1)
	var m *wire.Message
	go func() {
		var err error
		m, err = clients[others[0]].SendOnce(ctx, s.id, "paused-1", "msg while its owner is paused", "")
		if err != nil {
			t.Errorf("a send through %s while %s is paused: %v", others[0], ownerName, err)
		}
		sendDone <- time.Now()
	}()
	newOwner := waitLeaseOn(t, ctx, leaseOf, s.id, others...)
	moved := time.Now()
	answered := <-sendDone
	t.Logf("OBSERVED SIGSTOP: %s paused; the lease moved to %s %s after the pause; the send through %s answered %s after the move",
		ownerName, newOwner, moved.Sub(paused).Round(time.Millisecond), others[0], answered.Sub(moved).Round(time.Millisecond))
	if answered.Sub(moved) > time.Second {
		t.Errorf("the send through %s answered %s after the lease moved, want within 1s", others[0], answered.Sub(moved))
	}
	if m != nil {
		s.queued = append(s.queued, m.ID)
	}
	for name, ch := range followers {
		var got []seen
		delivered := false
		for x := range ch {
			if x.ev.Live > 0 {
				continue // a live piece: not stored, it carries the seq before it
			}
			got = append(got, x)
			if d, ok := x.ev.Data.(event.MessageDelivered); ok && m != nil && d.MessageID == m.ID {
				delivered = true
			}
			if _, ok := x.ev.Data.(event.TurnFinished); ok && delivered {
				break
			}
		}
		var worst time.Duration
		for i, x := range got {
			if x.ev.Seq != last.LastSeq+int64(i)+1 {
				t.Errorf("follower through %s: event %d has seq %d, want %d (a gap or a repeat)", name, i, x.ev.Seq, last.LastSeq+int64(i)+1)
				break
			}
			if !x.ev.Time.IsZero() {
				worst = max(worst, x.at.Sub(x.ev.Time))
			}
		}
		t.Logf("OBSERVED SIGSTOP: follower through %s got %d events after the lease moved, the latest %s after it was written; %d reconnects",
			name, len(got), worst.Round(time.Millisecond), streams[name].Reconnects())
		if worst > time.Second {
			t.Errorf("follower through %s saw an event %s after it was written, want within 1s", name, worst)
		}
		if len(got) == 0 {
			t.Errorf("follower through %s saw nothing after the lease moved", name)
		}
		streams[name].Close()
	}
	owner.Resume()
	wg.Wait()
	waitDelivered(t, ctx, clients[newOwner], s)
	checkEvents(t, s, storedEvents(t, ctx, clients[newOwner], s.id))
}

// interruptedTurns lists the turns a log says were interrupted.
func interruptedTurns(evs []event.Event) []string {
	out := []string{}
	for _, ev := range evs {
		if p, ok := ev.Data.(event.TurnFailed); ok && p.Kind == event.FailInterrupted {
			out = append(out, ev.Turn)
		}
	}
	return out
}

// waitDelivered waits until every message of s is delivered and its
// turn ended.
func waitDelivered(t *testing.T, ctx context.Context, c *client.Client, s *failSession) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		evs := storedEvents(t, ctx, c, s.id)
		delivered, lastDelivered, lastEnded := 0, -1, -1
		for i, ev := range evs {
			switch ev.Data.(type) {
			case event.MessageDelivered:
				delivered, lastDelivered = delivered+1, i
			case event.TurnFinished, event.TurnFailed, event.TurnCancelled:
				lastEnded = i
			}
		}
		if delivered >= len(s.queued)+1 && lastEnded > lastDelivered {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s: %d messages delivered, want %d, and its last turn ended", s.id, delivered, len(s.queued)+1)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// checkForwardedAudit: the sends node a forwarded to the sessions' owners
// are in the owners' audit entries with the test's own address (the host
// side of the lab's bridge, where the sim listens too), not a's, and name
// a as the forwarder.
func checkForwardedAudit(t *testing.T, ctx context.Context, c *client.Client, simURL string) {
	t.Helper()
	u, err := url.Parse(simURL)
	if err != nil {
		t.Fatal(err)
	}
	host := u.Hostname()
	forwarded := 0
	for cursor := ""; ; {
		page, err := c.Audit(ctx, client.AuditOptions{Action: "session.send", Limit: 500, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range page.Entries {
			if !strings.Contains(string(en.Detail), `"forwarded_by":"a-`) || en.Result != "ok" {
				continue
			}
			forwarded++
			if en.Remote != host {
				t.Errorf("a send node a forwarded: audit entry %+v (%s) records %s, want the client's %s", en, en.Detail, en.Remote, host)
			}
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if forwarded == 0 {
		t.Error("no audit entry of a send node a forwarded")
	}
	t.Logf("OBSERVED audit: %d sends forwarded by node a recorded with the client's address %s", forwarded, host)
}
