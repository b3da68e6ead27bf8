package journal

import (
	"errors"
	"fmt"
	"testing"

	"github.com/harvest-dev/harvest/event"
)

// liveSub is a live subscription of a journal that stores every piece
// (no live pieces): the rules for stored coalescable events.
func liveSub(buffer int) *Subscription {
	return &Subscription{j: &Journal{opt: Options{Buffer: buffer, StoreEvery: -1}}, live: true,
		ending: make(chan struct{}), wake: make(chan struct{}, 1)}
}

func ev(seq int64, p event.Payload) event.Event {
	return event.Event{Session: "s", Seq: seq, Turn: "t1", Data: p}
}

func seqs(q []event.Event) string {
	var out []string
	for _, e := range q {
		out = append(out, fmt.Sprintf("%d:%s", e.Seq, e.Type()))
	}
	return fmt.Sprint(out)
}

// TestOfferWhenFull checks the slow-subscriber rules one event at a time.
func TestOfferWhenFull(t *testing.T) {
	msg := event.AssistantMessage{Text: "m"}
	s := liveSub(4)
	s.offer([]event.Event{ev(1, msg), ev(2, event.AssistantDelta{Text: "a"}), ev(3, event.ToolOutput{CallID: "c1", Text: "x"}), ev(4, msg)})
	if got := seqs(s.queue); got != "[1:assistant.message 2:assistant.delta 3:tool.output 4:assistant.message]" {
		t.Fatalf("queue %s", got)
	}
	// Full; the tail cannot take a delta: it is dropped.
	s.offer([]event.Event{ev(5, event.AssistantDelta{Text: "b"})})
	if got := seqs(s.queue); got != "[1:assistant.message 2:assistant.delta 3:tool.output 4:assistant.message]" || s.dropped != 1 {
		t.Fatalf("after a delta on a full queue: %s, dropped %d", got, s.dropped)
	}
	// A must-deliver event evicts the oldest coalescable one.
	s.offer([]event.Event{ev(6, event.TurnFinished{Result: "ok"})})
	if got := seqs(s.queue); got != "[1:assistant.message 3:tool.output 4:assistant.message 6:turn.finished]" || s.dropped != 2 {
		t.Fatalf("after turn.finished on a full queue: %s, dropped %d", got, s.dropped)
	}
	s.offer([]event.Event{ev(7, event.SessionState{State: "idle"})})
	if got := seqs(s.queue); got != "[1:assistant.message 4:assistant.message 6:turn.finished 7:session.state]" {
		t.Fatalf("after session.state on a full queue: %s", got)
	}
	if s.ended != nil {
		t.Fatalf("ended early: %v", s.ended)
	}
	// Nothing left to evict: cut off, queue kept for delivery.
	s.offer([]event.Event{ev(8, msg), ev(9, msg)})
	if !errors.Is(s.ended, ErrTooSlow) {
		t.Fatalf("ended = %v, want ErrTooSlow", s.ended)
	}
	if got := seqs(s.queue); got != "[1:assistant.message 4:assistant.message 6:turn.finished 7:session.state]" {
		t.Fatalf("queue after the cut-off: %s", got)
	}
	s.offer([]event.Event{ev(10, msg)})
	if len(s.queue) != 4 {
		t.Fatalf("an ended subscription took an event")
	}
}

// TestOfferMerges: on a full queue, a piece of a stream merges into the
// piece before it.
func TestOfferMerges(t *testing.T) {
	s := liveSub(2)
	s.offer([]event.Event{ev(1, event.AssistantMessage{}), ev(2, event.AssistantDelta{Text: "he"})})
	s.offer([]event.Event{ev(3, event.AssistantDelta{Text: "ll"}), ev(4, event.AssistantDelta{Text: "o"})})
	if len(s.queue) != 2 || s.queue[1].Seq != 4 || s.queue[1].Data.(event.AssistantDelta).Text != "hello" {
		t.Fatalf("deltas not merged: %+v", s.queue)
	}
	// Different streams do not merge.
	s = liveSub(1)
	s.offer([]event.Event{ev(1, event.ToolOutput{CallID: "c1", Stream: "stdout", Text: "a"})})
	s.offer([]event.Event{ev(2, event.ToolOutput{CallID: "c1", Stream: "stderr", Text: "b"}), ev(3, event.ToolOutput{CallID: "c2", Stream: "stdout", Text: "c"})})
	s.offer([]event.Event{ev(4, event.ToolOutput{CallID: "c1", Stream: "stdout", Text: "d"})})
	if len(s.queue) != 1 || s.queue[0].Seq != 4 || s.queue[0].Data.(event.ToolOutput).Text != "ad" || s.dropped != 3 {
		t.Fatalf("tool output merge: %+v dropped %d", s.queue, s.dropped)
	}
	// Terminal bytes are copied, not aliased.
	a := []byte("ab")
	s = liveSub(1)
	s.offer([]event.Event{ev(1, event.TerminalOutput{Data: a[:1]})})
	s.offer([]event.Event{ev(2, event.TerminalOutput{Data: []byte("X")})})
	if got := string(s.queue[0].Data.(event.TerminalOutput).Data); got != "aX" || string(a) != "ab" {
		t.Fatalf("terminal merge: %q, original now %q", got, a)
	}
	// Deltas of different turns do not merge.
	s = liveSub(1)
	s.offer([]event.Event{ev(1, event.AssistantDelta{Text: "a"})})
	e := ev(2, event.AssistantDelta{Text: "b"})
	e.Turn = "t2"
	s.offer([]event.Event{e})
	if s.queue[0].Data.(event.AssistantDelta).Text != "a" {
		t.Fatalf("deltas of two turns merged")
	}
}

// TestOfferWhileReplaying: during the replay an overflow discards the
// queue (the store has it all) instead of cutting off or coalescing.
func TestOfferWhileReplaying(t *testing.T) {
	s := liveSub(2)
	s.live = false
	msg := event.AssistantMessage{}
	s.offer([]event.Event{ev(1, msg), ev(2, msg), ev(3, msg)})
	if !s.overflowed || s.ended != nil || seqs(s.queue) != "[3:assistant.message]" {
		t.Fatalf("overflow while replaying: overflowed %v ended %v queue %s", s.overflowed, s.ended, seqs(s.queue))
	}
}
