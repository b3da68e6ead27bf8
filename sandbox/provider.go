package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Provider creates and manages boxes on one backend. See the package doc for the
// contract. Implementations are safe for concurrent use.
type Provider interface {
	// Name is the backend's name: "local", "docker", "host".
	Name() string
	// Available says whether this backend can run boxes here. It returns nil or
	// an *UnavailableError saying why not and how to fix it.
	Available(ctx context.Context) error
	// Start creates a box and returns it connected. On error nothing is left
	// behind.
	Start(ctx context.Context, spec Spec) (*Sandbox, error)
	// Recover reconnects to a running box from its persisted Handle. A box that
	// no longer runs gives ErrNotFound (Destroy it to release what is left).
	Recover(ctx context.Context, h Handle) (*Sandbox, error)
	// Stop sends SIGTERM to every process in the box, waits up to grace, then
	// kills what is left.
	Stop(ctx context.Context, h Handle, grace time.Duration) error
	// Destroy kills everything in the box and releases all its resources.
	// Idempotent: a box that is already gone is not an error.
	Destroy(ctx context.Context, h Handle) error
}

// Lister is implemented by providers that can enumerate the boxes they own,
// including ones a crashed Harvest left behind, so they can be reaped.
type Lister interface {
	List(ctx context.Context) ([]Handle, error)
}

// Handle identifies a box and holds what its backend needs to find it again.
// It is plain JSON: persist it to Recover or Destroy the box after a restart.
type Handle struct {
	ID      string    `json:"id"`
	Backend string    `json:"backend"`
	Created time.Time `json:"created"`
	// Deadline is when the box's time limit ends it.
	Deadline time.Time `json:"deadline"`
	// Spec is the spec the box was created from (with defaults applied).
	Spec Spec `json:"spec"`
	// Unsafe marks boxes without isolation (the host backend): none of
	// Spec.Limits holds.
	Unsafe bool `json:"unsafe,omitempty"`
	// Unenforced names the limits of Spec the backend asked for and could
	// not set ("memory", "pids"): dockerd discards a limit its kernel
	// cannot enforce, with a warning, and starts the box all the same.
	Unenforced []string `json:"unenforced,omitempty"`
	// Data is backend-specific: the local backend's pids and cgroup paths, the
	// docker backend's container id.
	Data json.RawMessage `json:"data,omitempty"`
}

// Errors callers branch on.
var (
	// ErrNotFound: the box does not exist or no longer runs. Destroy the handle
	// to release anything left and create a new box.
	ErrNotFound = errors.New("sandbox not found")
	// ErrClosed: the connection to the box's agent is closed (the Sandbox was
	// closed, or the box died). Recover the box to reconnect, or check whether
	// it still runs.
	ErrClosed = errors.New("sandbox connection closed")
	// ErrUnsafeNotAllowed: the host backend was requested without the explicit
	// unsafe opt-in.
	ErrUnsafeNotAllowed = errors.New("the host backend runs commands on this machine with no isolation; pass --unsafe-host to allow it")
)

// UnavailableError says why a backend cannot run here and what to do about it.
type UnavailableError struct {
	Backend string
	Reason  string
	Fix     string
}

func (e *UnavailableError) Error() string {
	msg := fmt.Sprintf("%s backend unavailable: %s", e.Backend, e.Reason)
	if e.Fix != "" {
		msg += "; " + e.Fix
	}
	return msg
}
