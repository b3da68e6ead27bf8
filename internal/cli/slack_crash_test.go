package cli

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sim/slacksim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// holdSlackEnv makes harvest serve's Slack app hold every event it
// records instead of acting on it (slackbot's test hook).
const holdSlackEnv = "HARVEST_TEST_SLACK_HOLD_EVENTS=1"

// serveHolding starts harvest serve whose Slack app records and
// acknowledges events but holds them unhandled (hold), or a plain one.
func (se *slackEnv) serveHolding(t *testing.T, hold bool) {
	t.Helper()
	se.e.env = slices.DeleteFunc(se.e.env, func(s string) bool { return s == holdSlackEnv })
	if hold {
		se.e.env = append(se.e.env, holdSlackEnv)
	}
	se.serve(t, false, "--shutdown-grace", "0s")
}

// waitAcked waits until Slack has had the acknowledgement of every
// event about the message ts (its app_mention and message twins).
func (se *slackEnv) waitAcked(t *testing.T, ctx context.Context, ts string) {
	t.Helper()
	_, err := se.ss.WaitEnvelope(ctx, func(es []slacksim.Envelope) bool {
		n := 0
		for _, e := range es {
			if e.Kind != slacksim.KindEventsAPI || !strings.Contains(string(e.Payload), ts) {
				continue
			}
			if e.State != slacksim.StateAcked {
				return false
			}
			n++
		}
		return n > 0
	})
	if err != nil {
		t.Fatalf("waiting for the acknowledgement of the events of %s: %v", ts, err)
	}
}

// kill9 kills harvest serve as a crash would.
func (se *slackEnv) kill9(t *testing.T) {
	t.Helper()
	if err := se.s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	se.s.wait()
}

// userMessages are the texts of a session's messages from people.
func (se *slackEnv) userMessages(t *testing.T, ctx context.Context, id string) []string {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(se.e.home, "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ms, err := st.Messages(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.Text)
	}
	return out
}

// pendingSlackEvents are the events recorded and not done.
func (se *slackEnv) pendingSlackEvents(t *testing.T, ctx context.Context) []store.SlackEvent {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(se.e.home, "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	evs, err := st.PendingSlackEvents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestSlackCrashAfterAck: harvest serve is killed (SIGKILL) after Slack
// had the acknowledgement of a mention and before it was acted on; Slack
// never sends it again, yet after the restart the session starts and
// answers, once. The same for a reply in its thread: the follow-up is
// sent once and answered.
func TestSlackCrashAfterAck(t *testing.T) {
	se := newSlackEnv(t, slacksim.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	se.serveHolding(t, true)
	m := se.post(t, se.alice, se.mention()+" msg one in calc", "")
	se.waitAcked(t, ctx, m.TS)
	se.kill9(t)
	if ss := se.slackSessions(t, ctx); len(ss) != 0 || slices.Contains(se.reactions(m.TS), "eyes") {
		t.Fatalf("before the restart: %d sessions, reactions %v; want none (the events were held)", len(ss), se.reactions(m.TS))
	}
	if evs := se.pendingSlackEvents(t, ctx); len(evs) == 0 {
		t.Fatal("no pending Slack event after the kill")
	}
	se.serveHolding(t, false)
	final := se.waitFinal(t, ctx, m.TS, 1)
	if !strings.HasPrefix(final.Text, "ok") {
		t.Errorf("the final message after the restart: %q", final.Text)
	}
	ss := se.slackSessions(t, ctx)
	if len(ss) != 1 {
		t.Fatalf("%d sessions after the restart, want 1", len(ss))
	}
	waitUntil(t, ctx, "no pending Slack event", func() bool { return len(se.pendingSlackEvents(t, ctx)) == 0 })

	// A reply, cut off the same way.
	if err := se.s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	se.s.wait()
	se.serveHolding(t, true)
	r := se.post(t, se.alice, "msg two", m.TS)
	se.waitAcked(t, ctx, r.TS)
	se.kill9(t)
	se.serveHolding(t, false)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the last harvest serve's log:\n%s", se.s.stderr)
		}
	})
	final2 := se.waitFinal(t, ctx, m.TS, 2)
	if !strings.HasPrefix(final2.Text, "ok") {
		t.Errorf("the follow-up's final message: %q", final2.Text)
	}
	waitUntil(t, ctx, "✅ on the reply", func() bool { return slices.Contains(se.reactions(r.TS), "white_check_mark") })
	var twos int
	for _, text := range se.userMessages(t, ctx, ss[0].ID) {
		if strings.Contains(text, "msg two") {
			twos++
		}
	}
	if twos != 1 {
		t.Errorf("the reply reached the session %d times, want once", twos)
	}
	if n := len(se.slackSessions(t, ctx)); n != 1 {
		t.Errorf("%d sessions at the end, want 1", n)
	}
}
