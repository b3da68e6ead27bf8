package journal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/harvest-dev/harvest/event"
)

// Subscription delivers a session's events in seq order: first those stored
// after the seq given to Subscribe, then live ones as they are committed.
type Subscription struct {
	// C delivers the events. It is closed when the subscription ends; Err
	// then says why.
	C <-chan event.Event

	c        chan event.Event
	j        *Journal
	session  string
	after    int64
	ctx      context.Context
	cancel   context.CancelCauseFunc
	done     chan struct{} // closed when the pump has exited
	wentLive chan struct{} // closed by the pump when live is set (tests wait on it)

	mu         sync.Mutex
	live       bool          // replay done: the slow-subscriber rules apply
	queue      []event.Event // committed, not yet taken by the pump
	overflowed bool          // replaying: the queue overflowed and was discarded
	ended      error         // set once: why the subscription ends
	ending     chan struct{} // closed when ended is set
	wake       chan struct{} // cap 1: the queue has events (or ended is set)
	err        error         // set by the pump before it closes C
	dropped    int64         // coalescable events merged or dropped
}

// errUnsubscribed is the cause of a subscription its owner closed.
var errUnsubscribed = errors.New("journal: subscription closed")

// chanBuffer is the capacity of C: enough that the pump hands over events
// in runs rather than one context switch each.
const chanBuffer = 128

// Subscribe delivers the events of session with seq > after: those stored,
// then live ones, with no gap and no duplicate between the two. The
// subscription ends when ctx ends, Close is called, the session is
// forgotten, the journal closes, or the subscriber is cut off for being too
// slow (see the package doc). A session the store does not have is an
// error wrapping store.ErrNotFound.
func (j *Journal) Subscribe(ctx context.Context, session string, after int64) (*Subscription, error) {
	sctx, cancel := context.WithCancelCause(ctx)
	s := &Subscription{
		c: make(chan event.Event, chanBuffer), j: j, session: session, after: max(after, 0),
		ctx: sctx, cancel: cancel, done: make(chan struct{}), wentLive: make(chan struct{}),
		ending: make(chan struct{}), wake: make(chan struct{}, 1),
	}
	s.C = s.c

	// Register for live events before anything is read from the store.
	j.subMu.Lock()
	if j.subsClosed {
		j.subMu.Unlock()
		cancel(ErrClosed)
		return nil, ErrClosed
	}
	if j.subs[session] == nil {
		j.subs[session] = map[*Subscription]struct{}{}
	}
	j.subs[session][s] = struct{}{}
	j.all[s] = struct{}{}
	j.pumps.Add(1)
	j.subMu.Unlock()

	if _, err := j.st.GetSession(ctx, session); err != nil {
		j.unsubscribe(s)
		j.pumps.Done()
		cancel(errUnsubscribed)
		return nil, fmt.Errorf("journal: subscribe to session %s: %w", session, err)
	}
	go s.run()
	return s, nil
}

// Events is C, for code that takes any event stream (the API's SSE
// handler takes a Subscription or a natsbus.Follower).
func (s *Subscription) Events() <-chan event.Event { return s.C }

// Err says why the subscription ended, once C is closed: ErrTooSlow,
// ErrDeleted, ErrClosed, the context's error, or a store error. It is nil
// while C is open, and after Close.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if errors.Is(s.err, errUnsubscribed) {
		return nil
	}
	return s.err
}

// Dropped counts the coalescable events this subscriber did not get one by
// one (merged into a neighbour or dropped) because it was behind.
func (s *Subscription) Dropped() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// Close ends the subscription and waits for its goroutine to exit. C is
// closed; events not yet received are discarded.
func (s *Subscription) Close() {
	s.cancel(errUnsubscribed)
	<-s.done
}

// end makes the subscription end with err once its queue is delivered
// (or at once, while it is still replaying).
func (s *Subscription) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked(err)
}

func (s *Subscription) endLocked(err error) {
	if s.ended != nil {
		return
	}
	s.ended = err
	close(s.ending)
	s.poke()
}

func (s *Subscription) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (j *Journal) unsubscribe(s *Subscription) {
	j.subMu.Lock()
	defer j.subMu.Unlock()
	if subs := j.subs[s.session]; subs != nil {
		delete(subs, s)
		if len(subs) == 0 {
			delete(j.subs, s.session)
		}
	}
	delete(j.all, s)
}

// run is the pump goroutine.
func (s *Subscription) run() {
	defer s.j.pumps.Done()
	defer close(s.done)
	err := s.pump()
	s.j.unsubscribe(s)
	s.cancel(errUnsubscribed) // release the context
	s.mu.Lock()
	s.err = err
	s.queue = nil
	s.mu.Unlock()
	close(s.c)
}

