package apitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/harvest-dev/harvest/server"
)

// statusLog records what each route answered, to check against the
// OpenAPI document when the test ends.
type statusLog struct {
	mu   sync.Mutex
	seen map[string]map[int]bool // "METHOD /pattern" → statuses
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (l *statusLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.seen == nil {
			l.seen = map[string]map[int]bool{}
		}
		key := r.Method + " " + r.Pattern
		if l.seen[key] == nil {
			l.seen[key] = map[int]bool{}
		}
		l.seen[key][sw.status] = true
	})
}

// undocumented lists the statuses seen that openapi.json does not list for
// their operation (405s and unknown routes are the mux's, not operations').
func (l *statusLog) undocumented() []string {
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(server.OpenAPI(), &d); err != nil {
		return []string{err.Error()}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for key, statuses := range l.seen {
		method, path, _ := strings.Cut(key, " ")
		raw, ok := d.Paths[path][strings.ToLower(method)]
		if !ok {
			continue
		}
		var op struct {
			Responses map[string]json.RawMessage `json:"responses"`
		}
		if err := json.Unmarshal(raw, &op); err != nil {
			out = append(out, key+": "+err.Error())
			continue
		}
		for st := range statuses {
			if _, ok := op.Responses[fmt.Sprint(st)]; !ok {
				out = append(out, fmt.Sprintf("%s answered %d", key, st))
			}
		}
	}
	slices.Sort(out)
	return out
}

// check fails the test for every status seen that openapi.json does not
// document.
func (l *statusLog) check(t testing.TB) {
	t.Helper()
	if bad := l.undocumented(); len(bad) > 0 {
		t.Errorf("statuses openapi.json does not document:\n  %s", strings.Join(bad, "\n  "))
	}
}
