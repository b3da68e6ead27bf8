package event

// Retention: what is left of a session's events once they are old.
//
// A server may keep events for a while only (harvest serve
// --event-retention): the events of a session that has not been live
// for that long are compacted (package session's janitor, through
// store.Store.CompactEvents). Compacting removes the bulky events — the
// Bulky types: text, thinking, tool calls with their input and output,
// terminal bytes — and keeps the turn-level record, which is what a
// session's list, its summary and a resume read:
//
//	kept                          why
//	session.state                 the session's life (the list, a resume's repair)
//	message.queued, .delivered    what was asked, and which turn took it
//	turn.started, step.finished   each turn's prompt, steps, usage and cost
//	turn.finished, .cancelled,    how each turn ended; turn.finished's result
//	  .failed                       is the final answer (the CLI and the page
//	                                show it when the messages are gone)
//	git.*, pr.*, github.failed    what the session did to the repositories
//	compaction, loop.detected,    small notes a reader of the history wants
//	  todo.updated, stuck,
//	  shell.opened, shell.closed
//
// A type added later is kept unless it is listed in Bulky: keeping too
// much costs space, removing too much loses history.
//
// Seqs are never renumbered. Each run of removed events (the events
// between two kept ones) is replaced by one EventsCompacted event whose
// seq is the run's last seq and whose From is its first: so a stored
// session's seqs are still 1, 2, 3, ... with no gap, except that an
// events.compacted event stands for the seqs From through its own. A
// reader resuming after any seq of the run (Last-Event-ID) gets the
// marker, and the events after it, never a silent gap; LastSeq does not
// go back, so a session resumed after compaction goes on with the next
// seq.

// TypeEventsCompacted is the marker a compacted run of events leaves.
const TypeEventsCompacted Type = "events.compacted"

// EventsCompacted: the events with seqs From through the marker's own seq
// (To) were removed by the retention policy (Reason: "retention"). Its
// seq is To, so a reader that resumes after any of them gets it.
type EventsCompacted struct {
	From   int64  `json:"from"`
	To     int64  `json:"to"`
	Reason string `json:"reason"`
}

// RetentionReason is EventsCompacted.Reason for the retention policy.
const RetentionReason = "retention"

func (EventsCompacted) EventType() Type { return TypeEventsCompacted }

// Missed is how many of the removed events a reader that already has
// every event through seq last did not see: those after last (all of
// them when last is before From, none when it is at To or after).
func (c EventsCompacted) Missed(last int64) int64 {
	from := max(c.From, last+1)
	if from > c.To {
		return 0
	}
	return c.To - from + 1
}

// Bulky reports whether retention removes events of type t (see the top
// of this file): the streamed text and thinking, tool calls with their
// input and output, terminal bytes. Everything else is kept.
func Bulky(t Type) bool {
	switch t {
	case TypeAssistantDelta, TypeAssistantMessage, TypeThinkingDelta, TypeThinking,
		TypeToolStarted, TypeToolInputDelta, TypeToolOutput, TypeToolFinished,
		TypeTerminalOutput:
		return true
	}
	return false
}

func init() { register(EventsCompacted{}) }
