package server

import (
	"context"
	"net/http"
	"sync"

	"github.com/harvest-dev/harvest/wire"
)

// ready answers GET /readyz: whether this server can take new work now,
// check by check. Draining (a planned restart, or the API closing) is
// checked here; the rest are Config.Ready's, run at once, each within
// ReadyTimeout. 200 when all passed, else 503: a load balancer sends new
// work elsewhere, and the body says which check failed and why.
func (s *Server) ready(w http.ResponseWriter, r *http.Request, _ caller) *apiError {
	if e := noBody(w, r); e != nil {
		return e
	}
	checks := make([]wire.ReadyCheck, 1+len(s.cfg.Ready))
	checks[0] = wire.ReadyCheck{Name: "draining", OK: true}
	switch {
	case s.draining.Load():
		checks[0].OK, checks[0].Error = false, "the server is shutting down"
	case s.cfg.Manager.Draining():
		checks[0].OK, checks[0].Error = false, "the server is draining for a restart: it finishes its turns and takes no new session or message"
	}
	var wg sync.WaitGroup
	for i, c := range s.cfg.Ready {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
			defer cancel()
			checks[i+1] = wire.ReadyCheck{Name: c.Name, OK: true}
			if err := c.Check(ctx); err != nil {
				checks[i+1].OK, checks[i+1].Error = false, err.Error()
			}
		}()
	}
	wg.Wait()
	body := Readiness{Status: "ready", Checks: checks}
	status := http.StatusOK
	for _, c := range checks {
		if !c.OK {
			body.Status, status = "not_ready", http.StatusServiceUnavailable
		}
	}
	if status != http.StatusOK {
		w.Header().Set("Retry-After", "5")
	}
	writeJSON(w, status, body)
	return nil
}

// metrics serves GET /metrics to admin tokens: Prometheus' text format.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request, _ caller) *apiError {
	if e := noBody(w, r); e != nil {
		return e
	}
	if s.cfg.Metrics == nil {
		return errorf(http.StatusNotFound, CodeNotFound, "this server serves no metrics here: see harvest serve --metrics-listen")
	}
	s.cfg.Metrics.ServeHTTP(w, r)
	return nil
}
