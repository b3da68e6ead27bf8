package llm

import (
	"context"
	"math/rand/v2"
	"time"
)

// RetryPolicy says how Client retries a failed attempt. The zero value gives
// the defaults below; each zero field takes its default.
type RetryPolicy struct {
	// MaxAttempts counts the first attempt too; default 5. 1 disables retries.
	MaxAttempts int
	// BaseDelay is the backoff before the first retry, doubled for each
	// further one; default 1s.
	BaseDelay time.Duration
	// MaxDelay caps the exponential backoff; default 30s.
	MaxDelay time.Duration
	// MaxRetryAfter caps how long Client waits when the API asks for a delay
	// (retry-after). When the API asks for more, Client does not retry at all:
	// a shorter wait would be refused again, and a call blocked for minutes is
	// worse than an ErrRateLimited whose RetryAfter lets the caller schedule.
	// Default 60s.
	MaxRetryAfter time.Duration
	// Jitter removes up to this fraction of each backoff at random, so that many
	// sessions failing together do not retry together; default 0.2, negative for
	// none. A retry-after delay is never shortened.
	Jitter float64

	// Sleep waits d or until ctx is done (then it returns ctx's error). Tests
	// inject one to observe delays without sleeping; nil uses a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a number in [0, 1) for the jitter; nil uses math/rand/v2.
	Rand func() float64
	// OnRetry, when set, is told about each retry before its delay, e.g. to log
	// it or to show "retrying in 4s" in a session.
	OnRetry func(RetryInfo)
}

// RetryInfo describes one retry.
type RetryInfo struct {
	// Attempt is the attempt that failed (1 for the first).
	Attempt int
	// Err is why it failed.
	Err *Error
	// Delay is how long Client waits before the next attempt.
	Delay time.Duration
}

// DefaultRetryPolicy returns the defaults, spelled out.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{}.withDefaults()
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 5
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = time.Second
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = 30 * time.Second
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = 60 * time.Second
	}
	switch {
	case p.Jitter == 0:
		p.Jitter = 0.2
	case p.Jitter > 1:
		p.Jitter = 1
	}
	if p.Sleep == nil {
		p.Sleep = sleep
	}
	if p.Rand == nil {
		p.Rand = rand.Float64
	}
	return p
}

// Delay returns how long to wait after failed attempt number attempt (1-based)
// whose error asked for retryAfter (0 if it did not), and false when the
// retry-after is longer than MaxRetryAfter. It expects a policy with defaults
// applied (DefaultRetryPolicy or a Client's).
func (p RetryPolicy) Delay(attempt int, retryAfter time.Duration) (time.Duration, bool) {
	p = p.withDefaults()
	if retryAfter > p.MaxRetryAfter {
		return 0, false
	}
	d := p.MaxDelay
	if shift := attempt - 1; shift < 31 {
		if b := p.BaseDelay << shift; b > 0 && b < p.MaxDelay {
			d = b
		}
	}
	if p.Jitter > 0 {
		d -= time.Duration(float64(d) * p.Jitter * p.Rand())
	}
	return max(d, retryAfter), true
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
