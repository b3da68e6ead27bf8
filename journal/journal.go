package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// Errors a Subscription ends with (Err), and Append and friends return.
var (
	// ErrTooSlow: the subscriber did not keep up and was cut off. Subscribe
	// again after the last seq received; nothing stored is lost.
	ErrTooSlow = errors.New("journal: subscriber too slow, cut off: subscribe again after the last seq received")
	// ErrClosed: the journal is closed (the server is shutting down).
	ErrClosed = errors.New("journal: closed")
	// ErrDeleted: the session was deleted (Forget, or the store no longer
	// has it).
	ErrDeleted = errors.New("journal: session deleted")
)

// Options tune a Journal; zero values take the defaults.
type Options struct {
	// QueueSize bounds events appended and not yet taken by the writer;
	// Append waits when it is reached (default 8192).
	QueueSize int
	// MaxBatch bounds the events of one commit (default 1024).
	MaxBatch int
	// Buffer bounds each live subscriber's queue (default 4096). A whole
	// commit is fanned out at once, so keep it well above MaxBatch or a
	// burst can cut off even a subscriber that keeps up.
	Buffer int
	// ReplayPage is how many events a replaying subscriber reads from the
	// store at once (default 256).
	ReplayPage int
	// RetryMin and RetryMax bound the backoff between failed commits
	// (default 10ms and 5s).
	RetryMin, RetryMax time.Duration
	// Now stamps events appended with a zero Time (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
	// StoreEvery is how long the live pieces of one stream (token deltas,
	// tool output: event.Coalescable) are gathered before the store gets
	// them, as one event (see live.go; default 1s). Negative: every piece
	// is stored as it comes, an event of its own, as before live pieces.
	StoreEvery time.Duration
	// StoreBytes stores a run of live pieces once its content reaches this
	// size (default 64 KiB).
	StoreBytes int
	// Publisher, if set, is handed every batch of events once the store
	// has committed it (after the local fan-out), by the writer goroutine:
	// it carries them to other nodes (package journal/natsbus). Nil: events
	// go to this process's subscribers only.
	Publisher Publisher
}

// Publisher carries committed events beyond this process. Publish is
// called by the journal's writer goroutine with each committed batch, in
// seq order per session; it must return at once (queue, never wait on the
// network) and must not keep evs (the journal reuses nothing in it, but
// owns it). It cannot fail the append: the store is the source of truth,
// and a publisher that loses events leaves its readers to heal from the
// store.
type Publisher interface {
	Publish(evs []event.Event)
}

