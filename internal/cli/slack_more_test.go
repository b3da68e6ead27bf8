package cli

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sim/slacksim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// ephemeralTo waits for an ephemeral message to user containing text.
func (se *slackEnv) ephemeralTo(t *testing.T, ctx context.Context, user slacksim.User, text string) {
	t.Helper()
	waitUntil(t, ctx, "an ephemeral message to "+user.Name+" saying "+text, func() bool {
		for _, e := range se.ss.Ephemerals() {
			if e.User == user.ID && strings.Contains(e.Text, text) {
				return true
			}
		}
		return false
	})
}

// slackSessions are the sessions the Slack app started, from the store.
func (se *slackEnv) slackSessions(t testing.TB, ctx context.Context) []*store.Session {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(se.e.home, "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ss, err := st.ListSessions(ctx, store.SessionFilter{Owner: "slack"})
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

// TestSlackPeopleAndStop: an unlinked person gets the how-to-link
// message and starts nothing; a viewer is refused politely; a mention
// naming no repository is told how to name one; /harvest repo sets the
// channel's default, which the next mention uses; Stop cancels the
// running turn (❌, the progress message without its button), through a
// Socket Mode connection dropped mid-turn and a disconnect warning:
// nothing lost, nothing twice.
func TestSlackPeopleAndStop(t *testing.T) {
	se := newSlackEnv(t, slacksim.Options{})
	se.serve(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	b := se.post(t, se.bob, se.mention()+" fix calc", "")
	se.ephemeralTo(t, ctx, se.bob, "I don't know who you are in Harvest yet")
	c := se.post(t, se.carol, se.mention()+" fix calc", "")
	se.ephemeralTo(t, ctx, se.carol, "Sorry, I can't do that for you")
	n := se.post(t, se.alice, se.mention()+" fix something", "")
	waitUntil(t, ctx, "how to name a repository", func() bool {
		r := se.botReplies(n.TS)
		return len(r) == 1 && strings.Contains(r[0].Text, "Which repository?") && slices.Contains(pickerOptions(r[0]), "calc")
	})
	for _, ts := range []string{b.TS, c.TS} {
		if r := se.reactions(ts); len(r) != 0 || len(se.botReplies(ts)) != 0 {
			t.Errorf("a refused request got reactions %v or replies %v", r, se.botReplies(ts))
		}
	}

	if err := se.ss.Command(slacksim.CommandSpec{User: se.alice.ID, Channel: se.general.ID, Command: "/harvest", Text: "repo calc"}); err != nil {
		t.Fatal(err)
	}
	se.ephemeralTo(t, ctx, se.alice, "This channel's default repository is now `calc`")

	m := se.post(t, se.alice, se.mention()+" long task", "")
	var progress slacksim.Message
	waitUntil(t, ctx, "the progress message with its Stop button", func() bool {
		for _, r := range se.botReplies(m.TS) {
			if buttons(r)["harvest-stop"] != "" && strings.Contains(r.Text, "bash") {
				progress = r
				return true
			}
		}
		return false
	})
	// The connection goes mid-turn; then a warning, and the close after it.
	if se.ss.Drop(0) == 0 {
		t.Fatal("no connection to drop")
	}
	waitUntil(t, ctx, "a new connection", func() bool { return len(se.ss.Connections()) > 0 })
	if _, err := se.ss.Disconnect(slacksim.DisconnectSpec{Reason: "warning", Grace: time.Second}); err != nil {
		t.Fatal(err)
	}
	// A reply meanwhile is queued behind the turn, once.
	r := se.post(t, se.alice, "msg after the drop", m.TS)
	waitUntil(t, ctx, "👀 on the reply", func() bool { return slices.Contains(se.reactions(r.TS), "eyes") })
	if err := se.ss.Click(slacksim.ClickSpec{User: se.alice.ID, Channel: se.general.ID, TS: progress.TS, ActionID: "harvest-stop"}); err != nil {
		t.Fatal(err)
	}
	final := se.waitFinal(t, ctx, m.TS, 1)
	if !strings.HasPrefix(final.Text, "Stopped") {
		t.Errorf("the stopped turn's final message: %q", final.Text)
	}
	waitUntil(t, ctx, "❌ on the mention", func() bool { return slices.Contains(se.reactions(m.TS), "x") })
	waitUntil(t, ctx, "the progress message stopped, without its button", func() bool {
		p, _ := se.ss.Message(se.general.ID, progress.TS)
		return strings.HasPrefix(p.Text, "⏹️ Stopped") && buttons(p)["harvest-stop"] == ""
	})
	// The queued reply waits for the next message (a cancelled turn
	// pauses the queue): it is there once.
	ss := se.slackSessions(t, ctx)
	if len(ss) != 1 {
		t.Fatalf("sessions from Slack: %d, want 1", len(ss))
	}
	st, err := sqlite.Open(filepath.Join(se.e.home, "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	msgs, err := st.Messages(ctx, ss[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 {
		t.Errorf("the session's messages: %d, want 2 (the mention, the reply)", len(msgs))
	}
	if _, err := se.ss.WaitEnvelopes(ctx); err != nil {
		t.Fatal(err)
	}
	checkRetryAfter(t, se.ss.Calls())
}

// signed is a request to url signed as Slack signs, at ts.
func signed(t *testing.T, url, secret string, ts time.Time, body []byte, retry int) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	stamp := strconv.FormatInt(ts.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + stamp + ":"))
	mac.Write(body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Slack-Request-Timestamp", stamp)
	req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	if retry > 0 {
		req.Header.Set("X-Slack-Retry-Num", strconv.Itoa(retry))
		req.Header.Set("X-Slack-Retry-Reason", "http_timeout")
	}
	return req
}

func status(t *testing.T, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSlackHTTP: the Events API over HTTP. The url_verification is
// answered; deliveries with a bad signature or an old timestamp get 401
// and start nothing; a mention starts a session; the same event sent
// again (a retry) is answered 200 and processed once.
func TestSlackHTTP(t *testing.T) {
	se := newSlackEnv(t, slacksim.Options{RetryBackoff: []time.Duration{0}})
	se.serve(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := se.ss.VerifyURL(ctx); err != nil {
		t.Fatalf("url_verification: %v", err)
	}

	for _, tamper := range []slacksim.TamperSpec{{BadSignature: true}, {TimestampSkew: 10 * time.Minute}} {
		se.ss.Tamper(tamper)
		m := se.post(t, se.alice, se.mention()+" fix calc", "")
		es, err := se.ss.WaitEnvelopes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			for _, a := range e.Attempts {
				if a.Status != http.StatusUnauthorized {
					t.Errorf("%+v: a tampered delivery answered %d, want 401", tamper, a.Status)
				}
			}
		}
		if r := se.reactions(m.TS); len(r) != 0 {
			t.Errorf("%+v: a refused delivery got %v", tamper, r)
		}
		se.ss.Tamper(slacksim.TamperSpec{})
	}
	if n := len(se.slackSessions(t, ctx)); n != 0 {
		t.Fatalf("refused deliveries started %d sessions", n)
	}

	m := se.post(t, se.alice, se.mention()+" fix calc", "")
	se.waitFinal(t, ctx, m.TS, 1)
	waitUntil(t, ctx, "✅ on the mention", func() bool { return slices.Contains(se.reactions(m.TS), "white_check_mark") })
	if _, err := se.ss.WaitEnvelopes(ctx); err != nil {
		t.Fatal(err)
	}
	// The mention's event again, as Slack retries it: 200, nothing more.
	var mention slacksim.Envelope
	for _, e := range se.ss.Envelopes() {
		if e.Topic == "app.mention" && e.State == slacksim.StateAcked {
			mention = e
		}
	}
	url := se.s.url + "/v1/slack/events"
	if got := status(t, signed(t, url, se.tok.SigningSecret, time.Now(), mention.Payload, 1)); got != http.StatusOK {
		t.Errorf("a retry: %d, want 200", got)
	}
	if got := status(t, signed(t, url, "not-the-secret", time.Now(), mention.Payload, 2)); got != http.StatusUnauthorized {
		t.Errorf("a retry signed with another secret: %d, want 401", got)
	}
	if got := status(t, signed(t, url, se.tok.SigningSecret, time.Now().Add(-6*time.Minute), mention.Payload, 2)); got != http.StatusUnauthorized {
		t.Errorf("a retry stamped 6 minutes ago: %d, want 401", got)
	}
	// /harvest status over HTTP, answered in the response: the final
	// message stays the only one, the session the only one.
	if err := se.ss.Command(slacksim.CommandSpec{User: se.alice.ID, Channel: se.general.ID, Command: "/harvest", Text: "status"}); err != nil {
		t.Fatal(err)
	}
	se.ephemeralTo(t, ctx, se.alice, "fix calc")
	// A follow-up after it: by its end the retry, had it been processed,
	// would have left its marks (a second session.create, a second 👀).
	se.post(t, se.alice, "msg then", m.TS)
	se.waitFinal(t, ctx, m.TS, 2)
	if n := len(se.slackSessions(t, ctx)); n != 1 {
		t.Errorf("sessions after a retried event: %d, want 1", n)
	}
	if r := se.botReplies(m.TS); len(r) != 4 {
		t.Errorf("the thread after a retried event and a follow-up: %d replies, want 4 (progress, final, twice)", len(r))
	}
	eyes := 0
	for _, c := range se.ss.Calls() {
		if c.Method == "reactions.add" && c.Params["name"] == "eyes" && c.Params["timestamp"] == m.TS {
			eyes++
		}
	}
	if eyes != 1 {
		t.Errorf("👀 added to the mention %d times, want 1", eyes)
	}
	st, err := sqlite.Open(filepath.Join(se.e.home, "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	audit, err := st.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	creates := 0
	for _, a := range audit {
		if a.Action == "session.create" && a.Channel == store.ChannelSlack {
			creates++
		}
	}
	if creates != 1 {
		t.Errorf("session.create entries of channel slack: %d, want 1", creates)
	}
}

// TestSlackStorm: every call is refused with 429 for a while as a turn
// runs: the app makes no call inside a Retry-After, and the thread ends
// right (the final message, ✅).
func TestSlackStorm(t *testing.T) {
	se := newSlackEnv(t, slacksim.Options{})
	se.serve(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m := se.post(t, se.alice, se.mention()+" fix calc", "")
	waitUntil(t, ctx, "👀 on the mention", func() bool { return slices.Contains(se.reactions(m.TS), "eyes") })
	if _, err := se.ss.Storm(slacksim.StormSpec{For: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	final := se.waitFinal(t, ctx, m.TS, 1)
	if !strings.Contains(final.Text, "Fixed calc") {
		t.Errorf("final message: %q", final.Text)
	}
	waitUntil(t, ctx, "✅ on the mention", func() bool {
		r := se.reactions(m.TS)
		return slices.Contains(r, "white_check_mark") && !slices.Contains(r, "eyes")
	})
	if refused := checkRetryAfter(t, se.ss.Calls()); refused == 0 {
		t.Error("the storm refused no call")
	}
}

// TestSlackDirectMessage: a direct message starts a session whose thread
// is that message's: 👀, the final message there, ✅.
func TestSlackDirectMessage(t *testing.T) {
	se := newSlackEnv(t, slacksim.Options{})
	se.serve(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	im, err := se.ss.OpenIM(se.alice.ID)
	if err != nil {
		t.Fatal(err)
	}
	m, err := se.ss.Post(slacksim.PostSpec{User: se.alice.ID, Channel: im.ID, Text: "fix calc"})
	if err != nil {
		t.Fatal(err)
	}
	names := func() []string {
		msg, _ := se.ss.Message(im.ID, m.TS)
		var out []string
		for _, r := range msg.Reactions {
			out = append(out, r.Name)
		}
		return out
	}
	waitUntil(t, ctx, "the final message in the direct message's thread, and ✅", func() bool {
		final := false
		for _, r := range se.ss.Thread(im.ID, m.TS) {
			final = final || (r.BotID != "" && strings.HasPrefix(r.Text, "Fixed calc"))
		}
		return final && slices.Contains(names(), "white_check_mark")
	})
	if n := len(se.slackSessions(t, ctx)); n != 1 {
		t.Errorf("sessions: %d, want 1", n)
	}
}

// TestSlackRestart: harvest serve stops in the middle of a turn a reply
// in the thread asked for, and starts again: its Slack app follows the
// session from what the thread showed, so the interrupted turn gets its
// final message, its progress message is edited (not a second one
// posted) and ❌ goes on the reply that asked (not on the mention, whose
// turn ended ✅); a reply after the restart is a follow-up, ✅.
func TestSlackRestart(t *testing.T) {
	se := newSlackEnv(t, slacksim.Options{})
	se.serve(t, false, "--shutdown-grace", "0s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m := se.post(t, se.alice, se.mention()+" msg: look at calc", "")
	se.waitFinal(t, ctx, m.TS, 1)
	waitUntil(t, ctx, "✅ on the mention", func() bool { return slices.Contains(se.reactions(m.TS), "white_check_mark") })
	long := se.post(t, se.alice, "long task", m.TS)
	waitUntil(t, ctx, "the progress message at the bash step", func() bool {
		for _, r := range se.botReplies(m.TS) {
			if strings.Contains(r.Text, "bash") {
				return true
			}
		}
		return false
	})
	if err := se.s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := se.s.wait(); err != nil {
		t.Fatalf("harvest serve after SIGTERM: %v\n%s", err, se.s.stderr)
	}
	se.serve(t, false, "--shutdown-grace", "0s")
	final := se.waitFinal(t, ctx, m.TS, 2)
	if !strings.Contains(final.Text, "interrupted") {
		t.Errorf("the interrupted turn's final message: %q", final.Text)
	}
	waitUntil(t, ctx, "❌ on the reply that asked", func() bool { return slices.Contains(se.reactions(long.TS), "x") })
	waitUntil(t, ctx, "the interrupted turn's progress message edited: failed", func() bool {
		p := progressMessages(se.botReplies(m.TS))
		return len(p) == 2 && strings.HasPrefix(p[1].Text, "❌ Failed")
	})
	r := se.post(t, se.alice, "msg after the restart", m.TS)
	final3 := se.waitFinal(t, ctx, m.TS, 3)
	if !strings.HasPrefix(final3.Text, "ok") {
		t.Errorf("the follow-up's final message: %q", final3.Text)
	}
	waitUntil(t, ctx, "✅ on the reply", func() bool { return slices.Contains(se.reactions(r.TS), "white_check_mark") })
	waitUntil(t, ctx, "three progress messages, one a turn, each ended", func() bool {
		p := progressMessages(se.botReplies(m.TS))
		return len(p) == 3 && strings.HasPrefix(p[2].Text, "✅ Done")
	})
	if got := se.reactions(m.TS); slices.Contains(got, "x") || !slices.Contains(got, "white_check_mark") {
		t.Errorf("the mention's reactions: %v, want ✅ (its own turn's) and no ❌", got)
	}
	if p := progressMessages(se.botReplies(m.TS)); len(p) != 3 {
		for _, x := range p {
			t.Logf("progress message %s: %q", x.TS, x.Text)
		}
		t.Errorf("progress messages: %d, want 3 (one a turn; the restart edits the interrupted turn's)", len(p))
	}
}

// progressMessages are the progress messages among a thread's bot
// replies (watch.go's progressText: working, done, stopped, failed).
func progressMessages(replies []slacksim.Message) []slacksim.Message {
	var out []slacksim.Message
	for _, r := range replies {
		for _, p := range []string{"⏳ Working", "✅ Done", "⏹️ Stopped", "❌ Failed"} {
			if strings.HasPrefix(r.Text, p) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}
