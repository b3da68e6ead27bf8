// Package llmtest is the conformance suite every llm.Provider passes, and the
// helpers its tests share. Everything runs against `harvest sim` (package sim)
// over real HTTP on loopback: a provider under test talks to a server that
// speaks its API's wire protocol from a script, and the suite checks both what
// the provider made of the reply and, in the sim's request log, what it sent.
package llmtest

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/sim"
)

// Backend is a provider under test.
type Backend struct {
	// API is the wire protocol: sim.APIAnthropic or sim.APIOpenAI.
	API string
	// Model is a model id the built-in price table knows.
	Model string
	// New returns a provider talking to the sim at rootURL (no path).
	New func(t testing.TB, rootURL string) llm.Provider
}

// Sim is a running sim.
type Sim struct {
	*sim.Server
	// URL is the root URL (http://127.0.0.1:port).
	URL string
	ts  *httptest.Server
}

// StartSim parses script and serves it on a loopback port; the server stops
// when the test ends.
func StartSim(t testing.TB, script string) *Sim {
	t.Helper()
	s, err := sim.ParseScript(t.Name()+".yaml", []byte(script))
	if err != nil {
		t.Fatalf("sim script: %v", err)
	}
	srv := sim.New(s)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &Sim{Server: srv, URL: ts.URL, ts: ts}
}

// Log stops the server, waiting for every handler to return, and returns the
// complete request log. (A handler whose client went away, after a timeout or
// a cancel, may still be finishing; closing first makes the log final.)
func (s *Sim) Log() []sim.Request {
	s.ts.Close()
	return s.Requests()
}

// Statuses returns the HTTP status of each logged request.
func Statuses(reqs []sim.Request) []int {
	out := make([]int, len(reqs))
	for i, r := range reqs {
		out[i] = r.Status
	}
	return out
}

// Sleeps records the delays a RetryPolicy asks for instead of sleeping.
type Sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

// Sleep is a RetryPolicy.Sleep that records d and returns at once (with ctx's
// error if it is done).
func (s *Sleeps) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

// Delays returns the recorded delays.
func (s *Sleeps) Delays() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.d)
}

// Client returns a client for b at the sim, whose retry policy records its
// delays in the returned Sleeps and never sleeps, with no jitter.
func Client(t testing.TB, b Backend, s *Sim) (*llm.Client, *Sleeps) {
	sl := &Sleeps{}
	return &llm.Client{
		Provider: b.New(t, s.URL),
		Model:    b.Model,
		Retry:    llm.RetryPolicy{BaseDelay: time.Millisecond, Jitter: -1, Sleep: sl.Sleep},
	}, sl
}

// Calls records what a Client's Observer hears.
type Calls struct {
	mu   sync.Mutex
	List []llm.Call
}

// ModelCall implements llm.Observer.
func (c *Calls) ModelCall(call llm.Call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.List = append(c.List, call)
}

// Only returns the one call heard, failing the test when there were
// more or none.
func (c *Calls) Only(t testing.TB) llm.Call {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.List) != 1 {
		t.Fatalf("the observer heard %d calls, want 1: %+v", len(c.List), c.List)
	}
	return c.List[0]
}

// Events records streamed events. Its Add is the callback to pass to Stream.
type Events struct {
	List []llm.Event
}

// Add appends ev.
func (e *Events) Add(ev llm.Event) { e.List = append(e.List, ev) }

// Text concatenates the text deltas of the block at index.
func (e *Events) Text(index int) string {
	var s string
	for _, ev := range e.List {
		if d, ok := ev.(llm.TextDelta); ok && d.Index == index {
			s += d.Text
		}
	}
	return s
}

// Count returns how many events satisfy f.
func (e *Events) Count(f func(llm.Event) bool) int {
	n := 0
	for _, ev := range e.List {
		if f(ev) {
			n++
		}
	}
	return n
}

// Body decodes a logged request body into a generic JSON value, for
// assertions on what the provider sent. (Tests only: the providers
// themselves use typed structs.)
func Body(t testing.TB, r sim.Request) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("request %d body is not a JSON object: %v", r.Seq, err)
	}
	return m
}

// JSONEqual reports whether a and b are the same JSON value.
func JSONEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("not JSON: %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("not JSON: %s: %v", b, err)
	}
	xa, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xa) == string(yb)
}
