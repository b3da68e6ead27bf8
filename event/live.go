package event

import (
	"bytes"
	"slices"
	"strings"
)

// Live pieces and the stored events that coalesce them.
//
// A long reply streams as hundreds of small pieces (token deltas, tool
// output chunks, terminal bytes: the Coalescable types). Readers watching
// the session want each piece as it comes; the store does not need them
// one by one. So the journal (package journal) delivers each piece live,
// as an event with Live set (1, 2, 3, ...), and stores them later as one
// event: their payloads joined (Join), with a seq of its own.
//
//	stored  seq 41  tool.finished
//	live    seq 41  assistant.delta "Hel"   live 1   ─┐ never stored,
//	live    seq 41  assistant.delta "lo, "  live 2    │ seq of the stored
//	live    seq 41  assistant.delta "world" live 3   ─┘ event before them
//	stored  seq 42  assistant.delta "Hello, world"   (the three, joined)
//	stored  seq 43  assistant.message "Hello, world"
//
// The rules a reader relies on:
//
//   - Stored seqs are 1, 2, 3, ... with no gap: live pieces take none.
//     (Events a retention policy removed later leave an events.compacted
//     event standing for their seqs: retention.go.)
//   - Live pieces carrying seq N are pieces of one stream (same type,
//     turn, agent, repo, tool call and output stream), and joined they
//     are the payload of stored event N+1 when it has that stream (it
//     does unless the node stopped before storing them). A delivery
//     (journal.Subscription, natsbus.Follower) hands a reader only a
//     prefix of them — 1, 2, ... k, never a piece after a missing one —
//     and only when the reader is at seq N.
//   - Resuming after seq N (Last-Event-ID) replays N+1 from the store: a
//     reader that lost live pieces loses no content.
//
// So a reader that prints as it goes (a terminal) shows each live piece,
// and of stored event N+1 only what the pieces it showed did not (a
// Joiner does this); a reader that keeps a state (a page) may equally
// replace what the pieces showed by the stored event. A reader that wants
// the durable record only skips every event with Live set.

// Join appends b to a when both are pieces of one stream (b follows a in
// it): the result has b's envelope (seq, time, live number) and the
// payloads joined. ok is false when they are not of one stream.
func Join(a, b Event) (Event, bool) {
	if a.Session != b.Session || a.Turn != b.Turn || a.Agent != b.Agent || a.Repo != b.Repo {
		return a, false
	}
	p, ok := joinPayload(a.Data, b.Data)
	if !ok {
		return a, false
	}
	m := b
	m.Data = p
	return m, true
}

func joinPayload(a, b Payload) (Payload, bool) {
	switch x := a.(type) {
	case AssistantDelta:
		y, ok := b.(AssistantDelta)
		return AssistantDelta{Text: x.Text + y.Text}, ok
	case ThinkingDelta:
		y, ok := b.(ThinkingDelta)
		return ThinkingDelta{Text: x.Text + y.Text}, ok
	case ToolInputDelta:
		y, ok := b.(ToolInputDelta)
		if !ok || x.Index != y.Index {
			return nil, false
		}
		return ToolInputDelta{Index: x.Index, PartialJSON: x.PartialJSON + y.PartialJSON}, true
	case ToolOutput:
		y, ok := b.(ToolOutput)
		if !ok || x.CallID != y.CallID || x.Stream != y.Stream {
			return nil, false
		}
		return ToolOutput{CallID: x.CallID, Stream: x.Stream, Text: x.Text + y.Text}, true
	case TerminalOutput:
		y, ok := b.(TerminalOutput)
		if !ok {
			return nil, false
		}
		return TerminalOutput{Data: slices.Concat(x.Data, y.Data)}, true
	}
	return nil, false
}

// PieceSize is the size of a coalescable payload's content (text or
// bytes); 0 for any other payload.
func PieceSize(p Payload) int {
	switch x := p.(type) {
	case AssistantDelta:
		return len(x.Text)
	case ThinkingDelta:
		return len(x.Text)
	case ToolInputDelta:
		return len(x.PartialJSON)
	case ToolOutput:
		return len(x.Text)
	case TerminalOutput:
		return len(x.Data)
	}
	return 0
}

// trimPrefix returns p without the content of shown, when shown is of p's
// stream and its content is a prefix of p's; ok false otherwise.
func trimPrefix(p, shown Payload) (Payload, bool) {
	switch x := p.(type) {
	case AssistantDelta:
		y, ok := shown.(AssistantDelta)
		if !ok || !strings.HasPrefix(x.Text, y.Text) {
			return p, false
		}
		return AssistantDelta{Text: x.Text[len(y.Text):]}, true
	case ThinkingDelta:
		y, ok := shown.(ThinkingDelta)
		if !ok || !strings.HasPrefix(x.Text, y.Text) {
			return p, false
		}
		return ThinkingDelta{Text: x.Text[len(y.Text):]}, true
	case ToolInputDelta:
		y, ok := shown.(ToolInputDelta)
		if !ok || x.Index != y.Index || !strings.HasPrefix(x.PartialJSON, y.PartialJSON) {
			return p, false
		}
		return ToolInputDelta{Index: x.Index, PartialJSON: x.PartialJSON[len(y.PartialJSON):]}, true
	case ToolOutput:
		y, ok := shown.(ToolOutput)
		if !ok || x.CallID != y.CallID || x.Stream != y.Stream || !strings.HasPrefix(x.Text, y.Text) {
			return p, false
		}
		return ToolOutput{CallID: x.CallID, Stream: x.Stream, Text: x.Text[len(y.Text):]}, true
	case TerminalOutput:
		y, ok := shown.(TerminalOutput)
		if !ok || !bytes.HasPrefix(x.Data, y.Data) {
			return p, false
		}
		return TerminalOutput{Data: x.Data[len(y.Data):]}, true
	}
	return p, false
}

// Joiner is for a reader that prints a session's events as they come and
// cannot take back what it printed: it passes live pieces through and
// cuts from the stored event that coalesces them what they already
// showed (see the rules above). The zero value is ready.
type Joiner struct {
	shown Event // the live pieces passed since the last stored event, joined
	has   bool
	next  int // the live number expected next
}

// Next returns what of ev to show: ev itself, or for the stored event
// after live pieces that were passed, ev with only the rest of its
// content; ok is false when nothing is left to show of it.
func (j *Joiner) Next(ev Event) (Event, bool) {
	if ev.Live > 0 {
		switch {
		case j.has && ev.Seq == j.shown.Seq && ev.Live == j.next:
			if m, ok := Join(j.shown, ev); ok {
				j.shown, j.next = m, ev.Live+1
				return ev, true
			}
		case ev.Live == 1:
			j.shown, j.has, j.next = ev, true, 2
			return ev, true
		}
		// Not the next piece of the stream being shown: showing it would
		// break the prefix; the stored event brings it.
		return ev, false
	}
	shown, had := j.shown, j.has
	j.has = false
	if !had || ev.Seq != shown.Seq+1 || ev.Type() != shown.Type() ||
		ev.Turn != shown.Turn || ev.Agent != shown.Agent || ev.Repo != shown.Repo {
		return ev, true
	}
	rest, ok := trimPrefix(ev.Data, shown.Data)
	if !ok {
		return ev, true
	}
	ev.Data = rest
	return ev, PieceSize(rest) > 0
}
