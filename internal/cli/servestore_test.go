package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// TestServePostgres: harvest serve --store postgres://... keeps its state
// in PostgreSQL (no SQLite file appears): a session's turn runs and its
// events stream; after a restart on the same database the admin token
// still works and the session's events replay.
func TestServePostgres(t *testing.T) {
	url := testbin.Postgres(t)
	e := newServeEnv(t)
	repo := filepath.Join(testbin.TempDir(t), "repo")
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644)

	s := e.start("--store", url)
	c := e.client(s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "msg hello"})
	if err != nil {
		t.Fatal(err)
	}
	seen := follow(t, c, v.ID, 0, "the turn to finish", func(ev event.Event) bool { return ev.Type() == event.TypeTurnFinished })
	if _, err := os.Stat(filepath.Join(e.home, "harvest.db")); err == nil {
		t.Errorf("harvest serve --store postgres://... made a SQLite database in the data directory")
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	if err := s.wait(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, s.stderr)
	}

	s = e.start("--store", url)
	c = e.client(s)
	if !strings.Contains(s.stderr.String(), "the admin token is in") {
		t.Errorf("the restart made a new admin token: the first was not kept in PostgreSQL:\n%s", s.stderr)
	}
	page, err := c.EventLog(ctx, v.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) < len(seen) {
		t.Fatalf("after the restart the session has %d events, want at least the %d streamed before", len(page.Events), len(seen))
	}
	for i, ev := range seen {
		if got := page.Events[i]; got.Seq != ev.Seq || got.Type() != ev.Type() {
			t.Errorf("event %d after the restart: seq %d %s, want seq %d %s", i, got.Seq, got.Type(), ev.Seq, ev.Type())
		}
	}
	// A server that is not there is named, with what to check.
	code, _, stderr := runCLI(t, "", "serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--store", "postgres://u:pw@127.0.0.1:1/harvest?connect_timeout=5")
	if code == 0 || !strings.Contains(stderr, "cannot reach database harvest on 127.0.0.1:1") || strings.Contains(stderr, ":pw@") {
		t.Errorf("serve --store on a closed port: exit %d, stderr %q", code, stderr)
	}
}

// TestServeOnPostgres runs the kill -9 tests with serve's store on
// PostgreSQL: a server killed mid-turn, and one killed five times under
// concurrent idempotent sends, lose nothing there either.
func TestServeOnPostgres(t *testing.T) {
	t.Run("Kill9", func(t *testing.T) {
		e := newServeEnv(t)
		e.onPostgres()
		testServeKill9(t, e)
	})
	t.Run("Kill9Repeated", func(t *testing.T) {
		e := newServeEnvWith(t, crashScript)
		e.onPostgres()
		testServeKill9Repeated(t, e)
	})
}

// onPostgres has every harvest serve of e keep its state in a fresh
// PostgreSQL database ($HARVEST_STORE), as openStore does.
func (e *serveEnv) onPostgres() {
	e.store = testbin.Postgres(e.t)
	e.env = append(e.env, "HARVEST_STORE="+e.store)
	e.t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(e.home, "harvest.db")); err == nil {
			e.t.Errorf("serve with $HARVEST_STORE=postgres://... made a SQLite database: the test ran on SQLite")
		}
	})
}

// openStore opens the store e's servers keep their state in, as serve
// does: PostgreSQL with onPostgres, else SQLite in the data directory.
// It is closed when the test ends.
func (e *serveEnv) openStore(ctx context.Context) store.Store {
	e.t.Helper()
	st, err := openServerStore(ctx, e.store, e.home)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { st.Close() })
	return st
}
