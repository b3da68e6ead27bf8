package natsbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-dev/harvest/event"
)

// publishBatch bounds the events published before waiting for their acks.
const publishBatch = 256

// Publish queues committed events for publishing (journal.Publisher). It
// never blocks: when QueueSize events are already waiting, the oldest are
// dropped (and counted), because followers read what they miss from the
// store. After Close it drops everything.
func (b *Bus) Publish(evs []event.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing {
		b.dropped += int64(len(evs))
		return
	}
	b.queue = append(b.queue, evs...)
	if over := len(b.queue) - b.cfg.QueueSize; over > 0 {
		b.dropped += int64(over)
		b.queue = append(b.queue[:0], b.queue[over:]...)
		if !b.overflow {
			b.overflow = true
			b.log.Warn("publish queue full: dropping the oldest events (followers on other servers read them from the store)", "queue", b.cfg.QueueSize)
		}
	} else if b.overflow && len(b.queue) < b.cfg.QueueSize/2 {
		b.overflow = false
	}
	b.signal()
}

func (b *Bus) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// publishLoop is the publisher goroutine: take up to publishBatch queued
// events, publish them until JetStream has them, repeat; until Close and
// the queue is empty, or Close gives up.
func (b *Bus) publishLoop() {
	defer close(b.pubDone)
	batch := make([]event.Event, 0, publishBatch)
	for {
		b.mu.Lock()
		for len(b.queue) == 0 {
			if b.closing {
				b.mu.Unlock()
				return
			}
			b.mu.Unlock()
			select {
			case <-b.wake:
			case <-b.pubCtx.Done():
				return
			}
			b.mu.Lock()
		}
		n := min(len(b.queue), publishBatch)
		batch = append(batch[:0], b.queue[:n]...)
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.inflight = n
		b.mu.Unlock()

		if !b.publish(batch) {
			return
		}
		clear(batch)
	}
}

// publish publishes batch, retrying what fails with backoff, until every
// event is acknowledged or given up on (it can never be published), or
// publishing stops (false).
func (b *Bus) publish(batch []event.Event) bool {
	wait := b.cfg.RetryMin
	for attempt := 1; ; attempt++ {
		failed := make([]bool, len(batch))
		futures := make([]jetstream.PubAckFuture, len(batch))
		var lastErr error
		nfailed, acked, given := 0, 0, 0
		for i, ev := range batch {
			m, err := message(ev)
			if err == nil {
				futures[i], err = b.js.PublishMsgAsync(m)
			}
			if err != nil {
				if b.giveUp(ev, err) {
					given++
					continue
				}
				failed[i], lastErr = true, err
				nfailed++
			}
		}
		for i, f := range futures {
			if f == nil {
				continue
			}
			select {
			case <-f.Ok():
				acked++
			case err := <-f.Err():
				if b.giveUp(batch[i], err) {
					given++
					continue
				}
				failed[i], lastErr = true, err
				nfailed++
			case <-b.pubCtx.Done():
				return false
			}
		}
		b.mu.Lock()
		b.published += int64(acked)
		b.failed += int64(given)
		b.inflight = nfailed
		b.mu.Unlock()
		if nfailed == 0 {
			return true
		}
		// Retry the failed ones, in order (a follower that got later ones
		// meanwhile fills the gap from the store and drops these).
		kept := batch[:0]
		for i, ev := range batch {
			if failed[i] && ev.Live == 0 { // a live piece late is no use: its stored event follows
				kept = append(kept, ev)
			}
		}
		batch = kept
		if attempt == 1 || attempt%20 == 0 {
			b.log.Warn("publishing events failed; retrying (they are stored; followers elsewhere read them from the store meanwhile)",
				"events", len(batch), "attempt", attempt, "retry_in", wait, "err", lastErr)
		}
		if errors.Is(lastErr, nats.ErrNoResponders) || errors.Is(lastErr, jetstream.ErrNoStreamResponse) || errors.Is(lastErr, jetstream.ErrStreamNotFound) {
			// The stream may be gone (a NATS server that lost its storage).
			ctx, cancel := context.WithTimeout(b.pubCtx, b.cfg.PublishTimeout)
			if err := b.ensureStream(ctx); err != nil && b.pubCtx.Err() == nil {
				b.log.Warn("recreating the stream failed", "err", err)
			}
			cancel()
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-b.pubCtx.Done():
			t.Stop()
			return false
		}
		wait = min(2*wait, b.cfg.RetryMax)
	}
}

// giveUp says whether err means ev can never be published (it is logged
// and skipped: followers read it from the store).
func (b *Bus) giveUp(ev event.Event, err error) bool {
	var enc *json.MarshalerError
	if errors.Is(err, nats.ErrMaxPayload) || errors.As(err, &enc) || errors.Is(err, errEncode) {
		b.log.Error("event cannot be published; followers read it from the store", "session", ev.Session, "seq", ev.Seq, "type", ev.Type(), "err", err)
		return true
	}
	return false
}

var errEncode = errors.New("encoding the event")

// message is ev as a NATS message: the event's JSON envelope on the
// session's subject, with Nats-Msg-Id <session>/<seq> (a stored event).
func message(ev event.Event) (*nats.Msg, error) {
	data, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("%w %d of session %s: %w", errEncode, ev.Seq, ev.Session, err)
	}
	m := nats.NewMsg(Subject(ev.Session))
	m.Data = data
	if ev.Live == 0 {
		// A live piece has none: it shares its seq with the stored event
		// before it, and a repeat of one is dropped by the Follower.
		m.Header.Set(jetstream.MsgIDHeader, MsgID(ev.Session, ev.Seq))
	}
	return m, nil
}

// MsgID is the Nats-Msg-Id of a session's event: <session>/<seq>.
func MsgID(session string, seq int64) string {
	return session + "/" + strconv.FormatInt(seq, 10)
}
