package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// pages is the database's size in pages and its free pages (read on a
// connection of its own).
func pages(t *testing.T, path string) (total, free int64) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRow(`PRAGMA page_count`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`PRAGMA freelist_count`).Scan(&free); err != nil {
		t.Fatal(err)
	}
	return total, free
}

// TestRetentionGivesSpaceBack: a new database is made with auto_vacuum
// INCREMENTAL, and compacting a session's events gives the pages they
// took back to the file system (the database shrinks, no free page is
// left), where without it they would stay in the file.
func TestRetentionGivesSpaceBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	s := open(t, path)
	ctx := context.Background()
	var mode int
	if err := s.w.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil || mode != 2 {
		t.Fatalf("auto_vacuum = %d, %v; want 2 (incremental)", mode, err)
	}
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := s.CreateSession(ctx, &store.Session{ID: "s1", Owner: "o", State: store.StateStopped, CreatedAt: at, UpdatedAt: at}, nil); err != nil {
		t.Fatal(err)
	}
	out := strings.Repeat("output line of a long build\n", 150) // ~4 KiB
	var evs []event.Event
	for i := range 2000 {
		var p event.Payload = event.ToolOutput{CallID: "c", Text: out}
		if i%10 == 0 {
			p = event.StepFinished{Step: i}
		}
		evs = append(evs, event.Event{Session: "s1", Seq: int64(i + 1), Time: at, Turn: "t1", Data: p})
	}
	if err := s.AppendEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	before, _ := pages(t, path)
	var removed int
	for {
		c, err := s.CompactEvents(ctx, "s1", at.Add(time.Hour), 500)
		if err != nil {
			t.Fatal(err)
		}
		removed += c.Removed
		if c.Done {
			break
		}
	}
	after, free := pages(t, path)
	t.Logf("2,000 events of ~4 KiB, 1,800 removed: %d pages before, %d after, %d free", before, after, free)
	if removed != 1800 {
		t.Errorf("removed %d events, want 1800", removed)
	}
	if after > before/5 || free != 0 {
		t.Errorf("after compaction the database has %d pages (%d free), before %d: the space was not given back", after, free, before)
	}
}
