package slackbot

import (
	"context"
	"time"

	"github.com/slack-go/slack/slackevents"
)

// # Events, once each
//
// Both transports hand an event callback to accept: its event_id is
// recorded in the store with the message, pending (inbox.go), before
// Slack is told it arrived (the Socket Mode ack, the HTTP 200); an id recorded
// before is a retry (X-Slack-Retry-Num) or a redelivery after a
// reconnect, acknowledged and not processed again. A store that fails
// leaves the event unacknowledged, so Slack sends it again. Processing
// runs after the acknowledgement, in a goroutine the Bot owns (Slack
// wants the ack within 3 s; a session's start takes longer), one event
// of a thread at a time, and marked done after. An event recorded whose
// processing a crash cut short is processed after the restart (or by
// another server sharing the store: inbox.go), within an hour.
//
// Only the message events people write count: the bot's own messages
// (bot_id, or its user) and subtypes other than edits and deletions
// are ignored; edits and deletions: edits.go.

// accept records an event callback and starts its processing; false
// when the store failed (do not acknowledge: Slack sends it again).
func (b *Bot) accept(ev slackevents.EventsAPIEvent) bool {
	if ev.Type != slackevents.CallbackEvent {
		return true
	}
	var id string
	switch cb := ev.Data.(type) {
	case *slackevents.EventsAPICallbackEvent:
		id = cb.EventID
	case slackevents.EventsAPICallbackEvent:
		id = cb.EventID
	}
	m, ok := b.messageOf(ev.InnerEvent.Data)
	if !ok {
		return true
	}
	m.event = id
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
	first, err := b.record(ctx, m)
	cancel()
	if err != nil {
		b.log.Error("recording a Slack event", "event", id, "err", err)
		return false
	}
	if !first {
		b.log.Info("a Slack event seen before", "event", id)
		return true
	}
	b.process(m) // inbox.go
	return true
}

// messageOf reads an inner event as a person's message.
func (b *Bot) messageOf(data any) (message, bool) {
	switch in := data.(type) {
	case *slackevents.AppMentionEvent:
		if in.BotID != "" || in.User == b.botUser {
			return message{}, false
		}
		return message{channel: in.Channel, ts: in.TimeStamp, threadTS: in.ThreadTimeStamp, user: in.User, text: in.Text, mention: true}, true
	case *slackevents.MessageEvent:
		if in.SubType == "message_changed" || in.SubType == "message_deleted" {
			return b.changeOf(in) // edits.go
		}
		if in.BotID != "" || in.SubType != "" || in.User == "" || in.User == b.botUser {
			return message{}, false
		}
		return message{channel: in.Channel, ts: in.TimeStamp, threadTS: in.ThreadTimeStamp, user: in.User, text: in.Text, im: in.ChannelType == "im"}, true
	}
	return message{}, false
}
