package journal_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/journal"
)

// TestFullDisk: on a real filesystem that fills up, commits fail with
// SQLite's "database or disk is full", the journal keeps every event queued
// and retries, producers feel it only as back-pressure, and once space is
// freed everything is stored and delivered, in order, none twice.
func TestFullDisk(t *testing.T) {
	testreq.NeedRoot(t, "mounts a small tmpfs")
	dir := t.TempDir()
	if err := syscall.Mount("harvest-test", dir, "tmpfs", 0, "size=4m,mode=0700"); err != nil {
		testreq.Unavailable(t, testreq.Mounts, "mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	st := openStore(t, filepath.Join(dir, "harvest.db"), "s")

	// Fill the rest of the disk.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()

	full := make(chan struct{})
	var once sync.Once
	log := slog.New(&watchHandler{t: t, on: func(msg, errText string) {
		if msg == "storing events failed; retrying" && strings.Contains(errText, "full") {
			once.Do(func() { close(full) })
		}
	}})
	j := newJournal(t, st, journal.Options{RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond, Logger: log})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sub, err := j.Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	const n = 200
	big := strings.Repeat("x", 4<<10) // 200 × 4 KiB: more than the disk has left
	for i := range n {
		if _, err := j.Append(event.Event{Session: "s", Turn: "t1", Data: event.AssistantMessage{Text: big}}); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	select {
	case <-full:
	case <-ctx.Done():
		t.Fatal("no commit failed on the full disk: the test proves nothing")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	last, err := j.AppendSync(ctx, msg("s", n))
	if err != nil || last.Seq != n+1 {
		t.Fatalf("AppendSync after space was freed: seq %d, %v; want %d", last.Seq, err, n+1)
	}
	got := recvUntil(t, ctx, sub, n+1)
	gapless(t, "delivered", got, 1)
	stored, err := st.Events(ctx, "s", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	gapless(t, "stored", stored, 1)
	if len(stored) != n+1 || len(got) != n+1 {
		t.Fatalf("%d stored, %d delivered; want %d of each", len(stored), len(got), n+1)
	}
}

// watchHandler passes each record's message and "err" attribute to on,
// and the record to the test's log.
type watchHandler struct {
	t  *testing.T
	on func(msg, errText string)
}

func (h *watchHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *watchHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *watchHandler) WithGroup(string) slog.Handler            { return h }
func (h *watchHandler) Handle(_ context.Context, r slog.Record) error {
	var errText string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			errText = a.Value.String()
		}
		return true
	})
	h.t.Logf("%s err=%s", r.Message, errText)
	h.on(r.Message, errText)
	return nil
}
