package slackbot

import "testing"

// TestSplit: a picker's 100 options are shared between its GitHub
// repositories and its directories: both whole when they fit, else the
// shorter list whole up to half and the longer the rest.
func TestSplit(t *testing.T) {
	for _, c := range []struct{ a, b, wa, wb int }{
		{10, 20, 10, 20}, {0, 121, 0, 100}, {121, 0, 100, 0}, {30, 80, 30, 70},
		{80, 30, 70, 30}, {80, 80, 50, 50}, {50, 50, 50, 50}, {100, 1, 99, 1},
	} {
		if a, b := split(c.a, c.b); a != c.wa || b != c.wb || a+b > MaxChoices {
			t.Errorf("split(%d, %d) = %d, %d; want %d, %d", c.a, c.b, a, b, c.wa, c.wb)
		}
	}
}
