package store

import (
	"context"
	"time"
)

// The retention janitor's calls, bounded (bounded.go).

func (b *bounded) RetentionCandidates(ctx context.Context, before time.Time, after RetentionKey, limit int) ([]RetentionCandidate, error) {
	ctx, done := Call(ctx, "RetentionCandidates")
	v, err := b.Store.RetentionCandidates(ctx, before, after, limit)
	return v, done(err)
}

func (b *bounded) CompactEvents(ctx context.Context, id string, idleBefore time.Time, batch int) (Compacted, error) {
	ctx, done := Call(ctx, "CompactEvents")
	v, err := b.Store.CompactEvents(ctx, id, idleBefore, batch)
	return v, done(err)
}
