package slackbot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// # Events kept until done
//
// accept (events.go) records each event with its payload, pending
// (store.SlackInbox), before Slack is told it arrived; its handling
// (process) claims it (a store lock, so two servers sharing the store
// never handle one event at once), acts on it and marks it done. A
// server that died in between (kill -9, a power cut) leaves it pending;
// Slack, having had its acknowledgement, never sends it again, so the
// servers look for pending events themselves: at Start, and every
// rescanEvery for those older than settle (their server died, or
// stopped in the middle; a claim a dead server held runs out after
// claimTTL). A pending event older than maxPending is not
// acted on any more (the person has long moved on): it is marked done
// with a log line. An event whose handling a shutdown (Close) cut short
// stays pending; one whose handling ended, even with an error the
// thread was told of, is done.
//
// Handling twice is harmless: a session's id derives from its thread
// (a second Create finds it), a follow-up carries an idempotency key
// derived from its message (a second send is the first one), a
// reaction already there is fine.

const (
	// maxPending is how old a pending event may be and still be acted on.
	maxPending = time.Hour
	// claimTTL is how long a claim on an event lasts unless renewed (it
	// is, every third of it, while the event is handled): a server that
	// died lets go of its events this long after.
	claimTTL = 30 * time.Second
	// handleFor bounds an event's handling.
	handleFor = 5 * time.Minute
	// rescanEvery is how often the pending events are looked at; settle
	// is how old one must be (its own server claims it at once).
	rescanEvery = 15 * time.Second
	settle      = 10 * time.Second
)

// holdEnv, set to 1 in harvest serve's environment, makes the app hold
// every event it records instead of acting on it, until it stops: the
// tests kill the server then, between the acknowledgement and the
// handling, as a crash would.
const holdEnv = "HARVEST_TEST_SLACK_HOLD_EVENTS"

// Claims are the store's locks (store.Store's): an event is handled by
// one server at a time.
type Claims interface {
	AcquireLock(ctx context.Context, key, holder string, ttl time.Duration) (store.Lock, error)
	ReleaseLock(ctx context.Context, key, holder string) error
}

// inbox is what a Bot knows of the events it handles now.
type inbox struct {
	once   sync.Once
	holder string // this Bot's name in the claims

	mu     sync.Mutex
	active map[string]bool // event id → handled here now
}

// wireMessage is a message as a pending event's payload.
type wireMessage struct {
	Event    string `json:"event"`
	Channel  string `json:"channel"`
	TS       string `json:"ts"`
	ThreadTS string `json:"thread_ts,omitempty"`
	User     string `json:"user"`
	Text     string `json:"text,omitempty"`
	IM       bool   `json:"im,omitempty"`
	Mention  bool   `json:"mention,omitempty"`
	Kind     string `json:"kind,omitempty"`
	Prev     string `json:"prev,omitempty"`
}

func (m message) wire() wireMessage {
	return wireMessage{Event: m.event, Channel: m.channel, TS: m.ts, ThreadTS: m.threadTS, User: m.user, Text: m.text,
		IM: m.im, Mention: m.mention, Kind: m.kind, Prev: m.prev}
}

func (w wireMessage) message() message {
	return message{event: w.Event, channel: w.Channel, ts: w.TS, threadTS: w.ThreadTS, user: w.User, text: w.Text,
		im: w.IM, mention: w.Mention, kind: w.Kind, prev: w.Prev}
}

// holderName is this Bot's name in the claims: its host, process and a
// random part.
func (b *Bot) holderName() string {
	b.in.once.Do(func() {
		host, _ := os.Hostname()
		r := make([]byte, 6)
		rand.Read(r)
		b.in.holder = fmt.Sprintf("slack:%s:%d:%s", host, os.Getpid(), hex.EncodeToString(r))
	})
	return b.in.holder
}

// record stores an event pending with its payload; false when it was
// recorded before (a retry, a redelivery after a reconnect).
func (b *Bot) record(ctx context.Context, m message) (bool, error) {
	if m.event == "" {
		return true, nil
	}
	payload, err := json.Marshal(m.wire())
	if err != nil {
		return false, fmt.Errorf("encoding event %s: %w", m.event, err)
	}
	err = b.st.AddSlackEventPending(ctx, m.event, payload, time.Time{})
	if errors.Is(err, store.ErrConflict) {
		return false, nil
	}
	return err == nil, err
}

