package store

import (
	"context"
	"time"
)

// The SlackInbox methods of observed (observe.go).

func (o *observed) AddSlackEventPending(ctx context.Context, id string, payload []byte, at time.Time) error {
	start := time.Now()
	err := o.Store.AddSlackEventPending(ctx, id, payload, at)
	o.o.StoreOp("AddSlackEventPending", time.Since(start), err)
	return err
}

func (o *observed) SlackEventDone(ctx context.Context, id string) error {
	start := time.Now()
	err := o.Store.SlackEventDone(ctx, id)
	o.o.StoreOp("SlackEventDone", time.Since(start), err)
	return err
}

func (o *observed) PendingSlackEvents(ctx context.Context) ([]SlackEvent, error) {
	start := time.Now()
	v, err := o.Store.PendingSlackEvents(ctx)
	o.o.StoreOp("PendingSlackEvents", time.Since(start), err)
	return v, err
}
