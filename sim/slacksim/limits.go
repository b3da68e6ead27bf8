package slacksim

import (
	"fmt"
	"slices"
	"time"
)

// Rate limits (limits.go). Slack limits each Web API method per app and
// workspace by tier (1: 1+ a minute ... 4: 100+ a minute), some methods
// by special rules (chat.postMessage about one message a second per
// channel, with short bursts), and answers a call over the limit with
// HTTP 429, a Retry-After header in seconds and {"ok": false, "error":
// "ratelimited"}. Refused calls are in the request log with their
// Retry-After, so a test can check that none came inside a window.

// Limit is at most Count calls in any window of Per, per app, or per
// channel when PerChannel.
type Limit struct {
	Count      int           `json:"count"`
	Per        time.Duration `json:"per"`
	PerChannel bool          `json:"per_channel"`
}

func (l Limit) check(method string) error {
	if l.Count <= 0 || l.Per <= 0 {
		return fmt.Errorf("limit of %s: count and per must be positive", method)
	}
	return nil
}

// Tiers are Slack's tiers as the stand-in applies them, calls a minute.
// Slack's "1+" means bursts beyond one are allowed: tier 1 takes 10.
var Tiers = map[int]Limit{
	1: {Count: 10, Per: time.Minute},
	2: {Count: 20, Per: time.Minute},
	3: {Count: 50, Per: time.Minute},
	4: {Count: 100, Per: time.Minute},
}

// specialLimits are the methods whose limits are not a tier.
var specialLimits = map[string][]Limit{
	// "1 per second per channel, short bursts allowed".
	"chat.postMessage": {{Count: 3, Per: 3 * time.Second, PerChannel: true}},
	// Tier 3, and about once a second per channel (what Harvest's
	// progress message must keep to).
	"chat.update": {Tiers[3], {Count: 1, Per: time.Second, PerChannel: true}},
}

// Limits returns the limits a method is held to.
func (s *Server) Limits(method string) []Limit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.limits.of(method, methods[method].tier)
}

type storm struct {
	until   time.Time
	methods []string
}

type limiter struct {
	overrides map[string][]Limit
	hits      map[string][]time.Time // method or method+channel → admitted calls
	storm     storm
}

func newLimiter(over map[string]Limit) limiter {
	l := limiter{overrides: map[string][]Limit{}, hits: map[string][]time.Time{}}
	for m, x := range over {
		l.overrides[m] = []Limit{x}
	}
	return l
}

func (l *limiter) of(method string, tier int) []Limit {
	if o, ok := l.overrides[method]; ok {
		return o
	}
	if sp, ok := specialLimits[method]; ok {
		return sp
	}
	if t, ok := Tiers[tier]; ok {
		return []Limit{t}
	}
	return nil
}

// admit counts a call, or returns the seconds to wait (Retry-After).
func (l *limiter) admit(now time.Time, method string, tier int, channel string) int {
	if now.Before(l.storm.until) && (len(l.storm.methods) == 0 || slices.Contains(l.storm.methods, method)) {
		return ceilSeconds(l.storm.until.Sub(now))
	}
	lims := l.of(method, tier)
	wait := time.Duration(0)
	keys := make([]string, len(lims))
	for i, x := range lims {
		keys[i] = method
		if x.PerChannel {
			keys[i] = method + "/" + channel
		}
		var in []time.Time
		for _, t := range l.hits[keys[i]] {
			if now.Sub(t) < x.Per {
				in = append(in, t)
			}
		}
		if len(in) >= x.Count {
			wait = max(wait, in[len(in)-x.Count].Add(x.Per).Sub(now))
		}
	}
	if wait > 0 {
		return ceilSeconds(wait)
	}
	for _, k := range keys {
		h := l.hits[k]
		// Keep what any window still needs (a day at most).
		for len(h) > 0 && now.Sub(h[0]) > 24*time.Hour {
			h = h[1:]
		}
		l.hits[k] = append(h, now)
	}
	return 0
}

func ceilSeconds(d time.Duration) int {
	n := int((d + time.Second - 1) / time.Second)
	return max(n, 1)
}

// SetLimit replaces a method's limits (none: unlimited).
func (s *Server) SetLimit(method string, limits ...Limit) error {
	if _, ok := methods[method]; !ok {
		return fmt.Errorf("no method %q", method)
	}
	for _, l := range limits {
		if err := l.check(method); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.limits.overrides[method] = slices.Clone(limits)
	return nil
}

// StormSpec refuses every call (of Methods, or of every method) with
// 429 for For, each with Retry-After the seconds left.
type StormSpec struct {
	For     time.Duration `json:"for"`
	Methods []string      `json:"methods"`
}

// Storm starts a 429 storm; it ends when For has passed on the clock.
func (s *Server) Storm(spec StormSpec) (time.Time, error) {
	if spec.For <= 0 {
		return time.Time{}, fmt.Errorf("storm: for must be positive")
	}
	for _, m := range spec.Methods {
		if _, ok := methods[m]; !ok {
			return time.Time{}, fmt.Errorf("storm: no method %q", m)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	until := s.clock.Now().Add(spec.For)
	s.st.limits.storm = storm{until: until, methods: slices.Clone(spec.Methods)}
	return until, nil
}
