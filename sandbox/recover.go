package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/harvest-dev/harvest/base/procutil"
	"github.com/harvest-dev/harvest/base/unixsock"
)

// DialUnix connects to a box's agent on the unix socket sock and says hello.
func DialUnix(ctx context.Context, p Provider, h Handle, sock string) (*Sandbox, error) {
	nc, err := unixsock.Dial(ctx, sock)
	if err != nil {
		return nil, fmt.Errorf("connecting to the agent of box %s: %w", h.ID, err)
	}
	return Connect(ctx, p, h, nc)
}

// endingWait is how long a failed reconnect waits for the agent to exit
// before calling the box gone.
const endingWait = 2 * time.Second

// RecoverUnix reconnects to a box whose agent is the host process agent,
// listening on the unix socket sock (local and host backends). The box is
// ErrNotFound when its agent is gone, or goes within a moment of a failed
// connect: a box ending (time limit, Stop) closes its socket just before its
// agent exits.
func RecoverUnix(ctx context.Context, p Provider, h Handle, agent procutil.ID, sock string) (*Sandbox, error) {
	if !agent.Alive() {
		return nil, fmt.Errorf("box %s: %w", h.ID, ErrNotFound)
	}
	sb, err := DialUnix(ctx, p, h, sock)
	if err != nil && agent.GoneWithin(ctx, endingWait) {
		return nil, fmt.Errorf("box %s has ended: %w", h.ID, ErrNotFound)
	}
	return sb, err
}
