package store

import (
	"context"
	"time"
)

// The retention janitor's calls, measured (observe.go).

func (o *observed) RetentionCandidates(ctx context.Context, before time.Time, after RetentionKey, limit int) ([]RetentionCandidate, error) {
	start := time.Now()
	v, err := o.Store.RetentionCandidates(ctx, before, after, limit)
	o.o.StoreOp("RetentionCandidates", time.Since(start), err)
	return v, err
}

func (o *observed) CompactEvents(ctx context.Context, id string, idleBefore time.Time, batch int) (Compacted, error) {
	start := time.Now()
	v, err := o.Store.CompactEvents(ctx, id, idleBefore, batch)
	o.o.StoreOp("CompactEvents", time.Since(start), err)
	return v, err
}
