package postgres

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/storetest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// open opens a Store on url, closed when the test ends.
func open(t testing.TB, url string) *Store {
	t.Helper()
	s, err := Open(testbin.Context(t), url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, testbin.Postgres(t))
	})
}

// pool opens a bare pgx pool on url, for checks beneath the Store.
func pool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(testbin.Context(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func migrationCount(t testing.TB, p *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := p.QueryRow(testbin.Context(t), `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOpenConcurrent: nodes starting at once on a new database all open
// it, and the migrations run once (the advisory lock).
func TestOpenConcurrent(t *testing.T) {
	url := testbin.Postgres(t)
	const nodes = 6
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	for range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(testbin.Context(t), url)
			if err != nil {
				errs <- err
				return
			}
			s.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Open alongside other nodes: %v", err)
	}
	if n := migrationCount(t, pool(t, url)); n != len(migrations) {
		t.Errorf("schema_migrations has %d rows, want %d: a migration ran twice or not at all", n, len(migrations))
	}
}

func TestReopenKeepsDataAndSchema(t *testing.T) {
	url := testbin.Postgres(t)
	ctx := testbin.Context(t)
	s, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSession(ctx, &store.Session{ID: "s1", Owner: "o", State: store.StateIdle}, nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, url)
	if _, err := s.GetSession(ctx, "s1"); err != nil {
		t.Fatalf("after reopening: %v", err)
	}
	if n := migrationCount(t, s.pool.Pool); n != len(migrations) {
		t.Errorf("schema_migrations has %d rows, want %d", n, len(migrations))
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	url := testbin.Postgres(t)
	s := open(t, url)
	if _, err := s.pool.Exec(testbin.Context(t), `INSERT INTO schema_migrations (version, name) VALUES ($1, 'from the future')`, len(migrations)+1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := Open(testbin.Context(t), url)
	if err == nil || !strings.Contains(err.Error(), "newer harvest") {
		t.Fatalf("Open of a database from a newer harvest: %v, want an error saying so", err)
	}
}

func TestMigrationNames(t *testing.T) {
	ok := fstest.MapFS{"migrations/0001_a.sql": {}, "migrations/0002_b.sql": {}}
	if ms, err := loadMigrations(ok); err != nil || len(ms) != 2 || ms[1].name != "b" || ms[1].version != 2 {
		t.Errorf("loadMigrations = %+v, %v", ms, err)
	}
	for _, bad := range []fstest.MapFS{
		{"migrations/0001_a.sql": {}, "migrations/0003_c.sql": {}},
		{"migrations/1.sql": {}},
		{"migrations/0002_b.sql": {}},
	} {
		if _, err := loadMigrations(bad); err == nil {
			t.Errorf("loadMigrations accepted %v", bad)
		}
	}
}

// TestOpenErrors: a URL that cannot work says what to fix, never quoting
// its password.
func TestOpenErrors(t *testing.T) {
	ctx := testbin.Context(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String() // nobody listens there once closed
	ln.Close()
	for _, tc := range []struct{ url, want string }{
		{"", "empty database URL"},
		{"mysql://u:hunter2@db/harvest", "want postgres:// or postgresql://"},
		{"/var/lib/harvest.db", "want postgres:// or postgresql://"},
		{"postgres://u:hunter2@db.example:5432", "names no database"},
		{"postgres://u:hunter2@db.example:5432/harvest?sslmode=bogus", "sslmode"},
		{"postgresql://u:hunter2@" + closed + "/harvest?sslmode=disable&connect_timeout=5", "cannot reach database harvest on " + closed},
	} {
		_, err := Open(ctx, tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v; want an error containing %q", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q): the error quotes the password: %v", tc.url, err)
		}
	}
	// A server that answers, a database that does not exist.
	u, err := url.Parse(testbin.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/no_such_db"
	if _, err := Open(ctx, u.String()); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Open of a missing database: %v, want it to say so", err)
	}
}

// TestAppendSameSeqConcurrent: writers racing to append the same seqs of
// a session: each seq is stored once, by exactly one of them; the others
// get ErrConflict.
func TestAppendSameSeqConcurrent(t *testing.T) {
	s := open(t, testbin.Postgres(t))
	ctx := testbin.Context(t)
	if err := s.CreateSession(ctx, &store.Session{ID: "s1", Owner: "o", State: store.StateWorking}, nil); err != nil {
		t.Fatal(err)
	}
	const writers, seqs = 4, 50
	var (
		wg   sync.WaitGroup
		won  [seqs + 1]atomic.Int32
		errs = make(chan error, writers*seqs)
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := int64(1); seq <= seqs; seq++ {
				ev := event.Event{Session: "s1", Seq: seq, Time: time.Now(), Data: event.AssistantDelta{Text: fmt.Sprintf("w%d", w)}}
				err := s.AppendEvents(ctx, []event.Event{ev})
				switch {
				case err == nil:
					won[seq].Add(1)
				case !errors.Is(err, store.ErrConflict):
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("AppendEvents: %v, want nil or ErrConflict", err)
	}
	for seq := 1; seq <= seqs; seq++ {
		if n := won[seq].Load(); n != 1 {
			t.Errorf("seq %d was appended by %d writers, want exactly 1", seq, n)
		}
	}
	got, err := s.Events(ctx, "s1", 0, 0)
	if err != nil || len(got) != seqs {
		t.Fatalf("Events = %d, %v; want %d", len(got), err, seqs)
	}
	// The conflict names the session and the seq.
	err = s.AppendEvents(ctx, []event.Event{{Session: "s1", Seq: 7, Data: event.AssistantDelta{Text: "x"}}})
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "session s1 already has an event with seq 7") {
		t.Errorf("AppendEvents of a stored seq: %v", err)
	}
}

// TestMessagesAcrossSessionsConcurrent: batches adding messages to two
// sessions, in opposite orders, neither deadlock nor break the seqs.
func TestMessagesAcrossSessionsConcurrent(t *testing.T) {
	s := open(t, testbin.Postgres(t))
	ctx := testbin.Context(t)
	for _, id := range []string{"a", "b"} {
		if err := s.CreateSession(ctx, &store.Session{ID: id, Owner: "o", State: store.StateIdle}, nil); err != nil {
			t.Fatal(err)
		}
	}
	const workers, each = 6, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			order := []string{"a", "b"}
			if w%2 == 1 {
				order = []string{"b", "a"}
			}
			for i := range each {
				var msgs []*store.Message
				for _, sess := range order {
					msgs = append(msgs, &store.Message{ID: fmt.Sprintf("w%d-%d", w, i), Session: sess, Text: "x"})
				}
				if err := s.AppendEventsWith(ctx, nil, msgs); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("AppendEventsWith: %v", err)
	}
	for _, id := range []string{"a", "b"} {
		ms, err := s.Messages(ctx, id)
		if err != nil || len(ms) != workers*each {
			t.Fatalf("Messages(%s) = %d, %v; want %d", id, len(ms), err, workers*each)
		}
		for i, m := range ms {
			if m.Seq != int64(i+1) {
				t.Fatalf("session %s: message %d has seq %d", id, i, m.Seq)
			}
		}
	}
}

// BenchmarkListPage: a page of sessions with 10,000 in the store (issue 23:
// ≤ 100 ms a page). go test -run '^$' -bench ListPage ./store/postgres/
func BenchmarkListPage(b *testing.B) {
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			storetest.BenchmarkListPage(b, open(b, testbin.Postgres(b)), 10000, size)
		})
	}
}
