package slackbot

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/slack-go/slack"
)

// # Slack's limits
//
// Every Web API call goes through rate.call: after a 429 no call is made
// before its Retry-After has passed (one window for the app: Slack's
// tiers are per app and workspace, and a storm refuses every method), and
// the refused call is made again after it (at most maxRetries times).
// Edits of a channel's messages (chat.update) are at most one per
// UpdateEvery per channel: rate.edit waits for the channel's next slot;
// the progress message's edits are coalesced by its watcher (watch.go),
// so a slot always carries the latest state.

const maxRetries = 6

type rate struct {
	every time.Duration

	mu    sync.Mutex
	until time.Time            // no call before (a 429's Retry-After)
	edits map[string]time.Time // channel → its last edit
}

func newRate(every time.Duration) *rate {
	return &rate{every: every, edits: map[string]time.Time{}}
}

// sleep waits until t or ctx ends.
func sleep(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// call runs one Web API call, keeping out of a 429's window and trying
// again after it.
func (r *rate) call(ctx context.Context, fn func(ctx context.Context) error) error {
	for attempt := 0; ; attempt++ {
		r.mu.Lock()
		until := r.until
		r.mu.Unlock()
		if err := sleep(ctx, until); err != nil {
			return err
		}
		err := fn(ctx)
		var rl *slack.RateLimitedError
		if !errors.As(err, &rl) || attempt >= maxRetries {
			return err
		}
		wait := rl.RetryAfter
		if wait <= 0 {
			wait = time.Second
		}
		r.mu.Lock()
		if t := time.Now().Add(wait); t.After(r.until) {
			r.until = t
		}
		r.mu.Unlock()
	}
}

// editAt is when channel's next edit may be made.
func (r *rate) editAt(channel string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.edits[channel].Add(r.every)
}

// edit runs a chat.update of a message in channel, no sooner than every
// after the channel's last one.
func (r *rate) edit(ctx context.Context, channel string, fn func(ctx context.Context) error) error {
	r.mu.Lock()
	next := r.edits[channel].Add(r.every)
	if now := time.Now(); next.Before(now) {
		next = now
	}
	r.edits[channel] = next // the slot is this call's
	r.mu.Unlock()
	if err := sleep(ctx, next); err != nil {
		return err
	}
	err := r.call(ctx, fn)
	r.mu.Lock()
	if now := time.Now(); now.After(r.edits[channel]) {
		r.edits[channel] = now
	}
	r.mu.Unlock()
	return err
}
