package agentd

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sandbox/proto"
)

// TestFenceClock: the fence maps the host's clock with the smallest
// offset a connection showed, so a call that arrives late (made before
// the host paused, sent after) counts from when it was made and does not
// move the deadline past what the host meant; a call from a connection
// that is not the host's is refused; and the deadline only moves later.
func TestFenceClock(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	host := &conn{outside: true}
	// The host's clock is the agent's minus 5 s at the first call (any
	// origin will do), which arrives at once.
	at := func() int64 { return time.Since(s.started).Nanoseconds() - (5 * time.Second).Nanoseconds() }
	r, err := s.arm(host, proto.FenceParams{SentNS: at(), LeftNS: int64(time.Hour)})
	if err != nil || r.LeftMS < (59*time.Minute).Milliseconds() {
		t.Fatalf("a fence an hour ahead: %+v %v", r, err)
	}
	// Made 30 s ago, arrived now: an hour and a minute ahead of when it
	// was made is 30 s less than that from now.
	r, err = s.arm(host, proto.FenceParams{SentNS: at() - int64(30*time.Second), LeftNS: int64(time.Hour + time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Duration(r.LeftMS) * time.Millisecond; left > time.Hour+31*time.Second || left < time.Hour+29*time.Second {
		t.Errorf("a late call: %s left, want about 1h0m30s", left)
	}
	// Earlier: the deadline stays.
	if r, err = s.arm(host, proto.FenceParams{SentNS: at(), LeftNS: int64(time.Second)}); err != nil || r.LeftMS < (time.Hour).Milliseconds() {
		t.Errorf("an earlier deadline: %+v %v, want it ignored", r, err)
	}
	box := &conn{outside: false}
	if _, err := s.arm(box, proto.FenceParams{Off: true}); err == nil {
		t.Errorf("a process in the box disarmed the fence")
	}
	if r, err = s.arm(host, proto.FenceParams{Off: true}); err != nil || r.LeftMS != -1 {
		t.Errorf("disarming: %+v %v", r, err)
	}
	if s.Fenced() {
		t.Errorf("the fence fired")
	}
}

// TestFencePeers: a peer in this process is "self" (a dial the agent
// makes to its own socket is refused for that reason), and with PID1 a
// peer in this PID namespace that is not the agent is not outside the
// box.
func TestFencePeers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	defer a.Close()
	if !selfPeer(c) {
		t.Errorf("a connection to this process's own socket is not seen as self")
	}
	if !outsideBox(a, false) {
		t.Errorf("outside a box every peer may fence")
	}
	if pid, ok := peerPID(a); !ok || pid != int32(os.Getpid()) {
		t.Errorf("peer pid %d %v, want this process's %d", pid, ok, os.Getpid())
	}
}
