package sqlstore

import (
	"testing"
	"time"
)

func TestRebind(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`SELECT 1`, `SELECT 1`},
		{`SELECT a FROM t WHERE b = ? AND c IN (?,?)`, `SELECT a FROM t WHERE b = $1 AND c IN ($2,$3)`},
		// Quoted question marks are text, not placeholders.
		{`SELECT '?', "a?b" FROM t WHERE x = ?`, `SELECT '?', "a?b" FROM t WHERE x = $1`},
		{`SELECT 'it''s ?' WHERE y = ?`, `SELECT 'it''s ?' WHERE y = $1`},
		{`lower(?::text COLLATE "C")`, `lower($1::text COLLATE "C")`},
	} {
		if got := Rebind(c.in); got != c.want {
			t.Errorf("Rebind(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestTimeScan(t *testing.T) {
	at := time.Date(2026, 12, 7, 4, 5, 6, 789, time.FixedZone("x", 3600))
	for _, c := range []struct {
		src  any
		want time.Time
	}{
		{nil, time.Time{}},
		{int64(0), time.Time{}},
		{at.UnixNano(), at.UTC()},
		{at, at.UTC()},
	} {
		var got Time
		if err := got.Scan(c.src); err != nil || !got.T.Equal(c.want) || got.T.Location() != c.want.Location() {
			t.Errorf("Scan(%v) = %v, %v; want %v", c.src, got.T, err, c.want)
		}
	}
	var got Time
	if err := got.Scan("2026-12-07"); err == nil {
		t.Errorf("Scan of text = %v, want an error saying a time column holds text", err)
	}
}
