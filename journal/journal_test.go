package journal_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// patience bounds every wait of these tests: a test that needs longer has
// hung.
const patience = 30 * time.Second

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	t.Cleanup(cancel)
	return ctx
}

func openStore(t testing.TB, path string, sessions ...string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, id := range sessions {
		if err := st.CreateSession(context.Background(), &store.Session{ID: id, Owner: "o", State: store.StateWorking}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func newStore(t testing.TB, sessions ...string) *sqlite.Store {
	return openStore(t, filepath.Join(t.TempDir(), "harvest.db"), sessions...)
}

// logTo sends a journal's log to the test's.
func logTo(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlog{t}, nil))
}

type tlog struct{ t testing.TB }

func (w tlog) Write(b []byte) (int, error) {
	w.t.Logf("%s", bytes.TrimSpace(b))
	return len(b), nil
}

func newJournal(t testing.TB, st store.Store, opt journal.Options) *journal.Journal {
	if opt.Logger == nil {
		opt.Logger = logTo(t)
	}
	j := journal.New(st, opt)
	t.Cleanup(func() {
		if err := j.Close(context.Background()); err != nil {
			t.Errorf("closing the journal: %v", err)
		}
	})
	return j
}

// msg is a non-coalescable event: it must always be delivered.
func msg(session string, i int) event.Event {
	return event.Event{Session: session, Turn: "t1", Data: event.AssistantMessage{Text: fmt.Sprintf("message %d", i)}}
}

func delta(session string, text string) event.Event {
	return event.Event{Session: session, Turn: "t1", Data: event.AssistantDelta{Text: text}}
}

// recvUntil reads sub until it gets seq last; it returns what it got.
func recvUntil(t *testing.T, ctx context.Context, sub *journal.Subscription, last int64) []event.Event {
	t.Helper()
	var got []event.Event
	for {
		select {
		case ev, ok := <-sub.C:
			if !ok {
				t.Fatalf("subscription ended after %d events (last seq %d), waiting for seq %d: %v", len(got), lastSeq(got), last, sub.Err())
			}
			got = append(got, ev)
			if ev.Seq >= last {
				return got
			}
		case <-ctx.Done():
			t.Fatalf("waiting for seq %d: got %d events up to seq %d: %v", last, len(got), lastSeq(got), ctx.Err())
		}
	}
}

// drain reads sub until it is closed.
func drain(t *testing.T, ctx context.Context, sub *journal.Subscription) []event.Event {
	t.Helper()
	var got []event.Event
	for {
		select {
		case ev, ok := <-sub.C:
			if !ok {
				return got
			}
			got = append(got, ev)
		case <-ctx.Done():
			t.Fatalf("waiting for the subscription to end: got %d events: %v", len(got), ctx.Err())
		}
	}
}

func lastSeq(evs []event.Event) int64 {
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}

// gapless checks evs are seqs from, from+1, ... with no gap or repeat.
func gapless(t *testing.T, what string, evs []event.Event, from int64) {
	t.Helper()
	for i, ev := range evs {
		if ev.Seq != from+int64(i) {
			t.Fatalf("%s: event %d has seq %d, want %d (gap or duplicate)", what, i, ev.Seq, from+int64(i))
		}
	}
}

func TestAppendOrderAndSeqs(t *testing.T) {
	ctx := testCtx(t)
	st := newStore(t, "a", "b", "c")
	j := newJournal(t, st, journal.Options{})
	start := time.Now()
	want := map[string][]string{}
	for i := range 3000 {
		id := []string{"a", "b", "c"}[i%3]
		ev := msg(id, i)
		seq, err := j.Append(ev)
		if err != nil {
			t.Fatal(err)
		}
		if seq != int64(len(want[id])+1) {
			t.Fatalf("Append #%d to %s: seq %d, want %d", i, id, seq, len(want[id])+1)
		}
		want[id] = append(want[id], ev.Data.(event.AssistantMessage).Text)
	}
	for _, id := range []string{"a", "b", "c"} {
		if err := j.Flush(ctx, id); err != nil {
			t.Fatalf("Flush(%s): %v", id, err)
		}
		got, err := st.Events(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want[id]) {
			t.Fatalf("session %s: %d events stored, want %d", id, len(got), len(want[id]))
		}
		gapless(t, id, got, 1)
		for i, ev := range got {
			if text := ev.Data.(event.AssistantMessage).Text; text != want[id][i] {
				t.Fatalf("session %s seq %d: %q, want %q: stored out of order", id, ev.Seq, text, want[id][i])
			}
			if ev.Time.Before(start.Add(-time.Second)) || ev.Turn != "t1" {
				t.Fatalf("session %s seq %d: time %v turn %q: the journal should stamp the time", id, ev.Seq, ev.Time, ev.Turn)
			}
			if i > 0 && ev.Time.Before(got[i-1].Time) {
				t.Fatalf("session %s seq %d: time goes backwards", id, ev.Seq)
			}
		}
	}
	// AppendSync returns the committed event.
	ev, err := j.AppendSync(ctx, msg("a", -1))
	if err != nil || ev.Seq != 1001 || ev.Time.IsZero() {
		t.Fatalf("AppendSync = seq %d time %v, %v; want seq 1001", ev.Seq, ev.Time, err)
	}
	if n, _ := st.LastSeq(ctx, "a"); n != 1001 {
		t.Fatalf("after AppendSync LastSeq = %d, want 1001: AppendSync returned before the commit", n)
	}
	// Refused before they get a seq.
	if _, err := j.Append(event.Event{Session: "a"}); err == nil {
		t.Errorf("Append without a payload succeeded")
	}
	if _, err := j.Append(event.Event{Data: event.AssistantMessage{}}); err == nil {
		t.Errorf("Append without a session succeeded")
	}
	bad := event.Event{Session: "a", Data: event.ToolStarted{CallID: "c", Input: []byte("{not json")}}
	if _, err := j.Append(bad); err == nil {
		t.Errorf("Append of an event that cannot be encoded succeeded")
	}
	if ev, err := j.AppendSync(ctx, msg("a", -2)); err != nil || ev.Seq != 1002 {
		t.Errorf("after refused events: seq %d, %v; want 1002 (refused events must not use a seq)", ev.Seq, err)
	}
}

func TestConcurrentProducers(t *testing.T) {
	ctx := testCtx(t)
	st := newStore(t, "s")
	j := newJournal(t, st, journal.Options{QueueSize: 64, MaxBatch: 16})
	const producers, each = 8, 300
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last int64
			for i := range each {
				seq, err := j.Append(event.Event{Session: "s", Agent: fmt.Sprint(p), Data: event.AssistantMessage{Text: fmt.Sprint(i)}})
				if err != nil {
					t.Error(err)
					return
				}
				if seq <= last {
					t.Errorf("producer %d got seq %d after %d", p, seq, last)
				}
				last = seq
			}
		}()
	}
	wg.Wait()
	if err := j.Flush(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	got, err := st.Events(ctx, "s", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != producers*each {
		t.Fatalf("%d events stored, want %d", len(got), producers*each)
	}
	gapless(t, "stored", got, 1)
	// Each producer's events are stored in the order it appended them.
	next := map[string]int{}
	for _, ev := range got {
		i := ev.Data.(event.AssistantMessage).Text
		if i != fmt.Sprint(next[ev.Agent]) {
			t.Fatalf("producer %s: seq %d holds its event %s, want %d", ev.Agent, ev.Seq, i, next[ev.Agent])
		}
		next[ev.Agent]++
	}
}

// TestRestartContinuesSeqs: a new journal on the same database (reopened)
// continues each session at LastSeq+1.
func TestRestartContinuesSeqs(t *testing.T) {
	ctx := testCtx(t)
	path := filepath.Join(t.TempDir(), "harvest.db")
	st, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if err := st.CreateSession(ctx, &store.Session{ID: id, Owner: "o", State: store.StateWorking}, nil); err != nil {
			t.Fatal(err)
		}
	}
	j := journal.New(st, journal.Options{})
	for i := range 250 {
		if _, err := j.Append(msg([]string{"a", "b"}[i%5/4], i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := j.Append(msg("a", 0)); !errors.Is(err, journal.ErrClosed) {
		t.Errorf("Append after Close: %v, want ErrClosed", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st = openStore(t, path)
	j = newJournal(t, st, journal.Options{})
	for range 10 {
		for _, id := range []string{"a", "b"} {
			if _, err := j.Append(msg(id, 0)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, id := range []string{"a", "b"} {
		if err := j.Flush(ctx, id); err != nil {
			t.Fatal(err)
		}
		got, err := st.Events(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int{"a": 200 + 10, "b": 50 + 10}[id]
		if len(got) != want {
			t.Errorf("session %s: %d events, want %d", id, len(got), want)
		}
		gapless(t, id, got, 1)
	}
}

// TestDeletedSessionInBatch: events of a deleted session do not hold up
// those of others committed with them.
func TestDeletedSessionInBatch(t *testing.T) {
	ctx := testCtx(t)
	st := newStore(t, "gone", "kept")
	j := newJournal(t, st, journal.Options{})
	if _, err := j.AppendSync(ctx, msg("gone", 0)); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteSession(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		for _, id := range []string{"gone", "kept"} {
			if _, err := j.Append(msg(id, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := j.Flush(ctx, "kept"); err != nil {
		t.Fatalf("Flush(kept): %v", err)
	}
	if err := j.Flush(ctx, "gone"); !errors.Is(err, journal.ErrDeleted) {
		t.Errorf("Flush(gone): %v, want ErrDeleted", err)
	}
	if n, _ := st.LastSeq(ctx, "kept"); n != 100 {
		t.Errorf("kept has %d events, want 100", n)
	}
}

// TestSeqConflict: a second journal writing the same session makes the
// first one's next commit conflict; it says so and recovers.
func TestSeqConflict(t *testing.T) {
	ctx := testCtx(t)
	st := newStore(t, "s")
	j1 := newJournal(t, st, journal.Options{})
	j2 := newJournal(t, st, journal.Options{})
	if _, err := j1.AppendSync(ctx, msg("s", 1)); err != nil {
		t.Fatal(err)
	}
	if ev, err := j2.AppendSync(ctx, msg("s", 2)); err != nil || ev.Seq != 2 {
		t.Fatalf("second journal: seq %d, %v", ev.Seq, err)
	}
	if _, err := j1.AppendSync(ctx, msg("s", 3)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AppendSync whose seq another journal took: %v, want ErrConflict", err)
	}
	ev, err := j1.AppendSync(ctx, msg("s", 4))
	if err != nil || ev.Seq != 3 {
		t.Fatalf("after a conflict the journal reloads its counter: seq %d, %v; want 3", ev.Seq, err)
	}
}

// TestCloseFlushes: Close commits everything queued and ends subscriptions
// after they got it.
func TestCloseFlushes(t *testing.T) {
	ctx := testCtx(t)
	path := filepath.Join(t.TempDir(), "harvest.db")
	st := openStore(t, path, "s")
	j := journal.New(st, journal.Options{Buffer: 1 << 14})
	sub, err := j.Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5000
	for i := range n {
		if _, err := j.Append(msg("s", i)); err != nil {
			t.Fatal(err)
		}
	}
	var got []event.Event
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		got = drain(t, ctx, sub)
	}()
	if err := j.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	if !errors.Is(sub.Err(), journal.ErrClosed) {
		t.Errorf("subscription ended with %v, want ErrClosed", sub.Err())
	}
	gapless(t, "subscriber", got, 1)
	if len(got) != n {
		t.Errorf("subscriber got %d events before the close, want %d", len(got), n)
	}
	if err := j.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := j.Subscribe(ctx, "s", 0); !errors.Is(err, journal.ErrClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrClosed", err)
	}
	st.Close()
	st = openStore(t, path)
	if last, err := st.LastSeq(ctx, "s"); err != nil || last != n {
		t.Fatalf("after Close and reopen: LastSeq %d, %v; want %d", last, err, n)
	}
}

// failing injects store failures into AppendEvents of a real store: the
// first `fails` calls (all of them when fails < 0) fail without writing.
type failing struct {
	*sqlite.Store
	mu    sync.Mutex
	fails int
	calls int
}

var errInjected = errors.New("disk I/O error (injected)")

func (f *failing) AppendEvents(ctx context.Context, evs []event.Event) error {
	f.mu.Lock()
	f.calls++
	fail := f.fails < 0 || f.calls <= f.fails
	f.mu.Unlock()
	if fail {
		return errInjected
	}
	return f.Store.AppendEvents(ctx, evs)
}

// TestCommitRetried: a failing commit is retried until it works; nothing
// is lost, duplicated, or delivered before it is stored.
func TestCommitRetried(t *testing.T) {
	ctx := testCtx(t)
	st := &failing{Store: newStore(t, "s"), fails: 3}
	j := newJournal(t, st, journal.Options{RetryMin: time.Millisecond, RetryMax: 4 * time.Millisecond})
	sub, err := j.Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := range 50 {
		if _, err := j.Append(msg("s", i)); err != nil {
			t.Fatal(err)
		}
	}
	ev, err := j.AppendSync(ctx, msg("s", 50))
	if err != nil || ev.Seq != 51 {
		t.Fatalf("AppendSync through failing commits: seq %d, %v", ev.Seq, err)
	}
	got := recvUntil(t, ctx, sub, 51)
	gapless(t, "subscriber", got, 1)
	stored, err := st.Events(ctx, "s", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	gapless(t, "stored", stored, 1)
	if len(stored) != 51 {
		t.Fatalf("%d events stored, want 51", len(stored))
	}
	if s := j.Stats(); s.Retries != 3 || s.Stored != 51 || s.Queued != 0 || s.Subscribers != 1 {
		t.Fatalf("Stats = %+v: want 3 retries, 51 stored, none queued, 1 subscriber", s)
	}
}

// TestCloseGivesUp: when the store keeps failing, Close returns when its
// context ends and says what was lost; waiters are released.
func TestCloseGivesUp(t *testing.T) {
	ctx := testCtx(t)
	st := &failing{Store: newStore(t, "s"), fails: -1}
	j := journal.New(st, journal.Options{RetryMin: time.Millisecond, RetryMax: 4 * time.Millisecond, Logger: logTo(t)})
	for i := range 10 {
		if _, err := j.Append(msg("s", i)); err != nil {
			t.Fatal(err)
		}
	}
	synced := make(chan error, 1)
	go func() {
		_, err := j.AppendSync(ctx, msg("s", 10))
		synced <- err
	}()
	// A short AppendSync gives up and says why.
	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := j.AppendSync(short, msg("s", 11)); !errors.Is(err, context.Canceled) {
		t.Errorf("AppendSync with an ended context: %v, want context.Canceled", err)
	}
	closeCtx, cancelClose := context.WithCancel(ctx)
	cancelClose()
	err := j.Close(closeCtx)
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Close with a failing store and an ended context: %v, want an error saying events were lost", err)
	}
	t.Logf("Close: %v", err)
	select {
	case err := <-synced:
		if !errors.Is(err, journal.ErrClosed) {
			t.Errorf("AppendSync pending at Close: %v, want ErrClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("AppendSync still waiting after Close")
	}
	if n, _ := st.LastSeq(ctx, "s"); n != 0 {
		t.Errorf("LastSeq = %d: the failing store stored something", n)
	}
}
