// Package boxhttp serves an http.Handler on a listener bridged into a box
// (the model proxy, the egress proxy, the git endpoint), the way those
// proxies need: stopped by a context, and returning only once every
// handler has returned.
//
// http.Server's Shutdown and Close return with handlers still running
// (Close does not wait at all; neither waits for a handler that hijacked
// its connection, like an egress tunnel), so a proxy's Serve would leak
// goroutines past its return. Serve counts the handlers itself: after ctx
// ends it refuses new requests (503) and waits for the running ones, whose
// contexts derive from ctx and so are ending.
package boxhttp

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Options are a Serve's settings.
type Options struct {
	// Name says whose server it is, in errors and the 503 ("model proxy").
	Name string
	// Logger gets the http.Server's own errors (nil: discarded).
	Logger *slog.Logger
	// Context, when set, makes each connection's base context from ctx
	// (to carry the listener, say); default ctx itself.
	Context func(ctx context.Context, l net.Listener) context.Context
	// Grace bounds the graceful shutdown once ctx ends (default 5 s);
	// then connections are closed.
	Grace time.Duration
}

// Serve serves h on l until ctx ends, then shuts down (closing l and every
// connection) and returns nil once every handler has returned. It returns
// early, with the error, if accepting fails (the box is gone).
func Serve(ctx context.Context, l net.Listener, h http.Handler, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Grace <= 0 {
		o.Grace = 5 * time.Second
	}
	var g group
	srv := &http.Server{
		Handler:           g.wrap(h, o.Name),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute,
		BaseContext: func(ln net.Listener) context.Context {
			if o.Context != nil {
				return o.Context(ctx, ln)
			}
			return ctx
		},
		ErrorLog: slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	var err error
	select {
	case err = <-done:
		err = fmt.Errorf("%s: serving on %s: %w", o.Name, l.Addr(), err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), o.Grace)
		srv.Shutdown(sctx)
		cancel()
		<-done
	}
	srv.Close()
	g.wait()
	return err
}

// group counts running handlers.
type group struct {
	mu      sync.Mutex
	running int
	closed  bool
	idle    chan struct{} // made by wait; closed when running reaches 0
}

func (g *group) wrap(h http.Handler, name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			http.Error(w, "harvest "+name+": shutting down", http.StatusServiceUnavailable)
			return
		}
		g.running++
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			if g.running--; g.running == 0 && g.idle != nil {
				close(g.idle)
				g.idle = nil
			}
			g.mu.Unlock()
		}()
		h.ServeHTTP(w, r)
	})
}

// wait refuses new handlers and waits for the running ones.
func (g *group) wait() {
	g.mu.Lock()
	g.closed = true
	if g.running == 0 {
		g.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	g.idle = idle
	g.mu.Unlock()
	<-idle
}