func (o *Options) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.QueueSize, 8192)
	def(&o.MaxBatch, 1024)
	def(&o.Buffer, 4096)
	def(&o.ReplayPage, 256)
	if o.RetryMin <= 0 {
		o.RetryMin = 10 * time.Millisecond
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(5*time.Second, o.RetryMin)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.StoreEvery == 0 {
		o.StoreEvery = DefaultStoreEvery
	}
	def(&o.StoreBytes, 64<<10)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Journal assigns seqs, commits events in batches and fans them out. See the
// package doc.
type Journal struct {
	st  store.EventStore
	opt Options
	log *slog.Logger

	// ctx is cancelled when Close gives up waiting for the writer: store
	// calls stop and what is still queued is abandoned.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	sessions  map[string]*sessionState
	queue     []entry
	wake      chan struct{} // cap 1: the writer has work (or must stop)
	space     chan struct{} // closed (and replaced) when the writer takes from the queue
	closing   bool
	commitErr error                      // the last failed commit, for error messages
	closeLost int                        // events abandoned by Close
	fences    map[string]fenceState      // sessions whose events are written fenced (Fence)
	runs      map[*sessionState]struct{} // sessions with a run of live pieces (live.go)

	subMu      sync.RWMutex
	subs       map[string]map[*Subscription]struct{} // live delivery, by session
	all        map[*Subscription]struct{}            // every running pump
	subsClosed bool

	writerDone chan struct{}
	pumps      sync.WaitGroup

	closeOnce sync.Once
	closed    chan struct{}
	closeErr  error

	// Counts for Stats.
	stored, live, commits, retries, cutOff atomic.Uint64
}

// Stats are a Journal's running counts, for an operator's metrics
// (package telemetry reads them when it is scraped).
type Stats struct {
	// Stored counts the events stored (and handed to subscribers);
	// Commits the transactions that stored them (a commit groups what
	// was queued); Retries the commits that failed and were retried.
	Stored, Commits, Retries uint64
	// Live counts the live pieces handed to subscribers and never stored
	// one by one (live.go): their content is in Stored's events.
	Live uint64
	// Queued is how many events wait for the writer now.
	Queued int
	// Subscribers is how many subscriptions run now (replaying or
	// live); CutOff counts those ended as too slow (ErrTooSlow).
	Subscribers int
	CutOff      uint64
}

// Stats returns the journal's counts. It takes the journal's locks
// briefly, never waits for the writer.
func (j *Journal) Stats() Stats {
	j.mu.Lock()
	queued := len(j.queue)
	j.mu.Unlock()
	j.subMu.RLock()
	subs := len(j.all)
	j.subMu.RUnlock()
	return Stats{Stored: j.stored.Load(), Live: j.live.Load(), Commits: j.commits.Load(), Retries: j.retries.Load(),
		Queued: queued, Subscribers: subs, CutOff: j.cutOff.Load()}
}

// sessionState is the journal's counter for one session. Fields are guarded
// by Journal.mu, except that load serialises loading next from the store.
type sessionState struct {
	load    sync.Mutex
	loaded  bool
	gen     int // bumped when the counter is reset after a conflict
	next    int64
	pending int  // events queued or being committed
	drops   int  // events not stored (deleted session, conflict)
	run     *run // live pieces not stored yet (live.go)
	dropErr error
	// flushed is drops as last reported by Flush.
	flushed int
}

// entry is one queued event, or a Flush marker (flush set, ev.Session set).
type entry struct {
	ev    event.Event
	msg   *store.Message // AppendMessage: stored in the event's transaction
	s     *sessionState
	done  chan error // AppendSync and Flush: gets the result; else nil
	flush bool
	drops int // flush: the session's drops already reported
	err   error
	// fence is the session's fence when it was appended (Epoch 0: none).
	fence store.Fence
}

// New starts a journal writing to st. Close it to flush and stop.
func New(st store.EventStore, opt Options) *Journal {
	opt.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	j := &Journal{
		st: st, opt: opt, log: opt.Logger.With("component", "journal"),
		ctx: ctx, cancel: cancel,
		sessions:   map[string]*sessionState{},
		fences:     map[string]fenceState{},
		runs:       map[*sessionState]struct{}{},
		wake:       make(chan struct{}, 1),
		space:      make(chan struct{}),
		subs:       map[string]map[*Subscription]struct{}{},
		all:        map[*Subscription]struct{}{},
		writerDone: make(chan struct{}),
		closed:     make(chan struct{}),
	}
	go j.run()
	return j
}

// encoded is a payload already encoded by Append, so the writer goroutine
// (the bottleneck) does not encode it again, and an event that cannot be
// encoded is refused to its producer instead of failing a whole batch.
type encoded struct {
	event.Payload
	b []byte
}

func (e encoded) MarshalJSON() ([]byte, error) { return e.b, nil }

// Append gives ev the next seq of ev.Session (and the time, if zero) and
// queues it for commit; it returns the seq. It does not wait for the commit
// (see AppendSync) and never for a subscriber, only for queue space when
// QueueSize events are waiting for the store. The first Append of a session
// reads its last seq from the store.
func (j *Journal) Append(ev event.Event) (int64, error) {
	ev, err := j.append(j.ctx, ev, nil, nil, nil)
	return ev.Seq, err
}

// AppendSync appends ev and waits until it is committed; it returns ev with
// its Seq and Time. If ctx ends first, the event stays queued (it will be
// committed) and the error says why it is late.
func (j *Journal) AppendSync(ctx context.Context, ev event.Event) (event.Event, error) {
	return j.appendSync(ctx, ev, nil)
}

// appendSync is AppendSync, under fence if not nil.
func (j *Journal) appendSync(ctx context.Context, ev event.Event, fence *store.Fence) (event.Event, error) {
	done := make(chan error, 1)
	ev, err := j.append(ctx, ev, done, nil, fence)
	if err != nil {
		return ev, err
	}
	wctx, bounded := store.Call(ctx, "the journal's commit")
	select {
	case err := <-done:
		bounded(nil)
		return ev, err
	case <-wctx.Done():
		return ev, bounded(fmt.Errorf("journal: event %d of session %s not committed yet: %w%s", ev.Seq, ev.Session, wctx.Err(), j.lastErr()))
	}
}

// AppendMessage stores msg (store.Message of ev.Session, its Seq assigned
// by the store) in the same store transaction as ev, and waits for the
// commit like AppendSync: the message and its event (message.queued) are
// both stored or neither, whatever crashes. On success msg has its Seq.
// If ctx ends first, both stay queued (they will be committed, together)
// and the error says so. A message the store refuses (its id or
// idempotency key taken: store.ErrConflict) is handled like a seq
// conflict: its event is not stored and the session's counter reloaded;
// callers make sure it does not happen (one sender per key at a time).
func (j *Journal) AppendMessage(ctx context.Context, ev event.Event, msg *store.Message) (event.Event, error) {
	return j.AppendMessageLate(ctx, ev, msg, nil)
}

// AppendMessageLate is AppendMessage, and when ctx ends before the commit
// (the message stays queued and may still be stored) it calls late, if
// not nil, with the channel that receives the commit's result, once: a
// caller that must not store a second message with the same idempotency
// key meanwhile waits on it (package session's keyed sends).
func (j *Journal) AppendMessageLate(ctx context.Context, ev event.Event, msg *store.Message, late func(<-chan error)) (event.Event, error) {
	if msg == nil || msg.Session != ev.Session {
		return ev, fmt.Errorf("journal: append message: the message must be of the event's session %q", ev.Session)
	}
	c := *msg
	done := make(chan error, 1)
	ev, err := j.append(ctx, ev, done, &c, nil)
	if err != nil {
		return ev, err
	}
	wctx, bounded := store.Call(ctx, "the journal's commit of a message")
	select {
	case err := <-done:
		bounded(nil)
		if err == nil {
			*msg = c
		}
		return ev, err
	case <-wctx.Done():
		if late != nil {
			late(done)
		}
		return ev, bounded(fmt.Errorf("journal: message %s and event %d of session %s not committed yet: %w%s", msg.ID, ev.Seq, ev.Session, wctx.Err(), j.lastErr()))
	}
}

func (j *Journal) lastErr() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lastErrLocked()
}