func (s *Subscription) cause() error { return context.Cause(s.ctx) }

func (s *Subscription) pump() error {
	last := s.after
	// Replay from the store until it has nothing newer and the live queue
	// has not overflowed meanwhile.
	for {
		for {
			select {
			case <-s.ending:
				return s.endErr()
			default:
			}
			evs, err := s.j.st.Events(s.ctx, s.session, last, s.j.opt.ReplayPage)
			if err != nil {
				if s.ctx.Err() != nil {
					return s.cause()
				}
				return fmt.Errorf("journal: replaying session %s after seq %d: %w", s.session, last, err)
			}
			for _, ev := range evs {
				select {
				case s.c <- ev:
					last = ev.Seq
				case <-s.ctx.Done():
					return s.cause()
				case <-s.ending:
					return s.endErr()
				}
			}
			if len(evs) < s.j.opt.ReplayPage {
				break
			}
		}
		s.mu.Lock()
		if s.overflowed {
			s.overflowed = false
			clear(s.queue)
			s.queue = s.queue[:0]
			s.mu.Unlock()
			continue
		}
		s.live = true
		s.mu.Unlock()
		close(s.wentLive)
		break
	}

	// Live: deliver the queue, skipping what the replay already gave.
	// nextLive is the live piece expected next at seq last: the replay
	// gave none, so a run of pieces already under way is skipped (its
	// stored event brings its content).
	var buf []event.Event
	nextLive := 1
	for {
		s.mu.Lock()
		buf, s.queue = s.queue, buf[:0]
		ended := s.ended
		s.mu.Unlock()
		for i, ev := range buf {
			if ev.Live > 0 {
				// A live piece, only in the row of pieces after the stored
				// event this subscriber is at (event/live.go).
				if ev.Seq != last || ev.Live != nextLive {
					continue
				}
				nextLive++
			} else if ev.Seq <= last {
				continue
			}
			select {
			case s.c <- ev: // the common case: room in C, no need to watch ctx
			default:
				select {
				case s.c <- ev:
				case <-s.ctx.Done():
					return s.cause()
				}
			}
			if ev.Live == 0 {
				last, nextLive = ev.Seq, 1
			}
			buf[i] = event.Event{}
		}
		if len(buf) > 0 {
			continue
		}
		if ended != nil {
			return ended
		}
		select {
		case <-s.wake:
		case <-s.ctx.Done():
			return s.cause()
		}
	}
}

func (s *Subscription) endErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// offer queues committed events for the subscriber. Called by the writer
// goroutine; it never blocks on the subscriber.
func (s *Subscription) offer(evs []event.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != nil {
		return
	}
	limit := s.j.opt.Buffer
	for _, ev := range evs {
		switch {
		case len(s.queue) < limit:
			s.queue = append(s.queue, ev)
		case !s.live:
			// Replaying: the store has all of these; replay again.
			s.overflowed = true
			clear(s.queue)
			s.queue = append(s.queue[:0], ev)
		case s.droppable(ev):
			s.dropped++
			if n := len(s.queue); n > 0 {
				if m, ok := merge(s.queue[n-1], ev); ok {
					s.queue[n-1] = m
				}
			}
		default:
			i := slices.IndexFunc(s.queue, func(q event.Event) bool { return q.Live > 0 })
			if i < 0 {
				i = slices.IndexFunc(s.queue, s.droppable)
			}
			if i < 0 {
				s.endLocked(ErrTooSlow)
				s.j.cutOff.Add(1)
				return
			}
			s.dropped++
			s.queue = append(slices.Delete(s.queue, i, i+1), ev)
		}
	}
	s.poke()
}

// droppable says whether a slow subscriber may go without ev: a live
// piece (its content comes again in the stored event after it), or, when
// the journal stores every piece (Options.StoreEvery < 0), a stored one
// (rebuilt by the complete event that follows). With live pieces, every
// stored event is delivered: the subscriber's seqs never skip.
func (s *Subscription) droppable(ev event.Event) bool {
	if ev.Live > 0 {
		return true
	}
	return s.j.opt.StoreEvery < 0 && event.Coalescable(ev.Type())
}

// merge folds b into a when both are stored pieces of the same stream (b
// follows a in it): the result carries b's seq and time. Live pieces are
// never merged: the pump hands a subscriber live pieces 1, 2, ... only in
// a row (event/live.go), and a merged one would break the row as surely
// as a dropped one.
func merge(a, b event.Event) (event.Event, bool) {
	if a.Live > 0 || b.Live > 0 {
		return a, false // a live piece merged is a piece lost: see droppable
	}
	return event.Join(a, b)
}
