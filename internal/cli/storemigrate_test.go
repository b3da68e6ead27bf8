package cli

import (
	"context"
	"errors"
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

// migrateCmd runs the real `harvest store migrate` in e's environment.
func (e *serveEnv) migrate(args ...string) (code int, out string) {
	e.t.Helper()
	cmd := exec.Command(testbin.Harvest(e.t), append([]string{"store", "migrate"}, args...)...)
	cmd.Env = e.env
	b, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(b)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return 0, string(b)
}

// TestStoreMigrate: a server's sessions on SQLite move to PostgreSQL with
// harvest store migrate, which refuses to run beside the server and
// verifies the copy; the server started on PostgreSQL has the sessions,
// their events at the same seqs and the admin token, and an old session
// takes a new message.
func TestStoreMigrate(t *testing.T) {
	url := testbin.Postgres(t)
	e := newServeEnv(t)
	repo := filepath.Join(testbin.TempDir(t), "repo")
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644)
	db := "sqlite:" + filepath.Join(e.home, "harvest.db")

	s := e.start()
	c := e.client(s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var ids []string
	for _, prompt := range []string{"msg one", "msg two"} {
		v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: prompt})
		if err != nil {
			t.Fatal(err)
		}
		follow(t, c, v.ID, 0, "the turn to finish", func(ev event.Event) bool { return ev.Type() == event.TypeTurnFinished })
		ids = append(ids, v.ID)
	}
	if code, out := e.migrate("--from", db, "--to", url); code == 0 || !strings.Contains(out, "is in use by process") {
		t.Errorf("migrate beside a running serve: exit %d:\n%s", code, out)
	}
	before := map[string][]event.Event{}
	for _, id := range ids {
		page, err := c.EventLog(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		before[id] = page.Events
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	if err := s.wait(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, s.stderr)
	}

	code, out := e.migrate("--from", db, "--to", url)
	if code != 0 || !strings.Contains(out, "the copy verifies") {
		t.Fatalf("migrate: exit %d:\n%s", code, out)
	}
	t.Logf("harvest store migrate:\n%s", out)
	if code, out := e.migrate("--from", db, "--to", url); code == 0 || !strings.Contains(out, "not empty: it already has sessions") {
		t.Errorf("a second migrate into the same database: exit %d:\n%s", code, out)
	}

	s = e.start("--store", url)
	c = e.client(s)
	if !strings.Contains(s.stderr.String(), "the admin token is in") {
		t.Errorf("serve on the migrated database made a new admin token: the old one was not copied:\n%s", s.stderr)
	}
	for _, id := range ids {
		page, err := c.EventLog(ctx, id, 0, 0)
		if err != nil {
			t.Fatalf("session %s after the migration: %v", id, err)
		}
		// The restart may add events (the session's state); the old ones
		// are there first, at their seqs.
		if len(page.Events) < len(before[id]) {
			t.Fatalf("session %s has %d events after the migration, want at least %d", id, len(page.Events), len(before[id]))
		}
		for i, ev := range before[id] {
			if got := page.Events[i]; got.Seq != ev.Seq || got.Type() != ev.Type() {
				t.Errorf("session %s event %d after the migration: seq %d %s, want seq %d %s", id, i, got.Seq, got.Type(), ev.Seq, ev.Type())
			}
		}
	}
	last := before[ids[0]][len(before[ids[0]])-1].Seq
	if _, err := c.Send(ctx, ids[0], "msg three", ""); err != nil {
		t.Fatalf("a new message to an old session: %v", err)
	}
	follow(t, c, ids[0], last, "the new message's turn to finish", func(ev event.Event) bool { return ev.Type() == event.TypeTurnFinished })
}
