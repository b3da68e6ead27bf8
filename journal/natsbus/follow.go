package natsbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/store"
)

// Follower delivers a session's events in seq order, with no gap and no
// repeat: those stored after the seq given to Follow, then live ones from
// NATS, gaps filled from the store. See the package doc.
type Follower struct {
	// C delivers the events. It is closed when the follower ends; Err then
	// says why.
	C <-chan event.Event

	c       chan event.Event
	b       *Bus
	session string
	after   int64
	ctx     context.Context
	cancel  context.CancelCauseFunc
	done    chan struct{} // closed when run has exited

	mu       sync.Mutex
	err      error
	healed   int64 // events read from the store after the catch-up
	repeated int64 // events from NATS dropped as already delivered
}

// errUnfollowed is the cause of a follower its owner closed.
var errUnfollowed = errors.New("natsbus: follower closed")

// liveBuffer is how many decoded events consume may hand run ahead.
const liveBuffer = 64

// Follow delivers the events of session with seq > after: from the store,
// then live from NATS (see Follower). It ends when ctx ends, Close is
// called, the session is deleted (journal.ErrDeleted), the Bus closes
// (journal.ErrClosed), or the store fails. A session the store does not
// have is an error wrapping store.ErrNotFound. NATS being down is not an
// error: the follower reads the store every PollDown until it is back.
func (b *Bus) Follow(ctx context.Context, session string, after int64) (*Follower, error) {
	if _, err := b.st.GetSession(ctx, session); err != nil {
		return nil, fmt.Errorf("natsbus: follow session %s: %w", session, err)
	}
	fctx, cancel := context.WithCancelCause(ctx)
	f := &Follower{
		c: make(chan event.Event, 128), b: b, session: session, after: max(after, 0),
		ctx: fctx, cancel: cancel, done: make(chan struct{}),
	}
	f.C = f.c
	// The consumer first, then the store (package doc: catch-up). If NATS
	// is down, consume keeps trying while run reads the store; a
	// connection known to be lost is not waited for (the stream would
	// wait PublishTimeout for its headers).
	var cons jetstream.Consumer
	if down, _ := b.connState(); !down {
		var err error
		if cons, err = b.consumer(fctx, session); err != nil && fctx.Err() == nil {
			b.log.Warn("following a session without NATS for now (reading the store meanwhile)", "session", session, "err", err)
		}
	}
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		cancel(journal.ErrClosed)
		return nil, journal.ErrClosed
	}
	b.followers.Add(2)
	b.mu.Unlock()
	stop := context.AfterFunc(b.followCtx, func() { cancel(journal.ErrClosed) })
	live := make(chan event.Event, liveBuffer)
	go func() {
		defer b.followers.Done()
		f.consume(cons, live)
	}()
	go func() {
		defer b.followers.Done()
		defer close(f.done)
		defer stop()
		err := f.run(live)
		f.cancel(errUnfollowed)
		f.mu.Lock()
		f.err = err
		f.mu.Unlock()
		close(f.c)
	}()
	return f, nil
}

// consumer creates an ordered consumer of the session's subject that
// delivers what is published from now on.
func (b *Bus) consumer(ctx context.Context, session string) (jetstream.Consumer, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.PublishTimeout)
	defer cancel()
	cons, err := b.js.OrderedConsumer(ctx, b.cfg.Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{Subject(session)},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("natsbus: consumer of session %s on NATS at %s: %w", session, b.url, err)
	}
	return cons, nil
}

// Events is C (see journal.Subscription.Events).
func (f *Follower) Events() <-chan event.Event { return f.C }

// Err says why the follower ended, once C is closed: journal.ErrClosed,
// journal.ErrDeleted, the context's error, or a store error. It is nil
// while C is open, and after Close.
func (f *Follower) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if errors.Is(f.err, errUnfollowed) {
		return nil
	}
	return f.err
}

// Healed counts the events read from the store after the catch-up: to
// fill a gap or a lost tail.
func (f *Follower) Healed() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.healed
}

// Repeated counts the events NATS delivered that were already delivered.
func (f *Follower) Repeated() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.repeated
}

// Close ends the follower and waits until C is closed; events not yet
// received are discarded. (Its NATS reader may take a moment longer to
// stop; Bus.Close waits for that.)
func (f *Follower) Close() {
	f.cancel(errUnfollowed)
	<-f.done
}

// consume reads the session's events from NATS and hands them to run,
// recreating the consumer when it fails, until the follower ends.
func (f *Follower) consume(cons jetstream.Consumer, live chan<- event.Event) {
	wait := f.b.cfg.RetryMin
	for f.ctx.Err() == nil {
		if cons == nil {
			var err error
			if cons, err = f.b.consumer(f.ctx, f.session); err != nil {
				if !f.pause(wait) {
					return
				}
				wait = min(2*wait, f.b.cfg.RetryMax)
				continue
			}
		}
		err := f.read(cons, live)
		cons = nil
		if f.ctx.Err() != nil {
			return
		}
		f.b.log.Warn("reading a session's events from NATS failed; recreating the consumer", "session", f.session, "err", err)
		if !f.pause(wait) {
			return
		}
		wait = min(2*wait, f.b.cfg.RetryMax)
	}
}

