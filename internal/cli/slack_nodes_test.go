package cli

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sim/slacksim"
	"github.com/harvest-dev/harvest/store"
)

// TestSlackNodes: two harvest serve nodes on one PostgreSQL and NATS,
// each with the Slack app on a Socket Mode connection of its own, so the
// stand-in spreads the envelopes over both. A mention starts one session
// (on the node that got it); a reply received by the node that does not
// own it reaches it (stored once), and its turn is painted by the
// owner's watcher alone: one progress and one final message a turn. The
// owner is killed (-9) mid-turn: the other node takes the session over
// and its watcher finishes the thread, once — the interrupted turn's
// progress message edited (not a second one), one final message for it
// with ❌ on the reply that asked; a reply after it is a turn of its own,
// ✅.
func TestSlackNodes(t *testing.T) {
	se := newSlackEnvOn(t, slacksim.Options{}, slackScript, func(e *serveEnv) { e.onPostgres() })
	ns := startNATSServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	st := se.e.openStore(ctx)
	node := func(name string) *serveProc {
		return se.e.start("--repo-root", se.root, "--public-url", "http://harvest.example",
			"--slack-bot-token-file", se.tokenFile, "--slack-api-url", se.ss.APIURL(), "--slack-app-token-file", se.appFile,
			"--slack-connections", "1", "--node-id", name, "--lease-ttl="+nodeTTL.String(), "--pool", "0", "--nats", ns.url())
	}
	// Each node's connection, to tell which node got an envelope.
	procs, connOf := map[string]*serveProc{}, map[int]string{}
	for i, name := range []string{"a", "b"} {
		procs[name] = node(name)
		waitUntil(t, ctx, "node "+name+"'s Socket Mode connection", func() bool { return se.openConns() == i+1 })
		for _, c := range se.ss.Connections() {
			if connOf[c.ID] == "" {
				connOf[c.ID] = name
			}
		}
	}
	waitNodes(t, ctx, st, 2)
	defer func() {
		if t.Failed() {
			t.Logf("node a:\n%s\nnode b:\n%s", procs["a"].stderr, procs["b"].stderr)
		}
	}()
	nodeOf := func(ts string) string { // the node that got the first envelope of a message
		for _, e := range se.ss.Envelopes() {
			if e.Kind == slacksim.KindEventsAPI && strings.Contains(string(e.Payload), `"ts":"`+ts+`"`) && len(e.Attempts) > 0 {
				return connOf[e.Attempts[0].Conn]
			}
		}
		return ""
	}

	m := se.post(t, se.alice, se.mention()+" msg: look at calc", "")
	se.waitFinal(t, ctx, m.TS, 1)
	waitUntil(t, ctx, "✅ on the mention", func() bool { return slices.Contains(se.reactions(m.TS), "white_check_mark") })
	ss, err := st.ListSessions(ctx, store.SessionFilter{Owner: "slack"})
	if err != nil || len(ss) != 1 {
		t.Fatalf("sessions from Slack: %d %v, want 1", len(ss), err)
	}
	id := ss[0].ID
	l, err := st.GetLease(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	owner, _, _ := strings.Cut(l.Node, "-")
	other := map[string]string{"a": "b", "b": "a"}[owner]
	t.Logf("session %s runs on node %s", id, owner)

	// Replies, one turn each, until one reaches the node that does not
	// own the session (the stand-in gives each envelope to the connection
	// that waited longest): each turn has one progress and one final
	// message, from the owner's watcher alone.
	var replies []slacksim.Message
	for len(replies) < 6 {
		r := se.post(t, se.alice, "msg: reply "+string(rune('1'+len(replies))), m.TS)
		replies = append(replies, r)
		se.waitFinal(t, ctx, m.TS, 1+len(replies))
		waitUntil(t, ctx, "✅ on the reply", func() bool { return slices.Contains(se.reactions(r.TS), "white_check_mark") })
		if nodeOf(r.TS) == other {
			break
		}
	}
	if got := nodeOf(replies[len(replies)-1].TS); got != other {
		t.Fatalf("no reply reached node %s, which does not own the session", other)
	}
	turns := 1 + len(replies)

	// A long turn; the owner dies in the middle of it.
	long := se.post(t, se.alice, "long task", m.TS)
	waitUntil(t, ctx, "the long turn's progress message at the bash step", func() bool {
		p := progressMessages(se.botReplies(m.TS))
		return len(p) == turns+1 && strings.Contains(p[turns].Text, "bash")
	})
	if err := procs[owner].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	procs[owner].wait()
	final := se.waitFinal(t, ctx, m.TS, turns+1)
	if !strings.Contains(final.Text, "interrupted") {
		t.Errorf("the interrupted turn's final message: %q", final.Text)
	}
	if l, err := st.GetLease(ctx, id); err != nil || !strings.HasPrefix(l.Node, other+"-") {
		t.Errorf("the session's lease after the kill: %+v %v, want node %s's", l, err, other)
	}
	waitUntil(t, ctx, "❌ on the reply that asked for the long turn", func() bool { return slices.Contains(se.reactions(long.TS), "x") })
	waitUntil(t, ctx, "the long turn's progress message edited: failed", func() bool {
		p := progressMessages(se.botReplies(m.TS))
		return len(p) == turns+1 && strings.HasPrefix(p[turns].Text, "❌ Failed")
	})
	after := se.post(t, se.alice, "msg: after the kill", m.TS)
	replies = append(replies, long, after)
	if f := se.waitFinal(t, ctx, m.TS, turns+2); !strings.HasPrefix(f.Text, "ok") {
		t.Errorf("the reply after the kill: final message %q", f.Text)
	}
	waitUntil(t, ctx, "✅ on the reply after the kill", func() bool { return slices.Contains(se.reactions(after.TS), "white_check_mark") })
	turns += 2
	if _, err := se.ss.WaitEnvelopes(ctx); err != nil {
		t.Fatal(err)
	}

	finals, progress := 0, 0
	for _, r := range se.botReplies(m.TS) {
		if strings.Contains(r.Text, "http://harvest.example/sessions/") {
			finals++
		}
	}
	progress = len(progressMessages(se.botReplies(m.TS)))
	if finals != turns || progress != turns {
		for _, r := range se.botReplies(m.TS) {
			t.Logf("bot message %s: %q", r.TS, r.Text)
		}
		t.Errorf("the thread: %d final and %d progress messages, want %d and %d (one a turn, from one node)", finals, progress, turns, turns)
	}
	msgs, err := st.Messages(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, x := range msgs {
		texts = append(texts, x.Text)
	}
	if len(msgs) != 1+len(replies) {
		t.Errorf("the session's messages: %q, want the mention's and %d replies, each once", texts, len(replies))
	}
	if ss, err := st.ListSessions(ctx, store.SessionFilter{Owner: "slack"}); err != nil || len(ss) != 1 {
		t.Errorf("sessions from Slack at the end: %d %v, want 1", len(ss), err)
	}
	for _, e := range se.ss.Envelopes() {
		if e.State != slacksim.StateAcked {
			t.Errorf("envelope %s %s: %s", e.Kind, e.Topic, e.State)
		}
	}
}
