package agentd

import "testing"

// TestValidDial: the agent's own check, the backstop behind the host's,
// dials nothing but the box's loopback and its unix sockets.
func TestValidDial(t *testing.T) {
	for _, c := range []struct {
		network, addr string
		ok            bool
	}{
		{"tcp", "127.0.0.1:4096", true},
		{"tcp", "127.3.2.1:80", true},
		{"tcp", "[::1]:80", true},
		{"tcp", "[::ffff:127.0.0.1]:80", true},
		{"unix", "/tmp/s.sock", true},
		{"tcp", "10.0.0.1:80", false},
		{"tcp", "[::ffff:8.8.8.8]:53", false},
		{"tcp", "[fe80::1%lo]:80", false},
		{"tcp", "localhost:80", false},
		{"tcp", "127.0.0.1:0", false},
		{"tcp", "127.0.0.1", false},
		{"udp", "127.0.0.1:53", false},
		{"tcp4", "127.0.0.1:53", false},
		{"unix", "rel.sock", false},
		{"unix", "/" + string(make([]byte, 120)), false},
	} {
		if err := validDial(c.network, c.addr); (err == nil) != c.ok {
			t.Errorf("validDial(%q, %q) = %v, want ok %v", c.network, c.addr, err, c.ok)
		}
	}
}
