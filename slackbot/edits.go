package slackbot

import (
	"context"
	"errors"
	"strings"

	"github.com/slack-go/slack/slackevents"

	"github.com/harvest-dev/harvest/store"
)

// # Edits and deletions of people's messages
//
// Slack tells of them as message events of subtype message_changed and
// message_deleted; they are recorded and handled once each, as every
// event (events.go, inbox.go). What they do:
//
//   - An edit of a message in a thread that has a session (the message
//     that started it, or a reply) changes nothing the agent sees: the
//     session has the words it was given. Its author is told so, once
//     per message, ephemerally: "edits are not sent to the agent; reply
//     in the thread".
//   - An edit that adds a mention of the app to a message in a channel
//     whose thread has no session yet is a new request: as if the
//     message had been written so (👀, the repository, a session in its
//     thread). An edit that does not add a mention does nothing.
//   - A deletion of the message that started a session does not stop
//     it (Stop and /harvest stop do): its author is told, ephemerally in
//     the channel, that the work goes on and how to stop it. Deleting a
//     reply, or a message that started nothing, does nothing.
//
// Edits and deletions of the app's own messages, and edits that leave
// the text as it was (Slack's link previews), are not acted on.

// Kinds of a message that tells of a change.
const (
	kindEdited  = "edited"
	kindDeleted = "deleted"
)

// changeOf reads a message_changed or message_deleted event as the
// message it changed; false when there is nothing to act on.
func (b *Bot) changeOf(in *slackevents.MessageEvent) (message, bool) {
	im := in.ChannelType == "im"
	switch in.SubType {
	case "message_changed":
		n := in.Message
		if n == nil || n.User == "" || n.BotID != "" || n.User == b.botUser {
			return message{}, false
		}
		var prev string
		if in.PreviousMessage != nil {
			prev = in.PreviousMessage.Text
		}
		if prev == n.Text {
			return message{}, false
		}
		return message{kind: kindEdited, channel: in.Channel, ts: n.Timestamp, threadTS: n.ThreadTimestamp,
			user: n.User, text: n.Text, prev: prev, im: im}, true
	case "message_deleted":
		p := in.PreviousMessage
		if p == nil || p.User == "" || p.BotID != "" || p.User == b.botUser || in.DeletedTimeStamp == "" {
			return message{}, false
		}
		return message{kind: kindDeleted, channel: in.Channel, ts: in.DeletedTimeStamp, threadTS: p.ThreadTimestamp,
			user: p.User, text: p.Text, im: im}, true
	}
	return message{}, false
}

// onChange acts on an edit or a deletion (see above).
func (b *Bot) onChange(ctx context.Context, m message) {
	reply := m.threadTS != "" && m.threadTS != m.ts
	root := m.ts
	if reply {
		root = m.threadTS
	}
	unlock := b.lockThread(b.threadKey(m.channel, root))
	defer unlock()
	_, err := b.st.SlackThread(ctx, b.sessionID(m.channel, root))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		b.log.Error("finding a thread's session", "err", err)
		return
	}
	has := err == nil
	switch m.kind {
	case kindEdited:
		if has {
			if b.noteOnce("edit/" + b.threadKey(m.channel, m.ts)) {
				b.ephemeral(ctx, m.channel, m.user, root, "Edits are not sent to the agent; reply in the thread to tell it something new.")
			}
			return
		}
		mention := "<@" + b.botUser + ">"
		if m.im || !strings.Contains(m.text, mention) || strings.Contains(m.prev, mention) {
			return
		}
		m.kind, m.mention = "", true
		b.start(ctx, m, root)
	case kindDeleted:
		if has && !reply { // its thread has no parent to post under now: told in the channel, to them
			b.ephemeral(ctx, m.channel, m.user, "", "You deleted the message that asked for this; the work goes on. Press Stop in its thread, or use `/harvest stop`, to stop it.")
		}
	}
}

// noteOnce says whether a note keyed key is due: the first time since
// the app started.
func (b *Bot) noteOnce(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.noted[key] {
		return false
	}
	if b.noted == nil || len(b.noted) >= maxNoted {
		b.noted = map[string]bool{} // forgetting means one more note, no harm
	}
	b.noted[key] = true
	return true
}
