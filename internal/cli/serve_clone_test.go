package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/wire"
)

// TestServeSIGTERMDuringClone: `harvest serve` stopped with SIGTERM while a
// session's clone hangs on a server that accepts and never answers exits
// within its grace period, and no process of the clone is left.
func TestServeSIGTERMDuringClone(t *testing.T) {
	e := newServeEnv(t)
	url := hangingGitURL(t)
	s := e.start()
	c := e.client(s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: url}}, Prompt: "msg hi"}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the clone to start", func() bool { return len(processesWith(url)) > 0 })
	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(serveGrace + 5*time.Second):
		t.Fatalf("serve did not exit %s after SIGTERM:\n%s", serveGrace+5*time.Second, s.stderr)
	}
	t.Logf("SIGTERM to exit: %s", time.Since(start))
	if s.err != nil {
		t.Errorf("serve exited with %v:\n%s", s.err, s.stderr)
	}
	if ps := processesWith(url); len(ps) > 0 {
		t.Fatalf("processes of the clone outlive serve: %q", ps)
	}
}

// serveGrace is how long serve may take to stop after SIGTERM.
const serveGrace = 10 * time.Second

// hangingGitURL serves connections that are accepted and never answered;
// the URL is unique, so the processes of its clone can be found by it.
func hangingGitURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
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
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	})
	return fmt.Sprintf("http://%s/hangs-%d/app.git", ln.Addr(), time.Now().UnixNano())
}

// processesWith lists the processes whose command line contains s.
func processesWith(s string) []string {
	var found []string
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			found = append(found, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

// waitUntil waits, at most a minute, for cond.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
