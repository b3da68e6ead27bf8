package stacktest

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/harvest-dev/harvest/sim"
)

// Sim is harvest sim serving on loopback in the test process. A test may
// swap the server it plays (Store) while it runs; the URL stays.
type Sim struct {
	URL string
	cur atomic.Pointer[sim.Server]
}

// StartSim starts a sim playing script, stopped when the test ends. hook,
// if not nil, is called with every request before the sim answers it (it
// may read the body if it puts it back).
func StartSim(t testing.TB, script string, hook func(*http.Request)) *Sim {
	t.Helper()
	sc, err := sim.ParseScript("script.yaml", []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	s := &Sim{}
	s.cur.Store(sim.New(sc))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hook != nil {
			hook(r)
		}
		s.cur.Load().ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	s.URL = hs.URL
	return s
}

// Load is the server the sim plays now (its Requests are what it got).
func (s *Sim) Load() *sim.Server { return s.cur.Load() }

// Store makes the sim play srv from the next request on.
func (s *Sim) Store(srv *sim.Server) { s.cur.Store(srv) }
