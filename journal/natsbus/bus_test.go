package natsbus_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/journal/natsbus"
	"github.com/harvest-dev/harvest/store"
)

// TestFollowAcrossNodes: node A runs the session (its journal stores and
// publishes), node B follows it from the same store and NATS: the events
// stored before Follow, then the live ones, each once, in order, and the
// live ones over NATS (B never heals by timer here).
func TestFollowAcrossNodes(t *testing.T) {
	ns := startNATS(t)
	db := dbWith(t, "s1", "s2")
	a := newNode(t, db, config(ns.url(), t), nil)
	b := newNode(t, db, config(ns.url(), t), nil)

	a.appendN(t, "s1", 20)
	f, err := b.bus.Follow(testCtx(t), "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	expect(t, f, 1, 20)
	for i := range 5 {
		a.appendN(t, "s2", 3) // another session's events are not s1's
		a.appendN(t, "s1", 40)
		expect(t, f, int64(21+40*i), int64(20+40*(i+1)))
	}
	if n := f.Healed(); n != 0 {
		t.Errorf("%d events came from the store after the catch-up; want all live over NATS", n)
	}
	waitFor(t, "A's publisher to be done", func() bool { return a.bus.Stats().Published == 20+5*43 })
	if got := ns.streamMsgs(testCtx(t)); got != 20+5*43 {
		t.Errorf("the stream holds %d messages, want %d", got, 20+5*43)
	}
}

// TestRepublishedSeqsDeduplicated: the same events published again are
// stored once by JetStream (Nats-Msg-Id); and a repeat that gets through
// anyway (published past the duplicate window, here under another id) is
// dropped by the follower by its seq.
func TestRepublishedSeqsDeduplicated(t *testing.T) {
	ctx := testCtx(t)
	ns := startNATS(t)
	db := dbWith(t, "s1")
	a := newNode(t, db, config(ns.url(), t), nil)
	b := newNode(t, db, config(ns.url(), t), nil)

	f, err := b.bus.Follow(ctx, "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a.appendN(t, "s1", 10)
	expect(t, f, 1, 10)
	stored, err := a.st.Events(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	a.bus.Publish(stored) // all ten again
	waitFor(t, "the republished events to be acknowledged", func() bool { return a.bus.Stats().Published == 20 })
	if got := ns.streamMsgs(ctx); got != 10 {
		t.Errorf("the stream holds %d messages after publishing 10 events twice, want 10", got)
	}

	// Past the window: a repeat with another Nats-Msg-Id.
	nc, err := nats.Connect(ns.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	m := nats.NewMsg(natsbus.Subject("s1"))
	m.Data, _ = stored[4].MarshalJSON()
	m.Header.Set("Nats-Msg-Id", "another-id")
	if _, err := nc.RequestMsg(m, 5*time.Second); err != nil { // JetStream acks it
		t.Fatal(err)
	}
	a.appendN(t, "s1", 1)
	expect(t, f, 11, 11) // not 5 again
	if n := f.Repeated(); n < 1 {
		t.Errorf("Repeated() = %d: the repeat of seq 5 did not reach the follower, so this test proves nothing", n)
	}
}

// TestResumeFromSeq: Follow after a seq starts at the next one (a client's
// Last-Event-ID), from the store, then live.
func TestResumeFromSeq(t *testing.T) {
	ns := startNATS(t)
	db := dbWith(t, "s1")
	a := newNode(t, db, config(ns.url(), t), nil)
	b := newNode(t, db, config(ns.url(), t), nil)
	a.appendN(t, "s1", 30)
	f, err := b.bus.Follow(testCtx(t), "s1", 17)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	expect(t, f, 18, 30)
	a.appendN(t, "s1", 10)
	expect(t, f, 31, 40)

	if _, err := b.bus.Follow(testCtx(t), "nope", 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("following a session the store does not have: %v, want store.ErrNotFound", err)
	}
}

// skipping publishes through the bus all but some seqs: publishes lost.
type skipping struct {
	bus  *natsbus.Bus
	mu   sync.Mutex
	skip map[int64]bool
}

func (s *skipping) Publish(evs []event.Event) {
	s.mu.Lock()
	var kept []event.Event
	for _, ev := range evs {
		if !s.skip[ev.Seq] {
			kept = append(kept, ev)
		}
	}
	s.mu.Unlock()
	s.bus.Publish(kept)
}

// TestGapHealedFromStore: publishes lost in the middle are read from the
// store when the next event arrives, before it.
func TestGapHealedFromStore(t *testing.T) {
	ns := startNATS(t)
	db := dbWith(t, "s1")
	a := newNode(t, db, config(ns.url(), t), func(b *natsbus.Bus) journal.Publisher {
		return &skipping{bus: b, skip: map[int64]bool{5: true, 6: true, 12: true}}
	})
	b := newNode(t, db, config(ns.url(), t), nil)
	f, err := b.bus.Follow(testCtx(t), "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The first event ends the follower's catch-up from the store (it is
	// read there or live): what follows can come only from NATS, or from
	// the store to heal a gap.
	a.appendN(t, "s1", 1)
	expect(t, f, 1, 1)
	a.appendN(t, "s1", 14)
	expect(t, f, 2, 15)
	if n := f.Healed(); n != 3 {
		t.Errorf("Healed() = %d, want the 3 events never published", n)
	}
}

// TestLostTailHealedByTimer: when the last events are never published,
// nothing arrives to reveal the gap; the follower reads the store after
// HealEvery of silence.
func TestLostTailHealedByTimer(t *testing.T) {
	ns := startNATS(t)
	db := dbWith(t, "s1")
	a := newNode(t, db, config(ns.url(), t), func(b *natsbus.Bus) journal.Publisher {
		return &skipping{bus: b, skip: map[int64]bool{9: true, 10: true}}
	})
	cfg := config(ns.url(), t)
	cfg.HealEvery = 50 * time.Millisecond
	b := newNode(t, db, cfg, nil)
	f, err := b.bus.Follow(testCtx(t), "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a.appendN(t, "s1", 1) // past the catch-up, as in TestGapHealedFromStore
	expect(t, f, 1, 1)
	a.appendN(t, "s1", 9)
	expect(t, f, 2, 10)
	if n := f.Healed(); n < 2 {
		t.Errorf("Healed() = %d, want at least the 2 events never published", n)
	}
}

// TestNATSRestartMidStream: NATS goes down while a session runs. Appends
// go on succeeding; the follower (no timer healing) stalls; NATS comes
// back on the same port and storage, the publisher's retries and the
// recreated consumer carry on, and the follower gets everything once.
func TestNATSRestartMidStream(t *testing.T) {
	ns := startNATS(t)
	db := dbWith(t, "s1")
	a := newNode(t, db, config(ns.url(), t), nil)
	b := newNode(t, db, config(ns.url(), t), nil)
	f, err := b.bus.Follow(testCtx(t), "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a.appendN(t, "s1", 10)
	expect(t, f, 1, 10)

	ns.stop()
	a.appendN(t, "s1", 10) // stored and flushed: NATS down does not block appends
	select {
	case ev := <-f.C:
		// Possible only through the store (this follower does not heal
		// by timer) or a NATS that is down: neither.
		t.Fatalf("got seq %d while NATS is down", ev.Seq)
	default:
	}
	ns.start()
	a.appendN(t, "s1", 10)
	expect(t, f, 11, 30)
	if got := a.bus.Stats().Dropped; got != 0 {
		t.Errorf("the publisher dropped %d events", got)
	}
}

// TestFollowPollsWhileNATSDown: with NATS down, a follower (no healing
// by timer) reads the store every PollDown, from the moment the
// connection drops; a follower opened meanwhile does not wait for a
// consumer; both get every event once, across NATS coming back.
func TestFollowPollsWhileNATSDown(t *testing.T) {
	ns := startNATS(t)
	db := dbWith(t, "s1")
	a := newNode(t, db, config(ns.url(), t), nil)
	cfg := config(ns.url(), t)
	cfg.PublishTimeout, cfg.PollDown = 10*time.Second, 50*time.Millisecond
	b := newNode(t, db, cfg, nil)
	f, err := b.bus.Follow(testCtx(t), "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a.appendN(t, "s1", 5)
	expect(t, f, 1, 5)

	ns.stop()
	waitFor(t, "b to see the connection lost", func() bool { return b.bus.Stats().Down })
	a.appendN(t, "s1", 5)
	expect(t, f, 6, 10) // from the store: NATS is down
	start := time.Now()
	g, err := b.bus.Follow(testCtx(t), "s1", 8)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if took := time.Since(start); took > cfg.PublishTimeout/2 {
		t.Errorf("Follow with NATS down took %s: it waited for a consumer (PublishTimeout %s)", took, cfg.PublishTimeout)
	}
	expect(t, g, 9, 10)
	a.appendN(t, "s1", 3)
	expect(t, f, 11, 13)
	expect(t, g, 11, 13)
	if f.Healed() < 8 {
		t.Errorf("follower healed %d events from the store, want the 8 written while NATS was down", f.Healed())
	}

	g.Close()

	// Back: live over NATS again (no polling, no healing by timer). The
	// consumer is recreated (delivering what is new) a moment after the
	// reconnect: events appended before it are filled from the store
	// when the first one arrives.
	ns.start()
	waitFor(t, "b to reconnect", func() bool { return !b.bus.Stats().Down })
	for appended := int64(14); ; appended++ {
		a.appendN(t, "s1", 1)
		select {
		case ev := <-f.C:
			if ev.Seq != 14 {
				t.Fatalf("after NATS came back: got seq %d, want 14", ev.Seq)
			}
			expect(t, f, 15, appended)
			return
		case <-time.After(100 * time.Millisecond):
		case <-testCtx(t).Done():
			t.Fatal("nothing over NATS after it came back")
		}
	}
}

// TestPublisherSurvivesNATSDown: with NATS gone, appends succeed, and
// Close gives up on the unpublished events when its context ends rather
// than hang, saying how many.
func TestPublisherSurvivesNATSDown(t *testing.T) {
	ns := startNATS(t)
	db := dbWith(t, "s1")
	a := newNode(t, db, config(ns.url(), t), nil)
	a.appendN(t, "s1", 3)
	waitFor(t, "the first events to be published", func() bool { return a.bus.Stats().Published == 3 })
	ns.stop()
	a.appendN(t, "s1", 5)
	if last, err := a.st.LastSeq(testCtx(t), "s1"); err != nil || last != 8 {
		t.Fatalf("LastSeq = %d, %v; want 8", last, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := a.j.Close(ctx); err != nil {
		t.Fatal(err)
	}
	err := a.bus.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), "not published") {
		t.Errorf("Close with NATS down and events queued: %v, want an error saying they were not published", err)
	}
}

// TestConnectErrors: a bad URL, nothing listening, JetStream off: each a
// clear error naming the URL.
func TestConnectErrors(t *testing.T) {
	ctx := testCtx(t)
	st := openTestStore(t)
	for _, bad := range []string{"", "http://x:4222", "nats://"} {
		if _, err := natsbus.Connect(ctx, st, natsbus.Config{URL: bad}); err == nil {
			t.Errorf("Connect(%q): no error", bad)
		}
	}
	ns := startNATS(t)
	url := ns.url()
	ns.stop()
	_, err := natsbus.Connect(ctx, st, natsbus.Config{URL: url, ConnectTimeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), url) {
		t.Errorf("Connect to a stopped server: %v, want an error naming %s", err, url)
	}
	_, err = natsbus.Connect(ctx, st, natsbus.Config{URL: "nats://u:secret@127.0.0.1:1"})
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("Connect with a password: %v, want an error without the password", err)
	}
}

func TestSubject(t *testing.T) {
	for id, want := range map[string]string{
		"ses-01H_x": "harvest.events.ses-01H_x",
		"a.b":       "harvest.events.~612e62",
		"~612e62":   "harvest.events.~7e363132653632",
	} {
		if got := natsbus.Subject(id); got != want {
			t.Errorf("Subject(%q) = %q, want %q", id, got, want)
		}
	}
}
