package egress

import (
	"context"
	"net"
	"time"

	"github.com/harvest-dev/harvest/base/boxhttp"
)

// serveKey is the request context key of Serve's context.
type serveKey struct{}

// Serve serves the proxy on l until ctx ends, then ends every request and
// tunnel it serves (request contexts derive from ctx), and returns once
// all its handlers have returned. It returns nil when ctx ended, and the
// error that stopped it otherwise. Serve may be called for several
// listeners (one per box) at once.
func (p *Proxy) Serve(ctx context.Context, l net.Listener) error {
	return boxhttp.Serve(ctx, l, p, boxhttp.Options{Name: "egress proxy", Logger: p.logger, Grace: 30 * time.Second,
		Context: func(ctx context.Context, _ net.Listener) context.Context {
			return context.WithValue(ctx, serveKey{}, ctx)
		}})
}
