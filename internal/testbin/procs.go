package testbin

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ProcsWith lists the host's processes whose command line contains s.
func ProcsWith(s string) []string {
	var found []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			found = append(found, e.Name()+": "+strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " "))
		}
	}
	return found
}

// ProcsWithArgs lists the host's processes whose command line holds args
// as consecutive arguments (processes inside local boxes are host
// processes): ProcsWithArgs("sleep", "31337") finds "sleep 31337", not
// "sh -c 'sleep 31337'".
func ProcsWithArgs(args ...string) []string {
	return ProcsWith(strings.Join(args, "\x00"))
}

// HangingGitServer accepts connections and never answers, like a git
// server that hangs. It returns the URL of a repository on it (unique, so
// the processes of a clone of it can be found by it) and a channel that
// gets a value per connection accepted. It stops when the test ends.
func HangingGitServer(t testing.TB) (string, <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	accepted := make(chan struct{}, 16)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return fmt.Sprintf("http://%s/hangs-%d/app.git", ln.Addr(), time.Now().UnixNano()), accepted
}
