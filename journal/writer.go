package journal

import (
	"errors"
	"fmt"
	"strconv"
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
		for {
			due := j.storeDueLocked(time.Now())
			if len(j.queue) > 0 {
				break
			}
			if j.closing {
				if len(j.runs) > 0 {
					j.storeRunsLocked()
					continue
				}
				j.mu.Unlock()
				return
			}
			j.mu.Unlock()
			j.wait(due)
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
// not be stored. Unfenced and fenced entries are committed apart (each in
// one transaction).
func (j *Journal) commit(batch []entry) {
	var plain, fenced []*entry
	for i := range batch {
		switch {
		case batch[i].flush, batch[i].ev.Live > 0:
		case batch[i].fence.Epoch > 0:
			fenced = append(fenced, &batch[i])
		default:
			plain = append(plain, &batch[i])
		}
	}
	j.commitSet(plain)
	j.commitSet(fenced)
}

// group is the entries of one session (and one fence) in a set.
type group struct {
	session string
	fence   store.Fence
	evs     []event.Event
	msgs    []*store.Message
	es      []*entry
}

// commitSet stores the events of es in one transaction, or, when some
// session cannot take its events (deleted, another writer has its seqs,
// its lease is lost), each session's on their own so the others go
// through.
func (j *Journal) commitSet(es []*entry) {
	if len(es) == 0 {
		return
	}
	var order []string
	groups := map[string]*group{}
	split := false
	var evs []event.Event
	var msgs []*store.Message
	for _, e := range es {
		key := e.ev.Session + "\x00" + strconv.FormatInt(e.fence.Epoch, 10)
		g := groups[key]
		if g == nil {
			g = &group{session: e.ev.Session, fence: e.fence}
			for _, o := range groups {
				split = split || o.session == g.session // two epochs of one session
			}
			groups[key] = g
			order = append(order, key)
		}
		g.evs = append(g.evs, e.ev)
		g.es = append(g.es, e)
		evs = append(evs, e.ev)
		if e.msg != nil {
			g.msgs = append(g.msgs, e.msg)
			msgs = append(msgs, e.msg)
		}
	}
	fences := func(gs ...*group) []store.Fence {
		if gs[0].fence.Epoch == 0 {
			return nil
		}
		fs := make([]store.Fence, len(gs))
		for i, g := range gs {
			fs[i] = g.fence
		}
		return fs
	}
	if !split {
		all := make([]*group, len(order))
		for i, k := range order {
			all[i] = groups[k]
		}
		err := j.store(evs, msgs, fences(all...))
		if err == nil {
			return
		}
		if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrLeaseLost) {
			for _, e := range es {
				e.err = err
			}
			return
		}
	}
	for _, k := range order {
		g := groups[k]
		err := j.store(g.evs, g.msgs, fences(g))
		switch {
		case err == nil:
			continue
		case errors.Is(err, store.ErrNotFound):
			err = fmt.Errorf("%w: session %s: its events are not stored", ErrDeleted, g.session)
		case errors.Is(err, store.ErrConflict):
			err = fmt.Errorf("journal: session %s: another writer stored seqs this journal gave out (two journals on one store?): %d events not stored, its counter is reloaded: %w", g.session, len(g.evs), err)
			j.log.Error("seq conflict", "session", g.session, "err", err)
		case errors.Is(err, store.ErrLeaseLost):
			err = fmt.Errorf("journal: session %s: %d events not stored, this node no longer owns the session: %w", g.session, len(g.evs), err)
			j.log.Warn("lease lost", "session", g.session, "epoch", g.fence.Epoch, "err", err)
		}
		for _, e := range g.es {
			e.err = err
		}
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrLeaseLost) {
			j.reset(g.es[0].s, err)
		}
		if errors.Is(err, store.ErrLeaseLost) {
			j.leaseLost(g.fence, err)
		}
	}
}

// store commits evs (with msgs, in the same transaction; under fences if
// not nil), retrying with backoff until it works, fails in a way a retry
// cannot fix (ErrNotFound, ErrConflict, ErrLeaseLost), or Close gives up.
func (j *Journal) store(evs []event.Event, msgs []*store.Message, fences []store.Fence) error {
	wait := j.opt.RetryMin
	for {
		if j.ctx.Err() != nil {
			return fmt.Errorf("%w%s", errAbandoned, j.lastErr())
		}
		var err error
		switch {
		case fences != nil:
			err = j.st.(fencedStore).AppendEventsFenced(j.ctx, fences, evs, msgs)
		case len(msgs) > 0:
			err = j.st.AppendEventsWith(j.ctx, evs, msgs)
		default:
			err = j.st.AppendEvents(j.ctx, evs)
		}
		if err == nil {
			j.commits.Add(1)
			j.mu.Lock()
			j.commitErr = nil
			j.mu.Unlock()
			return nil
		}
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrLeaseLost) {
			return err
		}
		if j.ctx.Err() == nil {
			j.retries.Add(1)
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
	j.dropRunLocked(s)
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
	var stored, live uint64
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
		if ev.Live > 0 {
			live++
		} else {
			stored++
		}
	}
	j.stored.Add(stored)
	j.live.Add(live)
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
		if e.err != nil && e.ev.Live == 0 {
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
