package testbin

import (
	"net"
	"testing"
)

// A Tripwire counts every connection made before Conns, not its probes.
func TestTripwire(t *testing.T) {
	w := NewTripwire(t)
	if n := w.Conns(t); n != 0 {
		t.Fatalf("%d connections before any", n)
	}
	for i := 1; i <= 3; i++ {
		c, err := net.Dial("tcp", w.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		if n := w.Conns(t); n != i {
			t.Fatalf("%d connections, want %d", n, i)
		}
	}
}
