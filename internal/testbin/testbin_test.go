package testbin

import (
	"net"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"
)

func TestBufferWaitFor(t *testing.T) {
	var b Buffer
	if b.WaitFor("ready", time.Millisecond) {
		t.Fatal("WaitFor found a string never written")
	}
	done := make(chan bool)
	go func() { done <- b.WaitFor("ready", time.Minute) }()
	b.Write([]byte("getting "))
	b.Write([]byte("ready\n"))
	if !<-done {
		t.Fatal("WaitFor missed a string written while it waited")
	}
	if b.String() != "getting ready\n" || b.Len() != len("getting ready\n") {
		t.Fatalf("the buffer holds %q (%d bytes)", b.String(), b.Len())
	}
}

func TestProcsWithArgs(t *testing.T) {
	me := strconv.Itoa(os.Getpid()) + ": "
	found := false
	for _, p := range ProcsWithArgs(os.Args...) {
		found = found || len(p) > len(me) && p[:len(me)] == me
	}
	if !found {
		t.Fatalf("ProcsWithArgs(%q) does not find the test process", os.Args)
	}
	if ps := ProcsWithArgs("no-such-program", "31337x"); len(ps) != 0 {
		t.Fatalf("ProcsWithArgs found %q", ps)
	}
}

func TestHangingGitServer(t *testing.T) {
	u, accepted := HangingGitServer(t)
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-accepted:
	case <-time.After(time.Minute):
		t.Fatal("the connection was not accepted")
	}
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the server answered: %d bytes, %v", n, err)
	}
	WaitFor(t, time.Second, "nothing", func() bool { return true })
}
