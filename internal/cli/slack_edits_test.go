package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sim/slacksim"
)

// settled waits until Slack had the acknowledgement of the events about
// ts and the app has handled every event it recorded.
func (se *slackEnv) settled(t *testing.T, ctx context.Context, ts string) {
	t.Helper()
	se.waitAcked(t, ctx, ts)
	waitUntil(t, ctx, "every Slack event handled", func() bool { return len(se.pendingSlackEvents(t, ctx)) == 0 })
}

// ephemeralsSaying counts the ephemeral messages to user containing text.
func (se *slackEnv) ephemeralsSaying(user slacksim.User, text string) int {
	n := 0
	for _, e := range se.ss.Ephemerals() {
		if e.User == user.ID && strings.Contains(e.Text, text) {
			n++
		}
	}
	return n
}

// TestSlackEdits: a message that started nothing, edited to mention the
// app, is a request (a session in its thread, answered); edits of the
// message that started a session are not sent to the agent, and its
// author is told so once; deleting it leaves the work going and its
// author is told so; deleting a reply, or editing a message without adding
// a mention, does nothing. Every event is Slack's shape (message_changed,
// message_deleted), checked against its AsyncAPI description.
func TestSlackEdits(t *testing.T) {
	se := newSlackEnv(t, slacksim.Options{})
	se.serve(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// An edit without a mention: nothing.
	chat := se.post(t, se.alice, "just chatting about calc", "")
	if err := se.ss.Edit(slacksim.EditSpec{Channel: se.general.ID, TS: chat.TS, Text: "just chatting about calc, edited"}); err != nil {
		t.Fatal(err)
	}
	se.settled(t, ctx, chat.TS)
	if n := len(se.slackSessions(t, ctx)); n != 0 || len(se.reactions(chat.TS)) != 0 {
		t.Fatalf("an edit without a mention: %d sessions, reactions %v; want none", n, se.reactions(chat.TS))
	}

	// An edit adding a mention: a request.
	m := se.post(t, se.alice, "msg one in calc", "")
	if err := se.ss.Edit(slacksim.EditSpec{Channel: se.general.ID, TS: m.TS, Text: se.mention() + " msg one in calc"}); err != nil {
		t.Fatal(err)
	}
	if final := se.waitFinal(t, ctx, m.TS, 1); !strings.HasPrefix(final.Text, "ok") {
		t.Errorf("the final message of the edited request: %q", final.Text)
	}
	ss := se.slackSessions(t, ctx)
	if len(ss) != 1 {
		t.Fatalf("%d sessions after the edit adding a mention, want 1", len(ss))
	}

	// Edits of the message that started it: told once, nothing sent.
	const note = "Edits are not sent to the agent"
	for _, text := range []string{se.mention() + " msg one in calc, really", se.mention() + " msg one in calc, really!"} {
		if err := se.ss.Edit(slacksim.EditSpec{Channel: se.general.ID, TS: m.TS, Text: text}); err != nil {
			t.Fatal(err)
		}
		se.settled(t, ctx, m.TS)
	}
	if n := se.ephemeralsSaying(se.alice, note); n != 1 {
		t.Errorf("%d notes that edits are not sent, want 1", n)
	}
	if got := se.userMessages(t, ctx, ss[0].ID); len(got) != 1 {
		t.Errorf("the session's messages after the edits: %q, want the first only", got)
	}

	// A reply, deleted: nothing. The message that asked, deleted: the
	// work goes on, and the thread says so.
	r := se.post(t, se.alice, "msg two", m.TS)
	se.waitFinal(t, ctx, m.TS, 2)
	before := len(se.botReplies(m.TS))
	if err := se.ss.Delete(se.general.ID, r.TS); err != nil {
		t.Fatal(err)
	}
	se.settled(t, ctx, r.TS)
	if n := len(se.botReplies(m.TS)); n != before {
		t.Errorf("deleting a reply: %d messages of the app in the thread, want %d", n, before)
	}
	if err := se.ss.Delete(se.general.ID, m.TS); err != nil {
		t.Fatal(err)
	}
	se.ephemeralTo(t, ctx, se.alice, "You deleted the message that asked for this; the work goes on")
	se.settled(t, ctx, m.TS)
	if n := se.ephemeralsSaying(se.alice, "the work goes on"); n != 1 {
		t.Errorf("%d notes that the work goes on, want 1", n)
	}
	if s := se.slackSessions(t, ctx); len(s) != 1 || s[0].State.Ended() {
		t.Errorf("after the deletion: %d sessions, the first %v; want the one, not ended", len(s), s[0].State)
	}
}
