package store

import (
	"context"
	"time"
)

// The SlackLinks methods of observed (observe.go), and RemoveIdentity.

func (o *observed) CreateSlackLink(ctx context.Context, l *SlackLink) error {
	start := time.Now()
	err := o.Store.CreateSlackLink(ctx, l)
	o.o.StoreOp("CreateSlackLink", time.Since(start), err)
	return err
}

func (o *observed) SlackLink(ctx context.Context, hash []byte, now time.Time) (*SlackLink, error) {
	start := time.Now()
	v, err := o.Store.SlackLink(ctx, hash, now)
	o.o.StoreOp("SlackLink", time.Since(start), err)
	return v, err
}

func (o *observed) RedeemSlackLink(ctx context.Context, hash []byte, user string, now time.Time) (*SlackLink, error) {
	start := time.Now()
	v, err := o.Store.RedeemSlackLink(ctx, hash, user, now)
	o.o.StoreOp("RedeemSlackLink", time.Since(start), err)
	return v, err
}

func (o *observed) RemoveIdentity(ctx context.Context, user, kind, issuer, subject string) error {
	start := time.Now()
	err := o.Store.RemoveIdentity(ctx, user, kind, issuer, subject)
	o.o.StoreOp("RemoveIdentity", time.Since(start), err)
	return err
}
