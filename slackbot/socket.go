package slackbot

import (
	"context"
	"errors"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
)

// # Socket Mode
//
// The app keeps Config.Connections Socket Mode connections (Slack allows
// up to 10 an app), each in its own loop: runSocket keeps one (slack-go's
// socketmode client: apps.connections.open, then the WebSocket; it
// reconnects itself after Slack's disconnect message) and connects
// again, after a backoff of up to 30 s, when the client gives up (the
// connection was cut, apps.connections.open failed), whatever the other
// connections do. Slack sends each envelope to one of them; it is
// acknowledged on the connection it came on, at once: an event after it
// is recorded (events.go), a click after it is handed over, a slash
// command with its answer. An envelope Slack sends again (its ack was
// lost with a connection), on the same connection or another, is
// recognised by its event's id (the store's, so also when another node
// got it first).

func (b *Bot) runSocket(n int) {
	backoff := time.Second
	for b.ctx.Err() == nil {
		start := time.Now()
		err := b.socketOnce()
		if b.ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			backoff = time.Second
		}
		b.log.Warn("a Socket Mode connection ended; connecting again", "connection", n, "err", err, "in", backoff)
		if sleep(b.ctx, time.Now().Add(backoff)) != nil {
			return
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// socketOnce runs one socketmode client until it fails.
func (b *Bot) socketOnce() error {
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	client := socketmode.New(b.api)
	done := make(chan error, 1)
	go func() { done <- client.RunContext(ctx) }()
	for {
		select {
		case err := <-done:
			return err
		case evt, ok := <-client.Events:
			if !ok {
				cancel()
				return <-done
			}
			b.onEnvelope(ctx, client, evt)
		}
	}
}

func (b *Bot) onEnvelope(ctx context.Context, client *socketmode.Client, evt socketmode.Event) {
	switch evt.Type {
	case socketmode.EventTypeEventsAPI:
		ev, ok := evt.Data.(slackevents.EventsAPIEvent)
		if !ok || evt.Request == nil {
			return
		}
		if b.accept(ev) {
			b.ack(ctx, client, evt.Request, nil)
		}
	case socketmode.EventTypeInteractive:
		cb, ok := evt.Data.(slack.InteractionCallback)
		if !ok || evt.Request == nil {
			return
		}
		b.ack(ctx, client, evt.Request, nil)
		b.goFn(func() {
			ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
			defer cancel()
			b.interaction(ctx, cb)
		})
	case socketmode.EventTypeSlashCommand:
		c, ok := evt.Data.(slack.SlashCommand)
		if !ok || evt.Request == nil {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
		text := b.command(cctx, c)
		cancel()
		b.ack(ctx, client, evt.Request, map[string]any{"response_type": "ephemeral", "text": text})
	case socketmode.EventTypeConnectionError, socketmode.EventTypeInvalidAuth:
		b.log.Warn("Socket Mode", "event", evt.Type, "data", evt.Data)
	}
}

func (b *Bot) ack(ctx context.Context, client *socketmode.Client, req *socketmode.Request, payload any) {
	if err := client.AckCtx(ctx, req.EnvelopeID, payload); err != nil && !errors.Is(err, context.Canceled) {
		b.log.Warn("acknowledging an envelope", "envelope", req.EnvelopeID, "err", err)
	}
}
