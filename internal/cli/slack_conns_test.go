package cli

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sim/slacksim"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// openConns counts the stand-in's open connections that take envelopes.
func (se *slackEnv) openConns() int {
	n := 0
	for _, c := range se.ss.Connections() {
		if !c.Closing {
			n++
		}
	}
	return n
}

// TestSlackConnections: the app keeps two Socket Mode connections
// (--slack-connections, default 2) and Slack spreads envelopes over them.
// Mid-turn, a reply's ack is lost with its connection: Slack sends it
// again on the other, the app reconnects the lost one, the reply is a
// follow-up once. Then a mention's two envelopes both lose their acks
// and both connections: both come again after the app reconnects, one
// session starts, one final message. Every ack goes back on the
// connection its envelope came on.
func TestSlackConnections(t *testing.T) {
	se := newSlackEnv(t, slacksim.Options{})
	se.serve(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	waitUntil(t, ctx, "two Socket Mode connections", func() bool { return se.openConns() == 2 })

	m := se.post(t, se.alice, se.mention()+" long task in calc", "")
	var progress slacksim.Message
	waitUntil(t, ctx, "the progress message at the bash step", func() bool {
		for _, r := range se.botReplies(m.TS) {
			if buttons(r)["harvest-stop"] != "" && strings.Contains(r.Text, "bash") {
				progress = r
				return true
			}
		}
		return false
	})
	// Only the reply's ack: the bot's own edits are envelopes too.
	se.ss.LoseAcks(slacksim.LoseSpec{N: 1, Containing: "msg: one"})
	r := se.post(t, se.alice, "msg: one", m.TS)
	waitUntil(t, ctx, "👀 on the reply", func() bool { return slices.Contains(se.reactions(r.TS), "eyes") })
	waitUntil(t, ctx, "the reply's envelope acked on its second attempt", func() bool {
		for _, e := range se.ss.Envelopes() {
			if strings.Contains(string(e.Payload), r.TS) && e.State == slacksim.StateAcked {
				return len(e.Attempts) == 2
			}
		}
		return false
	})
	waitUntil(t, ctx, "two connections again", func() bool { return se.openConns() == 2 })

	se.ss.LoseAcks(slacksim.LoseSpec{N: 2, Containing: "fix calc zq7"})
	m2 := se.post(t, se.alice, se.mention()+" fix calc zq7", "")
	final2 := se.waitFinal(t, ctx, m2.TS, 1)
	if !strings.Contains(final2.Text, "Fixed calc") {
		t.Errorf("the second mention's final message: %q", final2.Text)
	}
	waitUntil(t, ctx, "✅ on the second mention", func() bool { return slices.Contains(se.reactions(m2.TS), "white_check_mark") })

	// Stop the long turn; the queued reply waits for the next message,
	// and both are the next turn's.
	if err := se.ss.Click(slacksim.ClickSpec{User: se.alice.ID, Channel: se.general.ID, TS: progress.TS, ActionID: "harvest-stop"}); err != nil {
		t.Fatal(err)
	}
	if f := se.waitFinal(t, ctx, m.TS, 1); !strings.HasPrefix(f.Text, "Stopped") {
		t.Errorf("the stopped turn's final message: %q", f.Text)
	}
	r2 := se.post(t, se.alice, "msg: two", m.TS)
	if f := se.waitFinal(t, ctx, m.TS, 2); !strings.HasPrefix(f.Text, "ok") {
		t.Errorf("the follow-up's final message: %q", f.Text)
	}
	waitUntil(t, ctx, "✅ on the last reply", func() bool { return slices.Contains(se.reactions(r2.TS), "white_check_mark") })
	waitUntil(t, ctx, "two connections at the end", func() bool { return se.openConns() == 2 })

	es, err := se.ss.WaitEnvelopes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	again, conns := 0, map[int]bool{}
	for _, e := range es {
		last := e.Attempts[len(e.Attempts)-1]
		if e.State != slacksim.StateAcked || last.AckConn != last.Conn {
			t.Errorf("envelope %s %s: %s, last attempt on connection %d acked on %d", e.Kind, e.Topic, e.State, last.Conn, last.AckConn)
		}
		if len(e.Attempts) > 1 {
			again++
		}
		conns[e.Attempts[0].Conn] = true
	}
	if again != 3 {
		t.Errorf("envelopes sent again: %d, want 3 (the reply's, the mention's two)", again)
	}
	if len(conns) < 2 {
		t.Errorf("the envelopes went to connections %v: want them spread", conns)
	}
	ss := se.slackSessions(t, ctx)
	if len(ss) != 2 {
		t.Fatalf("sessions from Slack: %d, want 2", len(ss))
	}
	st, err := sqlite.Open(filepath.Join(se.e.home, "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, s := range ss {
		msgs, err := st.Messages(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		var texts []string
		for _, x := range msgs {
			texts = append(texts, x.Text)
		}
		want := 1
		if strings.Contains(s.Title, "long task") {
			want = 3
		}
		if len(msgs) != want {
			t.Errorf("session %q: messages %q, want %d (each once)", s.Title, texts, want)
		}
	}
	if n := len(se.botReplies(m2.TS)); n != 2 {
		t.Errorf("the second mention's thread: %d bot messages, want 2 (progress, final)", n)
	}
}

// TestSlackConnectionsFlag: --slack-connections outside 1..10 is refused
// with what to give.
func TestSlackConnectionsFlag(t *testing.T) {
	se := newSlackEnv(t, slacksim.Options{})
	for _, n := range []string{"0", "11"} {
		cmd := exec.Command(testbin.Harvest(t), "serve", "--listen", "127.0.0.1:0", "--quiet", "--repo-root", se.root,
			"--slack-bot-token-file", se.tokenFile, "--slack-app-token-file", se.appFile, "--slack-api-url", se.ss.APIURL(), "--slack-connections", n)
		cmd.Env = se.e.env
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--slack-connections "+n+": give 1 to 10") {
			t.Errorf("serve --slack-connections %s: %v, %s; want a refusal saying 1 to 10", n, err, out)
		}
	}
}
