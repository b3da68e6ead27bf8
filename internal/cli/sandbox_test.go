package cli

import (
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
)

// The box's time limit is said when the box went before the command's
// status came: at its deadline, or up to a second before (the local
// backend hands the agent the deadline in whole seconds), not earlier.
func TestBoxExpired(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 600e6, time.UTC)
	h := sandbox.Handle{Created: created, Deadline: created.Add(90 * time.Second)}
	if got := boxLimit(h); got != 90*time.Second {
		t.Errorf("boxLimit = %v, want 1m30s", got)
	}
	for _, tc := range []struct {
		at   time.Duration // after Created
		want bool
	}{
		{0, false},
		{88 * time.Second, false},
		{89*time.Second + 100*time.Millisecond, true}, // the agent's deadline, truncated to the second
		{90 * time.Second, true},
		{time.Hour, true},
	} {
		if got := boxExpired(h, created.Add(tc.at)); got != tc.want {
			t.Errorf("boxExpired at +%v = %v, want %v", tc.at, got, tc.want)
		}
	}
	if boxExpired(sandbox.Handle{}, time.Now()) {
		t.Error("a box with no deadline expired")
	}
}