// read hands the messages of cons to run until it fails or the follower
// ends. The ordered consumer recreates itself across reconnects.
func (f *Follower) read(cons jetstream.Consumer, live chan<- event.Event) error {
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	stop := context.AfterFunc(f.ctx, it.Stop)
	defer stop()
	for {
		msg, err := it.Next(jetstream.NextContext(f.ctx))
		if err != nil {
			return err
		}
		var ev event.Event
		if err := json.Unmarshal(msg.Data(), &ev); err != nil || ev.Session != f.session {
			// Not ours to judge further: the store has the real one, and
			// a gap (if any) is healed from it.
			f.b.log.Error("ignoring a message that is not an event of this session", "session", f.session, "subject", msg.Subject(), "err", err)
			continue
		}
		select {
		case live <- ev:
		case <-f.ctx.Done():
			return f.ctx.Err()
		}
	}
}

// pause waits d, or until the follower ends (false).
func (f *Follower) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-f.ctx.Done():
		return false
	}
}

// run delivers: the catch-up from the store, then each live event that is
// next, filling gaps from the store and dropping repeats; and when NATS
// says nothing for HealEvery, whatever the store has that NATS did not.
func (f *Follower) run(live <-chan event.Event) error {
	last := f.after
	if _, err := f.fromStore(&last, math.MaxInt64, false); err != nil {
		return err
	}
	// Every HealEvery without news from NATS, or every PollDown while
	// its connection is lost (and at once when it is lost), the store.
	every := func() (time.Duration, <-chan struct{}) {
		down, lost := f.b.connState()
		if down {
			return f.b.cfg.PollDown, nil
		}
		return f.b.cfg.HealEvery, lost
	}
	d, lost := every()
	heal := time.NewTimer(d)
	defer heal.Stop()
	// nextLive is the live piece expected next at seq liveAt: 1 when the
	// follower got to a seq (a run already under way is skipped: its
	// stored event brings its content).
	liveAt, nextLive := last, 1
	for {
		select {
		case ev := <-live:
			if ev.Live > 0 {
				// A live piece (event/live.go): delivered only at the
				// stored event it follows, in the row of its run.
				if ev.Seq > last {
					if err := f.fill(&last, ev.Seq); err != nil {
						return err
					}
				}
				if liveAt != last { // stored events came since (here or from the store)
					liveAt, nextLive = last, 1
				}
				if ev.Seq != last || ev.Live != nextLive {
					break
				}
				if err := f.deliver(ev); err != nil {
					return err
				}
				nextLive++
				break
			}
			if ev.Seq > last+1 {
				if err := f.fill(&last, ev.Seq-1); err != nil {
					return err
				}
			}
			if ev.Seq <= last {
				f.mu.Lock()
				f.repeated++
				f.mu.Unlock()
				break
			}
			if err := f.deliver(ev); err != nil {
				return err
			}
			last = ev.Seq
		case <-lost:
			if _, err := f.fromStore(&last, math.MaxInt64, true); err != nil {
				return err
			}
		case <-heal.C:
			n, err := f.fromStore(&last, math.MaxInt64, true)
			if err != nil {
				return err
			}
			if n == 0 {
				if _, err := f.b.st.GetSession(f.ctx, f.session); errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("%w: %s", journal.ErrDeleted, f.session)
				}
			}
		case <-f.ctx.Done():
			return context.Cause(f.ctx)
		}
		if !heal.Stop() {
			select {
			case <-heal.C:
			default:
			}
		}
		d, lost = every()
		heal.Reset(d)
	}
}

// fill reads the store until it has delivered seq upTo (the event before
// one that arrived from NATS). The store had it before it was published,
// so this only waits when a store replica lags: it retries with backoff.
func (f *Follower) fill(last *int64, upTo int64) error {
	wait := f.b.cfg.RetryMin
	for {
		_, err := f.fromStore(last, upTo, true)
		if err != nil {
			return err
		}
		if *last >= upTo {
			return nil
		}
		f.b.log.Warn("the store lacks events NATS has published after them; reading again", "session", f.session, "have", *last, "want", upTo)
		if !f.pause(wait) {
			return context.Cause(f.ctx)
		}
		wait = min(2*wait, f.b.cfg.RetryMax)
	}
}

// fromStore delivers the stored events after *last, page by page, up to
// upTo or as far as the store has them; it returns how many.
func (f *Follower) fromStore(last *int64, upTo int64, heal bool) (int, error) {
	n := 0
	for *last < upTo {
		limit := f.b.cfg.Page
		if upTo-*last < int64(limit) {
			limit = int(upTo - *last)
		}
		evs, err := f.b.st.Events(f.ctx, f.session, *last, limit)
		if err != nil {
			if f.ctx.Err() != nil {
				return n, context.Cause(f.ctx)
			}
			return n, fmt.Errorf("natsbus: reading session %s after seq %d from the store: %w", f.session, *last, err)
		}
		for _, ev := range evs {
			if ev.Seq <= *last {
				continue
			}
			if heal {
				// Counted before it is delivered, so that a reader who got
				// it finds it counted (Healed).
				f.countHealed(1)
			}
			if err := f.deliver(ev); err != nil {
				return n, err
			}
			*last = ev.Seq
			n++
		}
		if len(evs) < limit {
			break
		}
	}
	return n, nil
}

func (f *Follower) countHealed(n int) {
	f.mu.Lock()
	f.healed += int64(n)
	f.mu.Unlock()
}

func (f *Follower) deliver(ev event.Event) error {
	select {
	case f.c <- ev:
		return nil
	case <-f.ctx.Done():
		return context.Cause(f.ctx)
	}
}