func (j *Journal) lastErrLocked() string {
	if j.commitErr != nil {
		return " (the store fails: " + j.commitErr.Error() + ")"
	}
	return ""
}

// append queues ev (with msg, if not nil) and returns it with its seq and
// time. Its fence is fence, if not nil, else the session's (Fence).
func (j *Journal) append(ctx context.Context, ev event.Event, done chan error, msg *store.Message, fence *store.Fence) (event.Event, error) {
	if ev.Session == "" || ev.Data == nil {
		return ev, fmt.Errorf("journal: append: an event needs a session and a payload (session %q, type %q)", ev.Session, ev.Type())
	}
	b, err := json.Marshal(ev.Data)
	if err != nil {
		return ev, fmt.Errorf("journal: append to session %s: encoding %s: %w", ev.Session, ev.Type(), err)
	}
	payload := ev.Data
	j.mu.Lock()
	for {
		if j.closing {
			j.mu.Unlock()
			return ev, ErrClosed
		}
		s := j.sessions[ev.Session]
		if s == nil || !s.loaded {
			j.mu.Unlock()
			if err := j.loadSeq(ctx, ev.Session); err != nil {
				return ev, err
			}
			j.mu.Lock()
			continue
		}
		f := j.fences[ev.Session].f
		if fence != nil {
			f = *fence
		}
		if f.Epoch < 0 {
			j.mu.Unlock()
			return ev, fmt.Errorf("journal: append to session %s: %w: this node does not own the session (any more)", ev.Session, store.ErrLeaseLost)
		}
		if len(j.queue) >= j.opt.QueueSize {
			space := j.space
			j.mu.Unlock()
			wctx, bounded := store.Call(ctx, "the journal's queue")
			select {
			case <-space:
				bounded(nil)
			case <-wctx.Done():
				return ev, bounded(fmt.Errorf("journal: append to session %s: waiting for the store (%d events queued): %w%s", ev.Session, j.opt.QueueSize, wctx.Err(), j.lastErr()))
			}
			j.mu.Lock()
			continue
		}
		if ev.Time.IsZero() {
			ev.Time = j.opt.Now()
		}
		if j.opt.StoreEvery > 0 && done == nil && msg == nil && event.Coalescable(ev.Type()) {
			ev = j.livePieceLocked(s, ev, f, b)
			j.mu.Unlock()
			j.signal()
			return ev, nil
		}
		if s.run != nil {
			j.storeRunLocked(s) // its stored event comes before ev
		}
		ev.Seq = s.next
		s.next++
		queued := ev
		queued.Data = encoded{payload, b}
		s.pending++
		j.queue = append(j.queue, entry{ev: queued, s: s, done: done, msg: msg, fence: f})
		j.mu.Unlock()
		j.signal()
		return ev, nil
	}
}

