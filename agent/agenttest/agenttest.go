// Package agenttest has what the tests of the agents share: a recorder of
// the events a turn emits, which a test can watch while the turn runs.
package agenttest

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/sim"
)

// Recorder collects a turn's events; WaitFor hands them over one at a
// time to a test that watches a running turn. Emit is safe to call from
// the turn's goroutine while the test reads.
type Recorder struct {
	mu     sync.Mutex
	events []event.Payload
	ch     chan event.Payload
}

// NewRecorder returns a recorder that holds up to 4096 events not yet
// taken by WaitFor (Emit blocks beyond that).
func NewRecorder() *Recorder { return &Recorder{ch: make(chan event.Payload, 4096)} }

// Emit records p: an agent's emit function.
func (r *Recorder) Emit(p event.Payload) {
	r.mu.Lock()
	r.events = append(r.events, p)
	r.mu.Unlock()
	r.ch <- p
}

// All returns every event so far.
func (r *Recorder) All() []event.Payload {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event.Payload(nil), r.events...)
}

// WaitFor returns the first event (from the ones not yet taken) that ok
// accepts; the test fails when ctx ends first.
func (r *Recorder) WaitFor(ctx context.Context, t testing.TB, what string, ok func(event.Payload) bool) event.Payload {
	t.Helper()
	for {
		select {
		case p := <-r.ch:
			if ok(p) {
				return p
			}
		case <-ctx.Done():
			t.Fatalf("no %s event: %v; events so far: %s", what, ctx.Err(), Types(r.All()))
			return nil
		}
	}
}

// Types lists the events' types.
func Types(ps []event.Payload) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(string(p.EventType()))
	}
	return b.String()
}

// Answered returns the requests the sim answered with rule, in order.
func Answered(s *sim.Server, rule string) []sim.Request {
	var out []sim.Request
	for _, r := range s.Requests() {
		if r.Rule == rule {
			out = append(out, r)
		}
	}
	return out
}

// AnsweredOnce returns the one request the sim answered with rule; the
// test fails when there are none or several.
func AnsweredOnce(t testing.TB, s *sim.Server, rule string) sim.Request {
	t.Helper()
	rs := Answered(s, rule)
	if len(rs) != 1 {
		t.Fatalf("rule %s answered %d requests, want 1", rule, len(rs))
	}
	return rs[0]
}
