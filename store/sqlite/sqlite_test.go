package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/storetest"
)

func open(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "harvest.db"))
	})
}

func TestReopenKeepsDataAndSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "harvest.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.CreateSession(ctx, &store.Session{ID: "s1", Owner: "o", State: store.StateIdle}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	if _, err := s.GetSession(ctx, "s1"); err != nil {
		t.Fatalf("after reopening: %v", err)
	}
	var n int
	if err := s.r.QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(migrations) {
		t.Errorf("schema_migrations has %d rows (%v), want %d: a migration ran twice or not at all", n, err, len(migrations))
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("database file mode %v, want 0600", fi.Mode().Perm())
	}
	var mode string
	if err := s.r.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q (%v), want wal", mode, err)
	}
	var sync int
	if err := s.w.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil || sync != 2 {
		t.Errorf("writer synchronous = %d (%v), want 2 (FULL)", sync, err)
	}
	var fk int
	if err := s.w.QueryRow(`PRAGMA foreign_keys`).Scan(&fk); err != nil || fk != 1 {
		t.Errorf("writer foreign_keys = %d (%v), want 1", fk, err)
	}
	if _, err := s.r.Exec(`DELETE FROM sessions`); err == nil {
		t.Errorf("a read connection could write")
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "harvest.db")
	s := open(t, path)
	if _, err := s.w.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'from the future', 0)`, len(migrations)+1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := Open(path)
	if err == nil || !strings.Contains(err.Error(), "newer harvest") {
		t.Fatalf("Open of a database from a newer harvest: %v, want an error saying so", err)
	}
}

// checkConsistent runs SQLite's own checks.
func checkConsistent(t *testing.T, db *sql.DB) {
	t.Helper()
	var res string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&res); err != nil || res != "ok" {
		t.Errorf("integrity_check: %q, %v", res, err)
	}
	rows, err := db.Query(`PRAGMA foreign_key_check`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if rows.Next() {
		t.Errorf("foreign_key_check found rows pointing at missing sessions")
	}
}

func BenchmarkAppendEvents(b *testing.B) {
	for _, size := range []int{1, 16, 256, 1024} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			s := open(b, filepath.Join(b.TempDir(), "harvest.db"))
			ctx := context.Background()
			if err := s.CreateSession(ctx, &store.Session{ID: "s1", Owner: "o", State: store.StateWorking}, nil); err != nil {
				b.Fatal(err)
			}
			batch := make([]event.Event, size)
			var seq int64
			b.ReportAllocs()
			cpu0 := cpuTime()
			b.ResetTimer()
			for b.Loop() {
				for i := range batch {
					seq++
					batch[i] = event.Event{Session: "s1", Seq: seq, Turn: "t1",
						Data: event.AssistantDelta{Text: "a few tokens of streamed text"}}
				}
				if err := s.AppendEvents(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(seq)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(seq), "cpu-µs/event")
		})
	}
}

// cpuTime is the CPU time (user+system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkListPage: a page of sessions with 10,000 in the store (issue 23:
// ≤ 100 ms a page). go test -run '^$' -bench ListPage ./store/sqlite/
func BenchmarkListPage(b *testing.B) {
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			storetest.BenchmarkListPage(b, open(b, filepath.Join(b.TempDir(), "harvest.db")), 10000, size)
		})
	}
}
