package server

import "testing"

// TestAuditedRoutes: every route audit.go's audited names is in the
// table, so a route renamed in one place and not the other fails here
// rather than going unrecorded.
func TestAuditedRoutes(t *testing.T) {
	have := map[string]bool{}
	for _, rt := range testRoutes() {
		have[rt.method+" "+rt.path] = true
	}
	for k := range audited {
		if !have[k] {
			t.Errorf("audited names %q, which is not a route", k)
		}
	}
}
