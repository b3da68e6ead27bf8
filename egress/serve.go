package egress

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// serveKey is the request context key of Serve's context.
type serveKey struct{}

// Serve serves the proxy on l until ctx ends, then ends every request and
// tunnel it serves (request contexts derive from ctx), and returns once
// all its handlers have returned. It returns nil when ctx ended, and the
// error that stopped it otherwise. Serve may be called for several
// listeners (one per box) at once.
func (p *Proxy) Serve(ctx context.Context, l net.Listener) error {
	// handlers counts the running handlers: http.Server does not wait
	// for those that hijacked their connection (tunnels).
	var (
		mu       sync.Mutex
		closed   bool
		handlers sync.WaitGroup
	)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			if closed {
				mu.Unlock()
				http.Error(w, "harvest egress: shutting down", http.StatusServiceUnavailable)
				return
			}
			handlers.Add(1)
			mu.Unlock()
			defer handlers.Done()
			p.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return context.WithValue(ctx, serveKey{}, ctx) },
		ErrorLog:          slog.NewLogLogger(p.logger.Handler(), slog.LevelWarn),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	var err error
	select {
	case err = <-done:
		err = fmt.Errorf("egress proxy: serving on %s: %w", l.Addr(), err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		srv.Shutdown(sctx)
		cancel()
		<-done
	}
	srv.Close()
	mu.Lock()
	closed = true
	mu.Unlock()
	handlers.Wait()
	return err
}
