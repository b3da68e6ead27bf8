package testbin

import (
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// Tripwire is a TCP listener on 127.0.0.1 that counts the connections
// made to it, for a test that something was NOT dialed (a refused MCP
// server's URL): every connection is accepted, counted and closed.
type Tripwire struct {
	ln net.Listener
	wg sync.WaitGroup

	mu      sync.Mutex
	seen    []string        // the accepted connections' remote addresses, in order
	probes  map[string]bool // Conns' own
	changed chan struct{}   // closed and replaced at each accept
}

// NewTripwire listens on 127.0.0.1:0 until the test ends.
func NewTripwire(t testing.TB) *Tripwire {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &Tripwire{ln: ln, probes: map[string]bool{}, changed: make(chan struct{})}
	w.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			w.mu.Lock()
			w.seen = append(w.seen, c.RemoteAddr().String())
			close(w.changed)
			w.changed = make(chan struct{})
			w.mu.Unlock()
			c.Close()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		w.wg.Wait()
	})
	return w
}

// Addr is the listener's address, 127.0.0.1:PORT.
func (w *Tripwire) Addr() string { return w.ln.Addr().String() }

// Port is the listener's port.
func (w *Tripwire) Port() int { return w.ln.Addr().(*net.TCPAddr).Port }

// Conns is how many connections were made to the listener, every one made
// before the call included: it dials one of its own and waits until the
// listener has accepted it, connections being accepted in the order they
// were made; its own are not counted.
func (w *Tripwire) Conns(t testing.TB) int {
	t.Helper()
	c, err := net.Dial("tcp", w.Addr())
	if err != nil {
		t.Fatalf("probing the tripwire: %v", err)
	}
	defer c.Close()
	me := c.LocalAddr().String()
	w.mu.Lock()
	w.probes[me] = true
	w.mu.Unlock()
	timeout := time.After(time.Minute)
	for {
		w.mu.Lock()
		if slices.Contains(w.seen, me) {
			n := 0
			for _, s := range w.seen {
				if !w.probes[s] {
					n++
				}
			}
			w.mu.Unlock()
			return n
		}
		changed := w.changed
		w.mu.Unlock()
		select {
		case <-changed:
		case <-timeout:
			t.Fatal("the tripwire did not accept its own probe within a minute")
		}
	}
}
