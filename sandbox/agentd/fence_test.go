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

// TestFencePeers: a dial that reaches the agent's own socket is seen as
// such (dial refuses it), another socket's is not; outside a box every
// peer may fence; SO_PEERCRED names the peer's pid.
func TestFencePeers(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dir := t.TempDir()
	listen := func(name string) net.Listener {
		l, err := net.Listen("unix", filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { c.Close() })
			}
		}()
		return l
	}
	own, other := listen("agent.sock"), listen("other.sock")
	name := own.Addr().(*net.UnixAddr).Name
	s.selfAddr.Store(&name)
	for _, tc := range []struct {
		l    net.Listener
		self bool
	}{{own, true}, {other, false}} {
		c, err := net.Dial("unix", tc.l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := s.isSelf(c); got != tc.self {
			t.Errorf("a dial to %s: isSelf %v, want %v", tc.l.Addr(), got, tc.self)
		}
		if !outsideBox(c, false) {
			t.Errorf("outside a box every peer may fence")
		}
		if pid, ok := peerPID(c); !ok || pid != int32(os.Getpid()) {
			t.Errorf("peer pid %d %v, want this process's %d", pid, ok, os.Getpid())
		}
	}
}
