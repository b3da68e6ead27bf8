// Package agent is the contract between a Harvest session and the agent that
// works in it: the builtin loop (agent/builtin) now, the Claude Code,
// OpenCode and terminal agents later. The session layer owns the sandbox, the
// message queue and the events' envelopes; an agent turns one user message
// into work, emitting typed event payloads as it goes.
package agent

import (
	"context"

	"github.com/harvest-dev/harvest/event"
)

// Agent runs the turns of one conversation. Turns are sequential: Turn is
// never called while another is running.
type Agent interface {
	// Turn works on one user message until the agent is done, a limit is hit
	// or ctx is cancelled. It emits payloads in order (emit is never called
	// concurrently) and ends with exactly one of turn.finished,
	// turn.cancelled or turn.failed, which it also returns as the Outcome.
	Turn(ctx context.Context, prompt string, emit func(event.Payload)) Outcome
	// State is the conversation so far, to persist across suspension; the
	// agent's constructor takes it back.
	State() ([]byte, error)
	// Close releases what the agent holds in its sandbox (background
	// processes). The sandbox itself belongs to the caller.
	Close(ctx context.Context) error
}

// Outcome is how a turn ended: the payload of its last event.
type Outcome struct {
	Finished  *event.TurnFinished
	Cancelled *event.TurnCancelled
	Failed    *event.TurnFailed
}

// Payload returns the outcome's event payload.
func (o Outcome) Payload() event.Payload {
	switch {
	case o.Finished != nil:
		return *o.Finished
	case o.Cancelled != nil:
		return *o.Cancelled
	case o.Failed != nil:
		return *o.Failed
	}
	return nil
}
