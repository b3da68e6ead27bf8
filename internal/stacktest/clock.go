package stacktest

import (
	"sync"
	"time"
)

// Clock is a session.Clock the test moves with Advance: idle timeouts,
// lifetimes and the watchdog cost no waiting.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	waiters map[*clockWaiter]struct{}
}

type clockWaiter struct {
	at time.Time
	c  chan time.Time
}

// NewClock is a Clock at the wall clock's now.
func NewClock() *Clock {
	return &Clock{now: time.Now(), waiters: map[*clockWaiter]struct{}{}}
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// At returns a channel that gets the time once the clock reaches t (at
// once if it has), and a function that releases the timer.
func (c *Clock) At(t time.Time) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if !c.now.Before(t) {
		ch <- c.now
		return ch, func() {}
	}
	w := &clockWaiter{at: t, c: ch}
	c.waiters[w] = struct{}{}
	return ch, func() {
		c.mu.Lock()
		delete(c.waiters, w)
		c.mu.Unlock()
	}
}

// Advance moves the clock by d and fires every timer that is due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for w := range c.waiters {
		if !c.now.Before(w.at) {
			w.c <- c.now
			delete(c.waiters, w)
		}
	}
}
