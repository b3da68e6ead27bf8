package cli

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/wire"
)

// TestSendRetriesAcrossARestart: `harvest session send` while the server is
// down keeps trying, and once the server is back the message is stored
// once (the tries share one idempotency key).
func TestSendRetriesAcrossARestart(t *testing.T) {
	e := newServeEnv(t)
	repo := filepath.Join(testbin.TempDir(t), "repo")
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644)
	s1 := e.start()
	u, err := url.Parse(s1.url)
	if err != nil {
		t.Fatal(err)
	}
	c := e.client(s1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}})
	if err != nil {
		t.Fatal(err)
	}
	s1.cmd.Process.Signal(syscall.SIGTERM)
	if err := s1.wait(); err != nil {
		t.Fatalf("the first server: %v\n%s", err, s1.stderr)
	}

	// The server is down: send keeps trying.
	send := exec.Command(testbin.Harvest(t), "session", "send", "--server", s1.url, v.ID, "msg sent while the server was down")
	send.Env = append(e.env, "HARVEST_HOME="+e.home)
	var out, errb testbin.Buffer
	send.Stdout, send.Stderr = &out, &errb
	if err := send.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- send.Wait() }()
	testbin.WaitFor(t, time.Minute, "send to say it is trying again", func() bool {
		return strings.Contains(errb.String(), "trying again")
	})

	// Back on the same address: the message goes in, once.
	s2 := e.start("--listen", u.Host)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("send: %v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("send did not finish a minute after the server came back:\n%s", errb.String())
	}
	id := strings.TrimSpace(out.String())
	c2 := e.client(s2)
	p, err := c2.EventLog(ctx, v.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range p.Events {
		if q, ok := ev.Data.(event.MessageQueued); ok && q.Text == "msg sent while the server was down" {
			n++
			if q.MessageID != id {
				t.Errorf("the queued message is %s, send printed %s", q.MessageID, id)
			}
		}
	}
	if n != 1 {
		t.Fatalf("the message was stored %d times, want once; events: %+v", n, p.Events)
	}
}
