package store

import (
	"context"
	"time"
)

// The Slack methods of observed (observe.go).

func (o *observed) AddSlackEvent(ctx context.Context, id string, at time.Time) error {
	start := time.Now()
	err := o.Store.AddSlackEvent(ctx, id, at)
	o.o.StoreOp("AddSlackEvent", time.Since(start), err)
	return err
}

func (o *observed) PruneSlackEvents(ctx context.Context, before time.Time) (int, error) {
	start := time.Now()
	v, err := o.Store.PruneSlackEvents(ctx, before)
	o.o.StoreOp("PruneSlackEvents", time.Since(start), err)
	return v, err
}

func (o *observed) PutSlackThread(ctx context.Context, t *SlackThread) error {
	start := time.Now()
	err := o.Store.PutSlackThread(ctx, t)
	o.o.StoreOp("PutSlackThread", time.Since(start), err)
	return err
}

func (o *observed) SetSlackThreadShown(ctx context.Context, session string, seq int64) error {
	start := time.Now()
	err := o.Store.SetSlackThreadShown(ctx, session, seq)
	o.o.StoreOp("SetSlackThreadShown", time.Since(start), err)
	return err
}

func (o *observed) SetSlackThreadTurn(ctx context.Context, session, turn, progressTS, triggerTS string) error {
	start := time.Now()
	err := o.Store.SetSlackThreadTurn(ctx, session, turn, progressTS, triggerTS)
	o.o.StoreOp("SetSlackThreadTurn", time.Since(start), err)
	return err
}

func (o *observed) SlackThread(ctx context.Context, session string) (*SlackThread, error) {
	start := time.Now()
	v, err := o.Store.SlackThread(ctx, session)
	o.o.StoreOp("SlackThread", time.Since(start), err)
	return v, err
}

func (o *observed) SetSlackChannel(ctx context.Context, c *SlackChannel) error {
	start := time.Now()
	err := o.Store.SetSlackChannel(ctx, c)
	o.o.StoreOp("SetSlackChannel", time.Since(start), err)
	return err
}

func (o *observed) SlackChannel(ctx context.Context, team, channel string) (*SlackChannel, error) {
	start := time.Now()
	v, err := o.Store.SlackChannel(ctx, team, channel)
	o.o.StoreOp("SlackChannel", time.Since(start), err)
	return v, err
}
