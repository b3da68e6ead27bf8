package store

import (
	"context"
	"time"
)

// The SlackLinks methods of bounded (bounded.go), and RemoveIdentity.

func (b *bounded) CreateSlackLink(ctx context.Context, l *SlackLink) error {
	ctx, done := Call(ctx, "CreateSlackLink")
	return done(b.Store.CreateSlackLink(ctx, l))
}

func (b *bounded) SlackLink(ctx context.Context, hash []byte, now time.Time) (*SlackLink, error) {
	ctx, done := Call(ctx, "SlackLink")
	v, err := b.Store.SlackLink(ctx, hash, now)
	return v, done(err)
}

func (b *bounded) RedeemSlackLink(ctx context.Context, hash []byte, user string, now time.Time) (*SlackLink, error) {
	ctx, done := Call(ctx, "RedeemSlackLink")
	v, err := b.Store.RedeemSlackLink(ctx, hash, user, now)
	return v, done(err)
}

func (b *bounded) RemoveIdentity(ctx context.Context, user, kind, issuer, subject string) error {
	ctx, done := Call(ctx, "RemoveIdentity")
	return done(b.Store.RemoveIdentity(ctx, user, kind, issuer, subject))
}
