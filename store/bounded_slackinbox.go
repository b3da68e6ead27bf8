package store

import (
	"context"
	"time"
)

// The SlackInbox methods of bounded (bounded.go).

func (b *bounded) AddSlackEventPending(ctx context.Context, id string, payload []byte, at time.Time) error {
	ctx, done := Call(ctx, "AddSlackEventPending")
	return done(b.Store.AddSlackEventPending(ctx, id, payload, at))
}

func (b *bounded) SlackEventDone(ctx context.Context, id string) error {
	ctx, done := Call(ctx, "SlackEventDone")
	return done(b.Store.SlackEventDone(ctx, id))
}

func (b *bounded) PendingSlackEvents(ctx context.Context) ([]SlackEvent, error) {
	ctx, done := Call(ctx, "PendingSlackEvents")
	v, err := b.Store.PendingSlackEvents(ctx)
	return v, done(err)
}
