package store

import (
	"context"
	"time"
)

// # Slack events kept until done
//
// An event is recorded with its payload (AddSlackEventPending) before
// Slack is told it arrived, and marked done (SlackEventDone: the payload
// dropped, the id kept) once its handling took effect. A server that
// died in between finds it pending when it starts again
// (PendingSlackEvents) and processes it then: Slack, having had its
// acknowledgement, never sends it again. harvest store migrate copies
// the pending ones with their payloads (DumpSlackEvents lists them).

// SlackInbox keeps the payloads of the Slack events not done yet.
type SlackInbox interface {
	// AddSlackEventPending records an event id as received (at, zero:
	// now) with its payload, pending; an id recorded before (pending or
	// done) is ErrConflict.
	AddSlackEventPending(ctx context.Context, id string, payload []byte, at time.Time) error
	// SlackEventDone marks an event done: its payload is dropped, its id
	// kept (a retry is still recognised). An id not recorded (pruned) is
	// no error.
	SlackEventDone(ctx context.Context, id string) error
	// PendingSlackEvents lists the events not done, oldest first, with
	// their payloads.
	PendingSlackEvents(ctx context.Context) ([]SlackEvent, error)
}
