package agents

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/harvest-dev/harvest/sandbox"
)

// GitEndpoint is a session's git endpoint (package gitproxy, granted for
// the session by the forge integration): served on a loopback listener in
// the box like the model proxy, so the box's `git fetch` and `git push`
// reach the forge through Harvest, which adds the real credential on the
// host and enforces the push policy.
type GitEndpoint interface {
	// Bind grants the session on ln, a listener in the box (its address
	// is the box's), and returns the environment that points the box's
	// git at it, with the session's credential and git identity.
	Bind(ln net.Listener) ([]string, error)
	// Serve serves the endpoint on ln until ctx ends or ln is closed.
	Serve(ctx context.Context, ln net.Listener) error
	// Close revokes the session's credential.
	Close()
}

// gitBridge is a GitEndpoint served in a box.
type gitBridge struct {
	ep     GitEndpoint
	ln     *sandbox.Listener
	cancel context.CancelFunc
	served chan struct{}
}

// bridgeGit serves ep in box and returns the bridge and the environment
// for the agent's commands.
func bridgeGit(ctx context.Context, box *sandbox.Sandbox, ep GitEndpoint, session string, log *slog.Logger) (*gitBridge, []string, error) {
	ln, err := box.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		ep.Close()
		return nil, nil, fmt.Errorf("bridging the git endpoint into the box: %w", err)
	}
	env, err := ep.Bind(ln)
	if err != nil {
		ln.Close()
		ep.Close()
		return nil, nil, fmt.Errorf("granting the git endpoint: %w", err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b := &gitBridge{ep: ep, ln: ln, cancel: cancel, served: make(chan struct{})}
	go func() {
		defer close(b.served)
		if err := ep.Serve(sctx, ln); err != nil && sctx.Err() == nil {
			log.Warn("serving the git endpoint in the box stopped", "session", session, "err", err)
		}
	}()
	return b, env, nil
}

func (b *gitBridge) stop() {
	b.cancel()
	b.ln.Close()
	<-b.served
	b.ep.Close()
}