// process handles a recorded event in a goroutine the Bot owns: claimed,
// acted on, marked done.
func (b *Bot) process(m message) {
	b.goFn(func() {
		if !b.begin(m.event) {
			return // handled here already
		}
		defer b.end(m.event)
		ctx, cancel := context.WithTimeout(b.ctx, handleFor)
		defer cancel()
		if os.Getenv(holdEnv) == "1" {
			b.log.Warn("holding a Slack event, not acting on it ("+holdEnv+")", "event", m.event)
			<-ctx.Done()
			return
		}
		release, ok := b.claim(ctx, m.event)
		if !ok {
			return
		}
		defer release()
		b.onMessage(ctx, m)
		if b.ctx.Err() != nil {
			return // stopping: it stays pending for the next start
		}
		b.done(m.event)
	})
}

// begin marks an event handled here; false when it is already.
func (b *Bot) begin(id string) bool {
	b.in.mu.Lock()
	defer b.in.mu.Unlock()
	if b.in.active[id] {
		return false
	}
	if b.in.active == nil {
		b.in.active = map[string]bool{}
	}
	b.in.active[id] = true
	return true
}

func (b *Bot) end(id string) {
	b.in.mu.Lock()
	delete(b.in.active, id)
	b.in.mu.Unlock()
}

// claim takes an event's claim, renewed until release; false: another
// server holds it (it handles it) or the store failed (a later scan
// retries).
func (b *Bot) claim(ctx context.Context, id string) (release func(), ok bool) {
	if id == "" {
		return func() {}, true
	}
	key, holder := "slack-event:"+id, b.holderName()
	if _, err := b.st.AcquireLock(ctx, key, holder, claimTTL); err != nil {
		if !errors.Is(err, store.ErrLocked) && ctx.Err() == nil {
			b.log.Error("claiming a Slack event", "event", id, "err", err)
		}
		return nil, false
	}
	rctx, stop := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() { // owned: release waits for it
		defer close(renewed)
		t := time.NewTicker(claimTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				if _, err := b.st.AcquireLock(rctx, key, holder, claimTTL); err != nil && rctx.Err() == nil {
					b.log.Warn("renewing the claim of a Slack event", "event", id, "err", err)
				}
			}
		}
	}()
	return func() {
		stop()
		<-renewed
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := b.st.ReleaseLock(fctx, key, holder); err != nil {
			b.log.Warn("releasing the claim of a Slack event (it runs out by itself)", "event", id, "err", err)
		}
	}, true
}

// done marks an event done.
func (b *Bot) done(id string) {
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), 10*time.Second)
	defer cancel()
	if err := b.st.SlackEventDone(ctx, id); err != nil {
		b.log.Warn("marking a Slack event done (it may be handled again, harmlessly)", "event", id, "err", err)
	}
}

// resume handles the pending events at Start (every one) and every
// rescanEvery (those pending for longer than settle), until Close.
func (b *Bot) resume() {
	t := time.NewTicker(rescanEvery)
	defer t.Stop()
	for age := time.Duration(0); ; age = settle {
		b.scan(age)
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scan handles the pending events received more than age ago; those
// older than maxPending are marked done unhandled.
func (b *Bot) scan(age time.Duration) {
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	evs, err := b.st.PendingSlackEvents(ctx)
	if err != nil {
		if b.ctx.Err() == nil {
			b.log.Error("listing the pending Slack events", "err", err)
		}
		return
	}
	now := time.Now()
	for _, e := range evs {
		if now.Sub(e.ReceivedAt) < age {
			continue
		}
		if now.Sub(e.ReceivedAt) > maxPending {
			b.log.Warn("a Slack event recorded but never handled is too old to act on now; dropped", "event", e.ID, "received", e.ReceivedAt)
			b.done(e.ID)
			continue
		}
		var w wireMessage
		if err := json.Unmarshal(e.Payload, &w); err != nil {
			b.log.Error("a pending Slack event that does not decode; dropped", "event", e.ID, "err", err)
			b.done(e.ID)
			continue
		}
		w.Event = e.ID
		b.log.Info("handling a Slack event a stop cut short", "event", e.ID, "received", e.ReceivedAt)
		b.process(w.message())
	}
}
