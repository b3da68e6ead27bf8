package stacktest

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/sandbox/docker"
	"github.com/harvest-dev/harvest/sandbox/local"
	"github.com/harvest-dev/harvest/store"
)

const script = `
rules:
  - reply: {text: "ok"}
`

func TestClock(t *testing.T) {
	c := NewClock()
	start := c.Now()
	due, release := c.At(start.Add(-time.Second))
	defer release()
	select {
	case <-due:
	default:
		t.Fatal("a timer already due did not fire at once")
	}
	later, releaseLater := c.At(start.Add(time.Minute))
	defer releaseLater()
	gone, releaseGone := c.At(start.Add(time.Minute))
	releaseGone()
	c.Advance(59 * time.Second)
	select {
	case <-later:
		t.Fatal("a timer fired before it was due")
	default:
	}
	c.Advance(time.Second)
	select {
	case at := <-later:
		if !at.Equal(start.Add(time.Minute)) {
			t.Fatalf("fired at %v, want %v", at, start.Add(time.Minute))
		}
	default:
		t.Fatal("a due timer did not fire")
	}
	select {
	case <-gone:
		t.Fatal("a released timer fired")
	default:
	}
}

// TestStack: a stack's pieces are wired to one another, its watcher sees
// every event once across a cut-off, and CheckGapless reads them back.
func TestStack(t *testing.T) {
	var hits atomic.Int32
	s := New(t, script, SimHook(func(*http.Request) { hits.Add(1) }))
	if p, err := s.Backends(local.Name); err != nil || p != s.Local {
		t.Fatalf("Backends(local) = %v, %v; want the stack's provider", p, err)
	}
	if _, err := s.Backends(docker.Name); err == nil {
		t.Fatal("Backends(docker) without WithDocker did not fail")
	}
	if got := s.Models().Endpoints["anthropic"]; got.BaseURL != s.Sim.URL || got.APIKey != "sk-test" {
		t.Fatalf("the anthropic endpoint is %+v, want the sim with key sk-test", got)
	}
	if err := s.Sources.CheckCopy(s.Repo); err != nil {
		t.Fatalf("the source policy refuses the stack's repository: %v", err)
	}
	if boxes := s.Boxes(); len(boxes) != 0 {
		t.Fatalf("boxes of a new stack: %v", boxes)
	}
	req, err := http.NewRequest(http.MethodPost, s.Sim.URL+"/v1/messages", strings.NewReader(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", s.Key)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || hits.Load() != 1 || len(s.Sim.Load().Requests()) != 1 {
		t.Fatalf("the sim answered %s after %d hook calls and logged %d requests, want 200, 1, 1", resp.Status, hits.Load(), len(s.Sim.Load().Requests()))
	}

	st, j := s.Open(journal.Options{Buffer: 2})
	ctx := testbin.Context(t)
	if err := st.CreateSession(ctx, &store.Session{ID: "s-1", Owner: "o", State: store.StateIdle, Agent: "builtin", Backend: local.Name}, nil); err != nil {
		t.Fatal(err)
	}
	w := Watch(t, "s-1", func(after int64) (*journal.Subscription, error) { return j.Subscribe(ctx, "s-1", after) })
	const n = 50 // more than the subscription's buffer: it is cut off
	for i := range n {
		if _, err := j.Append(event.Event{Session: "s-1", Data: event.SessionState{State: string(store.StateIdle), Reason: string(rune('a' + i%26))}}); err != nil {
			t.Fatal(err)
		}
	}
	w.Until("the last event", func(ev event.Event) bool { return ev.Seq == n })
	for i, ev := range w.Seen {
		if ev.Seq != int64(i+1) {
			t.Fatalf("the watcher saw seq %d as event %d:%s", ev.Seq, i+1, Describe(w.Seen))
		}
	}
	if err := j.Flush(ctx, "s-1"); err != nil {
		t.Fatal(err)
	}
	if evs := CheckGapless(t, st, "s-1"); len(evs) != n {
		t.Fatalf("the store holds %d events, want %d", len(evs), n)
	}
	states, _ := OfType[event.SessionState](w.Seen)
	if len(states) != n {
		t.Fatalf("OfType found %d session states, want %d", len(states), n)
	}
}

func TestInheritOutsideAChild(t *testing.T) {
	if _, ok := Inherit(t); ok {
		t.Fatal("Inherit found a parent's stack in a process that has none")
	}
}
