package session

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/store"
)

// Send stores a message for the session and returns it once it is stored
// with its message.queued event. mode "" is the session's. See SendMessage.
func (m *Manager) Send(ctx context.Context, owner, id, text, mode string) (*store.Message, error) {
	return m.SendMessage(ctx, owner, id, Outgoing{Text: text, Mode: mode})
}

// Outgoing is a message to send (SendMessage).
type Outgoing struct {
	Text string
	// Mode is "queue", "interrupt", or "" for the session's.
	Mode string
	// Key is an idempotency key ("" for none) and Sender who gives it (an
	// API token id): a send with the Key and Sender of a message the
	// session has returns that message and stores nothing, so a client
	// may retry a send whose answer it lost. The same key with another
	// Text or Mode is ErrConflict.
	Key, Sender string
}

// maxKey bounds an idempotency key.
const maxKey = 255

// SendMessage stores a message for the session and returns it once it is
// stored with its message.queued event, in one transaction
// (journal.AppendMessage: a crash keeps both or neither). The runner
// delivers it after the messages before it; "interrupt" also cancels the
// running turn. A send with an idempotency key the sender already used on
// the session returns the message stored then.
func (m *Manager) SendMessage(ctx context.Context, owner, id string, out Outgoing) (*store.Message, error) {
	text, mode := out.Text, out.Mode
	var problems []string
	if strings.TrimSpace(text) == "" {
		problems = append(problems, "text is empty: say what the agent should do")
	}
	switch mode {
	case "", ModeQueue, ModeInterrupt:
	default:
		problems = append(problems, fmt.Sprintf("mode %q: use %q or %q (or leave it empty for the session's)", mode, ModeQueue, ModeInterrupt))
	}
	if len(out.Key) > maxKey || strings.IndexFunc(out.Key, func(c rune) bool { return c < 0x21 || c > 0x7e }) >= 0 {
		problems = append(problems, fmt.Sprintf("idempotency key %q: use at most %d printable ASCII characters without spaces (a UUID is fine)", clipKey(out.Key), maxKey))
	}
	if len(problems) > 0 {
		return nil, &InputError{Problems: problems}
	}
	defer m.gates.rlock(id)()
	if m.isDeleting(id) {
		return nil, fmt.Errorf("session %s: %w (it is being deleted)", id, ErrNotFound)
	}
	s, err := m.session(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	var hash []byte
	keyID := id + "\x00" + out.Sender + "\x00" + out.Key
	if out.Key != "" {
		// One send per key at a time, so two retries racing cannot both
		// store the message (the store would refuse the second).
		defer m.keys.lock(keyID)()
		// A send of this key whose caller gave up waiting for the store
		// may still be queued in the journal: wait for its fate first, or
		// this one would queue a second message with the key, and the
		// store would refuse the batch holding both (losing the first).
		if err := m.late.wait(ctx, keyID); err != nil {
			return nil, fmt.Errorf("sending to session %s: an earlier send with idempotency key %q is not stored yet: %w: %w; send it again with the same key", id, out.Key, ErrUnavailable, err)
		}
		h := sha256.Sum256([]byte(text + "\x00" + out.Mode))
		hash = h[:]
		prev, err := m.st.MessageByKey(ctx, id, out.Sender, out.Key)
		switch {
		case err == nil:
			if !bytes.Equal(prev.RequestHash, hash) {
				return nil, fmt.Errorf("idempotency key %q was used on session %s for another message (%s, sent %s) with a different text or mode: %w; use a new key for a new message", out.Key, id, prev.ID, prev.CreatedAt.Format(time.RFC3339), ErrConflict)
			}
			return prev, nil
		case !errors.Is(err, store.ErrNotFound):
			return nil, fmt.Errorf("looking up idempotency key %q of session %s: %w", out.Key, id, err)
		}
	}
	if err := m.refusing(); err != nil {
		return nil, fmt.Errorf("sending to session %s: %w; the message was not stored, send it again when it is back", id, err)
	}
	if s.State.Ended() {
		return nil, fmt.Errorf("session %s is %s: %w; start a new session", id, s.State, ErrConflict)
	}
	if end := s.CreatedAt.Add(s.Limits.MaxLifetime); !m.clock.Now().Before(end) {
		return nil, fmt.Errorf("session %s reached its max lifetime of %s: %w; start a new session", id, s.Limits.MaxLifetime, ErrConflict)
	}
	if s.State == store.StateSuspended {
		// A resume: refused, the message not stored, below the floor.
		if err := m.admit(fmt.Sprintf("resuming session %s (the message was not stored)", id)); err != nil {
			return nil, err
		}
		// It would be live again: a live-session cap reached refuses it
		// (quota.go).
		if err := overBudget(ctx, m.st, s.User, m.clock.Now(), false); err != nil {
			return nil, fmt.Errorf("resuming session %s (the message was not stored): %w", id, err)
		}
	}
	if mode == "" {
		mode = s.Mode
	}
	pos := 1
	if q, err := m.st.Messages(ctx, id, store.MessageQueued); err == nil {
		pos = len(q) + 1
	}
	// With several nodes, the owner stores the message: its journal
	// numbers the session's events (claim takes the lease if nobody has it).
	// A full node stores it and leaves the session to a node with room.
	unlock, queued, err := m.claimOrQueue(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("sending to session %s: %w; the message was not stored", id, err)
	}
	defer unlock()
	msg := &store.Message{ID: newMessageID(), Session: id, Text: text, Mode: mode, State: store.MessageQueued, CreatedAt: m.clock.Now().UTC(),
		Key: out.Key, RequestHash: hash}
	if out.Key != "" {
		msg.KeyOwner = out.Sender
	}
	ev := event.Event{Session: id, Time: msg.CreatedAt, Data: event.MessageQueued{MessageID: msg.ID, Text: text, Mode: mode, Position: pos}}
	var late func(<-chan error)
	if out.Key != "" {
		late = func(done <-chan error) { m.late.add(keyID, done) }
	}
	if _, err := m.j.AppendMessageLate(ctx, ev, msg, late); err != nil {
		if errors.Is(err, journal.ErrDeleted) {
			return nil, fmt.Errorf("session %s: %w (it was deleted)", id, ErrNotFound)
		}
		if errors.Is(err, journal.ErrClosed) {
			return nil, fmt.Errorf("sending to session %s: %w: Harvest is shutting down; the message was not stored, send it again when it is back", id, ErrUnavailable)
		}
		if out.Key != "" && errors.Is(err, store.ErrConflict) {
			// The key's first send was still queued in the journal when
			// this retry looked it up (its caller gave up waiting for a
			// store that did not answer, and retried): it is stored now.
			if prev, perr := m.st.MessageByKey(ctx, id, out.Sender, out.Key); perr == nil && bytes.Equal(prev.RequestHash, hash) {
				return prev, nil
			}
		}
		return nil, fmt.Errorf("storing the message for session %s: %w (it may still be stored: send it again with the same idempotency key to find out)", id, err)
	}
	m.remember(ctx, id, msg.ID)
	if queued {
		m.release(id)
		return msg, nil
	}
	w := wakeNew
	if mode == ModeInterrupt {
		w.interrupt = msg
	}
	m.wake(id, w)
	return msg, nil
}

func clipKey(k string) string {
	if len(k) > 40 {
		return k[:40] + "…"
	}
	return k
}

// lateKeys are the keyed sends whose caller gave up waiting for the
// journal's commit (a store that did not answer within the request's
// budget): their message is still queued and may yet be stored. A later
// send of the same key (under the key's lock, so one at a time) waits for
// that outcome before it looks the key up. An entry is dropped by the
// send that sees its outcome, or by the next add once its outcome is in:
// nothing waits on these channels but senders, so no goroutine is needed.
type lateKeys struct {
	mu sync.Mutex
	m  map[string]<-chan error
}

func (l *lateKeys) add(key string, done <-chan error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]<-chan error{}
	}
	for k, c := range l.m {
		select {
		case <-c:
			delete(l.m, k) // its outcome is in: the store has it, or never will
		default:
		}
	}
	l.m[key] = done
}

// wait waits until the late send of key, if any, is committed or failed
// (either way the store now says whether the key is taken), or ctx ends.
func (l *lateKeys) wait(ctx context.Context, key string) error {
	l.mu.Lock()
	c := l.m[key]
	l.mu.Unlock()
	if c == nil {
		return nil
	}
	wctx, bounded := store.Call(ctx, "an earlier send's commit")
	select {
	case <-c:
		bounded(nil)
		l.mu.Lock()
		if l.m[key] == c {
			delete(l.m, key)
		}
		l.mu.Unlock()
		return nil
	case <-wctx.Done():
		return bounded(wctx.Err())
	}
}
