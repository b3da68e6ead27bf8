package journal

import "context"

// WaitLive waits until sub has replayed the store and takes live events
// under the slow-subscriber rules, so a test can make it fall behind for
// certain: while it still replays, an overflow is replayed from the store
// instead of coalesced.
func WaitLive(ctx context.Context, sub *Subscription) error {
	select {
	case <-sub.wentLive:
		return nil
	case <-sub.done:
		return sub.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}
