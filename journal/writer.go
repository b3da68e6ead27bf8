package journal

import (
	"errors"
	"fmt"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// errAbandoned marks events still queued when Close gave up on the store.
var errAbandoned = fmt.Errorf("%w before the store took the event", ErrClosed)

// run is the writer goroutine: take what is queued, commit it, fan it out,
// release the waiters; until Close and the queue is empty.
func (j *Journal) run() {
	defer close(j.writerDone)
	var batch []entry
	for {
		j.mu.Lock()
		for len(j.queue) == 0 {
			if j.closing {
				j.mu.Unlock()
				return
			}
			j.mu.Unlock()
			<-j.wake
			j.mu.Lock()
		}
		n := min(len(j.queue), j.opt.MaxBatch)
		batch = append(batch[:0], j.queue[:n]...)
		rest := copy(j.queue, j.queue[n:])
		clear(j.queue[rest:])
		j.queue = j.queue[:rest]
		close(j.space)
		j.space = make(chan struct{})
		j.mu.Unlock()

		j.commit(batch)
		j.fanout(batch)
		j.resolve(batch)
		clear(batch)
	}
}

// commit stores the events of batch, setting err on the entries that could
// not be stored.
func (j *Journal) commit(batch []entry) {
	evs := make([]event.Event, 0, len(batch))
	var msgs []*store.Message
	for i := range batch {
		if !batch[i].flush {
			evs = append(evs, batch[i].ev)
			if batch[i].msg != nil {
				msgs = append(msgs, batch[i].msg)
			}
		}
	}
	if len(evs) == 0 {
		return
	}
	err := j.store(evs, msgs)
	if err == nil {
		return
	}
	if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
		for i := range batch {
			batch[i].err = err
		}
		return
	}
	// Some session cannot take its events (deleted, or another writer
	// has its seqs): store each session's events on their own so the
	// others go through.
	var order []string
	bySession := map[string][]event.Event{}
	msgsOf := map[string][]*store.Message{}
	for _, ev := range evs {
		if _, ok := bySession[ev.Session]; !ok {
			order = append(order, ev.Session)
		}
		bySession[ev.Session] = append(bySession[ev.Session], ev)
	}
	for _, m := range msgs {
		msgsOf[m.Session] = append(msgsOf[m.Session], m)
	}
	for _, id := range order {
		err := j.store(bySession[id], msgsOf[id])
		switch {
		case err == nil:
			continue
		case errors.Is(err, store.ErrNotFound):
			err = fmt.Errorf("%w: session %s: its events are not stored", ErrDeleted, id)
		case errors.Is(err, store.ErrConflict):
			err = fmt.Errorf("journal: session %s: another writer stored seqs this journal gave out (two journals on one store?): %d events not stored, its counter is reloaded: %w", id, len(bySession[id]), err)
			j.log.Error("seq conflict", "session", id, "err", err)
		}
		var s *sessionState
		for i := range batch {
			if batch[i].ev.Session == id && !batch[i].flush {
				batch[i].err, s = err, batch[i].s
			}
		}
		if errors.Is(err, store.ErrConflict) {
			j.reset(s, err)
		}
	}
}

// store commits evs (with msgs, in the same transaction), retrying with
// backoff until it works, fails in a way a retry cannot fix (ErrNotFound,
// ErrConflict), or Close gives up.
func (j *Journal) store(evs []event.Event, msgs []*store.Message) error {
	wait := j.opt.RetryMin
	for {
		if j.ctx.Err() != nil {
			return fmt.Errorf("%w%s", errAbandoned, j.lastErr())
		}
		var err error
		if len(msgs) > 0 {
			err = j.st.AppendEventsWith(j.ctx, evs, msgs)
		} else {
			err = j.st.AppendEvents(j.ctx, evs)
		}
		if err == nil {
			j.mu.Lock()
			j.commitErr = nil
			j.mu.Unlock()
			return nil
		}
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
			return err
		}
		if j.ctx.Err() == nil {
			j.mu.Lock()
			j.commitErr = err
			j.mu.Unlock()
			j.log.Error("storing events failed; retrying", "events", len(evs), "retry_in", wait, "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-j.ctx.Done():
			t.Stop()
		}
		wait = min(2*wait, j.opt.RetryMax)
	}
}

// reset makes the next Append of s's session reload its counter from the
// store, and fails the events of s still queued (their seqs came from the
// counter that was wrong).
func (j *Journal) reset(s *sessionState, err error) {
	j.mu.Lock()
	s.loaded = false
	s.gen++
	kept := j.queue[:0]
	var failed []entry
	for _, e := range j.queue {
		if e.s == s && !e.flush {
			e.err = err
			failed = append(failed, e)
			continue
		}
		kept = append(kept, e)
	}
	clear(j.queue[len(kept):])
	j.queue = kept
	j.mu.Unlock()
	j.resolve(failed)
}

// fanout hands the committed events of batch to their sessions'
// subscribers, then to the Publisher if there is one. It never blocks
// (Subscription.offer does not, nor may Publish).
func (j *Journal) fanout(batch []entry) {
	bySession := map[string][]event.Event{}
	for i := range batch {
		e := &batch[i]
		if e.flush || e.err != nil {
			continue
		}
		ev := e.ev
		if enc, ok := ev.Data.(encoded); ok {
			ev.Data = enc.Payload
		}
		bySession[ev.Session] = append(bySession[ev.Session], ev)
	}
	j.subMu.RLock()
	for id, evs := range bySession {
		for sub := range j.subs[id] {
			sub.offer(evs)
		}
	}
	j.subMu.RUnlock()
	if j.opt.Publisher != nil {
		var all []event.Event
		for i := range batch {
			e := &batch[i]
			if e.flush || e.err != nil {
				continue
			}
			ev := e.ev
			if enc, ok := ev.Data.(encoded); ok {
				ev.Data = enc.Payload
			}
			all = append(all, ev)
		}
		if len(all) > 0 {
			j.opt.Publisher.Publish(all)
		}
	}
}

// resolve releases the AppendSync and Flush waiters of batch and updates
// the sessions' counts.
func (j *Journal) resolve(batch []entry) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := range batch {
		e := &batch[i]
		if e.flush {
			e.done <- e.s.flushErr(e.drops)
			continue
		}
		e.s.pending--
		if e.err != nil {
			e.s.drops++
			e.s.dropErr = e.err
			if errors.Is(e.err, errAbandoned) {
				j.closeLost++
			}
		}
		if e.done != nil {
			e.done <- e.err
		}
	}
}
