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

// TestRetentionOlderFile: a file made before auto_vacuum was set keeps
// NONE (Open cannot change it): retention frees pages inside it, for
// later writes. The offline conversion the package doc gives (PRAGMA
// auto_vacuum=INCREMENTAL; VACUUM) makes it give pages back from then on.
func TestRetentionOlderFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	old, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(`CREATE TABLE before_auto_vacuum (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	old.Close()
	mode := func() (m int) {
		t.Helper()
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.QueryRow(`PRAGMA auto_vacuum`).Scan(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	fill := func(s *Store, id string) {
		t.Helper()
		ctx := context.Background()
		at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		if err := s.CreateSession(ctx, &store.Session{ID: id, Owner: "o", State: store.StateStopped, CreatedAt: at, UpdatedAt: at}, nil); err != nil {
			t.Fatal(err)
		}
		var evs []event.Event
		for i := range 500 {
			evs = append(evs, event.Event{Session: id, Seq: int64(i + 1), Time: at, Data: event.ToolOutput{CallID: "c", Text: strings.Repeat("x", 4000)}})
		}
		if err := s.AppendEvents(ctx, evs); err != nil {
			t.Fatal(err)
		}
		for {
			c, err := s.CompactEvents(ctx, id, at.Add(time.Hour), 1000)
			if err != nil {
				t.Fatal(err)
			}
			if c.Done {
				return
			}
		}
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	fill(s, "s1")
	s.Close()
	if m := mode(); m != 0 {
		t.Fatalf("an older file's auto_vacuum = %d, want 0 (none)", m)
	}
	if _, free := pages(t, path); free == 0 {
		t.Errorf("retention in an older file left no free page: want its pages kept for reuse")
	}

	conv, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conv.Exec(`PRAGMA auto_vacuum=INCREMENTAL; VACUUM;`); err != nil {
		t.Fatalf("converting: %v", err)
	}
	conv.Close()
	if m := mode(); m != 2 {
		t.Fatalf("after the conversion auto_vacuum = %d, want 2 (incremental)", m)
	}
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fill(s, "s2")
	if _, free := pages(t, path); free != 0 {
		t.Errorf("retention after the conversion left %d free pages, want none", free)
	}
}