// loadSeq reads the last stored seq of session, once.
func (j *Journal) loadSeq(ctx context.Context, session string) error {
	j.mu.Lock()
	s := j.sessions[session]
	if s == nil {
		s = &sessionState{}
		j.sessions[session] = s
	}
	j.mu.Unlock()

	s.load.Lock()
	defer s.load.Unlock()
	j.mu.Lock()
	loaded, gen := s.loaded, s.gen
	j.mu.Unlock()
	if loaded {
		return nil
	}
	last, err := j.st.LastSeq(ctx, session)
	if err != nil {
		return fmt.Errorf("journal: reading the last seq of session %s: %w", session, err)
	}
	j.mu.Lock()
	if s.gen == gen {
		s.next, s.loaded = last+1, true
	}
	j.mu.Unlock()
	return nil
}

// signal wakes the writer.
func (j *Journal) signal() {
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// Flush waits until every event of session appended before the call is
// committed. If some events appended since the previous Flush could not be
// stored, it says why (ErrDeleted, a seq conflict).
func (j *Journal) Flush(ctx context.Context, session string) error {
	j.mu.Lock()
	if j.closing {
		j.mu.Unlock()
		select {
		case <-j.writerDone:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("journal: flush session %s: %w%s", session, ctx.Err(), j.lastErr())
		}
	}
	s := j.sessions[session]
	if s == nil {
		j.mu.Unlock()
		return nil
	}
	if s.run != nil {
		j.storeRunLocked(s)
	}
	if s.pending == 0 {
		err := s.flushErr(s.flushed)
		j.mu.Unlock()
		return err
	}
	done := make(chan error, 1)
	j.queue = append(j.queue, entry{ev: event.Event{Session: session}, s: s, done: done, flush: true, drops: s.flushed})
	j.mu.Unlock()
	j.signal()
	wctx, bounded := store.Call(ctx, "the journal's flush")
	select {
	case err := <-done:
		bounded(nil)
		return err
	case <-wctx.Done():
		return bounded(fmt.Errorf("journal: flush session %s: %w%s", session, wctx.Err(), j.lastErr()))
	}
}

// flushErr reports the drops after the first `reported` ones, and records
// them as reported. Called with Journal.mu held.
func (s *sessionState) flushErr(reported int) error {
	if s.drops <= reported {
		return nil
	}
	s.flushed = max(s.flushed, s.drops)
	return fmt.Errorf("%w (%d events not stored since the last Flush)", s.dropErr, s.drops-reported)
}

// Forget ends the subscriptions of a deleted session with ErrDeleted and
// drops its counter. Call it after the session is deleted from the store.
func (j *Journal) Forget(session string) {
	j.mu.Lock()
	if s := j.sessions[session]; s != nil {
		j.dropRunLocked(s)
	}
	delete(j.sessions, session)
	delete(j.fences, session)
	j.mu.Unlock()

	j.subMu.Lock()
	for sub := range j.subs[session] {
		sub.end(ErrDeleted)
	}
	delete(j.subs, session)
	j.subMu.Unlock()
}

// Close commits everything queued, ends every subscription (ErrClosed: they
// get what was already fanned out to them first) and stops. If ctx ends
// before the store took everything, the rest is abandoned and Close says
// how much was lost; subscribers still not drained by then are cut short.
// Appends after Close fail with ErrClosed.
func (j *Journal) Close(ctx context.Context) error {
	j.closeOnce.Do(func() {
		defer close(j.closed)
		j.closeErr = j.close(ctx)
	})
	select {
	case <-j.closed:
		return j.closeErr
	default:
	}
	select {
	case <-j.closed:
		return j.closeErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (j *Journal) close(ctx context.Context) error {
	j.mu.Lock()
	j.closing = true
	close(j.space) // producers waiting for space see closing
	j.space = make(chan struct{})
	j.mu.Unlock()
	j.signal()

	var errs []error
	select {
	case <-j.writerDone:
	case <-ctx.Done():
		j.cancel() // the writer abandons what is left
		<-j.writerDone
	}
	j.cancel()
	j.mu.Lock()
	if j.closeLost > 0 {
		errs = append(errs, fmt.Errorf("journal: closed with %d events not stored: %w%s", j.closeLost, ctx.Err(), j.lastErrLocked()))
	}
	j.mu.Unlock()

	j.subMu.Lock()
	j.subsClosed = true
	for sub := range j.all {
		sub.end(ErrClosed)
	}
	j.subMu.Unlock()

	pumped := make(chan struct{})
	go func() { j.pumps.Wait(); close(pumped) }()
	select {
	case <-pumped:
	case <-ctx.Done():
		j.subMu.RLock()
		for sub := range j.all {
			sub.cancel(ErrClosed)
		}
		j.subMu.RUnlock()
		<-pumped
	}
	return errors.Join(errs...)
}
