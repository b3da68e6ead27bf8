package store

import (
	"context"
	"time"
)

// The Slack methods of bounded (bounded.go).

func (b *bounded) AddSlackEvent(ctx context.Context, id string, at time.Time) error {
	ctx, done := Call(ctx, "AddSlackEvent")
	return done(b.Store.AddSlackEvent(ctx, id, at))
}

func (b *bounded) PruneSlackEvents(ctx context.Context, before time.Time) (int, error) {
	ctx, done := Call(ctx, "PruneSlackEvents")
	v, err := b.Store.PruneSlackEvents(ctx, before)
	return v, done(err)
}

func (b *bounded) PutSlackThread(ctx context.Context, t *SlackThread) error {
	ctx, done := Call(ctx, "PutSlackThread")
	return done(b.Store.PutSlackThread(ctx, t))
}

func (b *bounded) SetSlackThreadShown(ctx context.Context, session string, seq int64) error {
	ctx, done := Call(ctx, "SetSlackThreadShown")
	return done(b.Store.SetSlackThreadShown(ctx, session, seq))
}

func (b *bounded) SetSlackThreadTurn(ctx context.Context, session, turn, progressTS, triggerTS string) error {
	ctx, done := Call(ctx, "SetSlackThreadTurn")
	return done(b.Store.SetSlackThreadTurn(ctx, session, turn, progressTS, triggerTS))
}

func (b *bounded) SlackThread(ctx context.Context, session string) (*SlackThread, error) {
	ctx, done := Call(ctx, "SlackThread")
	v, err := b.Store.SlackThread(ctx, session)
	return v, done(err)
}

func (b *bounded) SetSlackChannel(ctx context.Context, c *SlackChannel) error {
	ctx, done := Call(ctx, "SetSlackChannel")
	return done(b.Store.SetSlackChannel(ctx, c))
}

func (b *bounded) SlackChannel(ctx context.Context, team, channel string) (*SlackChannel, error) {
	ctx, done := Call(ctx, "SlackChannel")
	v, err := b.Store.SlackChannel(ctx, team, channel)
	return v, done(err)
}
