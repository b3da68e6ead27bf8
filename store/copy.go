package store

import (
	"context"
	"time"
)

// Copier is what harvest store migrate (package store/storecopy) needs of
// a store beyond Store, to copy one server's state to another store
// unchanged: listings Store has no call for, and writes that keep what
// Store's own writes would set anew (a delivery's state and attempts, a
// secret's creation time, a memory row's provenance and time, a lease's
// epoch). Every other row is copied through Store itself.
//
// The Load calls write one row (a scope's whole graph for LoadMemory) as
// given, in one transaction; a row that exists is ErrConflict. They are
// for an empty store: they skip the checks and bounds the ordinary writes
// make (a memory scope's size, an expired web session's removal).
type Copier interface {
	// DumpDeliveries lists every delivery, whatever its state, by id.
	DumpDeliveries(ctx context.Context) ([]*Delivery, error)
	// DumpWebSessions lists every web session, expired ones included, by
	// hash.
	DumpWebSessions(ctx context.Context) ([]*WebSession, error)
	// DumpMemoryScopes lists every memory scope that has an entity or was
	// seeded, by repository then owner.
	DumpMemoryScopes(ctx context.Context) ([]MemoryScopeInfo, error)
	// DumpQuotas lists every budget, by scope then subject (SetQuota
	// copies one, its UpdatedAt kept).
	DumpQuotas(ctx context.Context) ([]*Quota, error)
	// DumpSpend lists every user's spend of every day, by user then day
	// (AddSpend copies one into an empty store).
	DumpSpend(ctx context.Context) ([]Spend, error)
	// DumpSlackEvents lists the Slack event ids recorded (AddSlackEvent),
	// by id.
	DumpSlackEvents(ctx context.Context) ([]SlackEvent, error)
	// DumpSlackThreads lists every session's Slack thread, by session.
	DumpSlackThreads(ctx context.Context) ([]*SlackThread, error)
	// DumpSlackChannels lists every channel's default repository, by team
	// then channel.
	DumpSlackChannels(ctx context.Context) ([]*SlackChannel, error)

	// LoadDelivery stores d with its state, attempts, result and times.
	LoadDelivery(ctx context.Context, d *Delivery) error
	// LoadSecret stores x with its times (PutSecret sets a new secret's
	// CreatedAt to its UpdatedAt).
	LoadSecret(ctx context.Context, x *Secret) error
	// LoadMemory stores g (ReadMemory's, whole) in scope sc, which must
	// have no entity, with every row's session, turn and time, and marks
	// the scope seeded at seeded unless it is zero. Observations keep
	// their order.
	LoadMemory(ctx context.Context, sc MemoryScope, g *MemoryGraph, seeded time.Time) error
	// LoadLease stores a session's lease with its node, epoch and generation
	// (its expiry is its node's heartbeat's; nodes are not copied),
	// so the session's epochs go on from there and never go back.
	LoadLease(ctx context.Context, l Lease) error
	// LoadSlackChannel stores c with its UpdatedAt (SetSlackChannel sets
	// it to now).
	LoadSlackChannel(ctx context.Context, c *SlackChannel) error
}

// SlackEvent is a Slack event id DumpSlackEvents lists, with when it was
// received (AddSlackEvent's at) and, while it is pending, its payload
// (AddSlackEventPending's; nil once done).
type SlackEvent struct {
	ID         string    `json:"id"`
	ReceivedAt time.Time `json:"received_at"`
	Payload    []byte    `json:"payload,omitempty"`
}

// MemoryScopeInfo is a memory scope DumpMemoryScopes lists: Seeded is
// when SeedMemory seeded it (zero: never).
type MemoryScopeInfo struct {
	Scope  MemoryScope
	Seeded time.Time
}

// Spend is a user's model spend of a day (DumpSpend).
type Spend struct {
	User string  `json:"user"`
	Day  string  `json:"day"`
	USD  float64 `json:"usd"`
}
