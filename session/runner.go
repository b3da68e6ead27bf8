package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/modelproxy"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/secrets"
	"github.com/harvest-dev/harvest/store"
)

// runner owns one live session: its state, its box and its agent. One
// goroutine (run) does all of it; see the package doc.
type runner struct {
	d   runnerDeps
	id  string
	log *slog.Logger

	ctx    context.Context // cancelled with errDeleted, or errShutdown via the Manager
	cancel context.CancelCauseFunc
	wake   chan struct{} // capacity 1: wakes coalesce
	done   chan struct{} // closed when run has returned
	// fence is the lease it runs under (several nodes; zero on one node):
	// its store writes carry it (fencedStore) and its events do (the
	// journal's Fence).
	fence store.Fence
	// notBefore: the runner acts (reads and recovers its session) only
	// from then, when the previous owner's deadline has surely passed
	// (takeoverWait; zero on one node).
	notBefore time.Time

	mu      sync.Mutex
	paused  bool             // Cancel paused the queue; a new message resumes it
	stopReq *StopRequest     // Stop asked for the session to end (stop.go)
	turn    *turnCtl         // the running turn, if any
	boxID   string           // the box being started or held (Recover's orphan check)
	lkey    string           // the lock its turns take (lockKeyOf), once the session is read
	lent    *sandbox.Sandbox // the box Manager.Box lends out: r.box, set with it (setBox)
	armed   *sandbox.Sandbox // the box whose fence the keeper moves on (several nodes: armBox)

	// Owned by the run goroutine.
	s         *store.Session
	box       *sandbox.Sandbox
	ag        agent.Agent
	lease     *lease    // the session lock, held for a streak of turns
	lockRetry time.Time // when a turn waiting for the lock tries again
	lockSaid  string    // the holder last reported in a session.state event
	lostBoxes int       // boxes in a row that died while being set up (boxLost)

	// redact masks the session's secrets in its events (nil: it has
	// none). Set with the agent, read by the turn's sink.
	redact *secrets.Redactor

	// curTurn is the running turn's id ("" between turns), for events
	// recorded from other goroutines (the git endpoint's pushes).
	curTurn atomic.Pointer[string]

	// dormant: taken over idle from another machine, nothing restored
	// yet; wantBox: Box asked for its box meanwhile (nodes_dormant.go).
	dormant, wantBox atomic.Bool
}

// turnNow is the running turn's id, or "".
func (r *runner) turnNow() string {
	if t := r.curTurn.Load(); t != nil {
		return *t
	}
	return ""
}

// turnCtl is a running turn as other goroutines see it.
type turnCtl struct {
	msgSeq int64 // the message it took
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the turn ended and the session is idle again
}

// runnerDeps is what a runner uses: the store, the journal, the clock and
// the configuration, and what it asks of the Manager that owns it (host).
// A runner holds these, never the Manager itself.
type runnerDeps struct {
	st    store.Store
	j     eventLog
	clock Clock
	cfg   *Config
	host  runnerHost
	// carry carries the session's workspace between nodes (nil on a
	// lone server).
	carry *carrier
	// traces are the traces of the queued messages (tracing.go).
	traces *traceBook
}

// runnerHost is what a runner asks of its Manager: the services the
// Manager shares between its runners (sandbox providers, model clients and
// proxies, workspaces and disks, the journal's append), whether it takes
// new turns, and its bookkeeping of runners (exit, done).
type runnerHost interface {
	provider(name string) (sandbox.Provider, error)
	client(model string) (*llm.Client, error)
	proxy(model string) (*modelproxy.Proxy, error)
	destroyHandle(ctx context.Context, backend string, raw []byte) error
	prepareWorkspaces(ctx context.Context, s *store.Session) (map[string]copied, error)
	boxDiskDir(s *store.Session) string
	endDisk(s *store.Session, attached map[string]string) error
	egressAllow(s *store.Session) (allow []string, bridge bool)
	withDefaults(s *store.Session) *store.Session
	hideDataDir(msg string) string
	hostFull(err error) error
	wakeWorkflow(s *store.Session)
	// leaseDeadline is the deadline of this node's lease of session id
	// at epoch (nodes_fence.go); false when it holds no such lease.
	leaseDeadline(id string, epoch int64) (time.Time, bool)
	beginTurn() bool
	endTurn()
	Draining() bool
	// runnerExit removes r from the Manager unless a wake is pending;
	// runnerGone removes it (its loop is over); runnerDone is the runner
	// goroutine's last act (Close waits for it).
	runnerExit(r *runner) bool
	runnerGone(r *runner)
	runnerDone()
}

var _ runnerHost = (*Manager)(nil)

// eventLog is where a runner journals its session's events: the journal
// itself on one node; with several, the journal under the runner's lease
// (fencedLog), so that a runner whose lease is gone never writes under
// the next one this node may take.
type eventLog interface {
	Append(ev event.Event) (int64, error)
	AppendSync(ctx context.Context, ev event.Event) (event.Event, error)
}

var _ eventLog = (*journal.Journal)(nil)

// append journals ev, logging a failure (the journal only fails when it
// is closed, or with several nodes when the lease is lost).
func (r *runner) append(ev event.Event) {
	if _, err := r.d.j.Append(ev); err != nil {
		r.log.Warn("journaling an event", "type", ev.Type(), "err", err)
	}
}

// newRunner makes the runner of session id. Called under Manager.mu (with
// several nodes, only once this node holds the session's lease).
func newRunner(m *Manager, id string) *runner {
	ctx, cancel := context.WithCancelCause(m.base)
	r := &runner{
		d:  runnerDeps{st: m.st, j: m.j, clock: m.clock, cfg: &m.cfg, host: m, carry: m.carry, traces: &m.traces},
		id: id, log: m.log.With("session", id),
		ctx: ctx, cancel: cancel,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
	if m.node != nil {
		h := m.node.held[id]
		l := h.lease
		r.fence, r.notBefore = l.Fence(), h.notBefore
		nd := m.node
		gone := func() bool { return h.gone.Load() || nd.pastDeadline() }
		r.d.st = fencedStore{Store: m.st, f: r.fence, lost: func(err error) { m.leaseLost(l, err) }, gone: gone}
		r.d.j = fencedLog{j: m.j, f: r.fence, gone: gone}
	}
	return r
}

func (r *runner) setLockKey(k string) {
	r.mu.Lock()
	r.lkey = k
	r.mu.Unlock()
}

func (r *runner) lockKey() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lkey
}

// notify wakes the runner. Called under Manager.mu.
func (r *runner) notify(w wakeOpts) {
	r.mu.Lock()
	if w.unpause {
		r.paused = false
	}
	if w.interrupt != nil && r.turn != nil && r.turn.msgSeq < w.interrupt.Seq {
		r.turn.cancel(&interruptError{message: w.interrupt.ID})
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// cancelTurn pauses the queue and cancels the running turn, returning a
// channel closed when it has ended (nil when none runs).
func (r *runner) cancelTurn() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paused = true
	if r.turn == nil {
		return nil
	}
	r.turn.cancel(errCancelled)
	return r.turn.done
}

func (r *runner) isPaused() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.paused
}

func (r *runner) setBoxID(id string) {
	r.mu.Lock()
	r.boxID = id
	r.mu.Unlock()
}

func (r *runner) heldBox() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.boxID
}

// run is the runner's goroutine.
func (r *runner) run() {
	defer r.d.host.runnerDone()
	defer close(r.done)
	defer r.cancel(nil)
	r.loop()
	r.release()
	r.d.host.runnerGone(r)
}

// loop drives the state machine until the session needs no runner.
func (r *runner) loop() {
	if !r.waitFence() {
		return
	}
	s, err := r.d.st.GetSession(r.ctx, r.id)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) && r.ctx.Err() == nil {
			r.log.Error("reading the session to run it", "err", err)
		}
		return
	}
	r.s = r.d.host.withDefaults(s)
	r.setLockKey(LockKeyOf(s))
	if !r.try(takeOver(r.ctx, r.d.st, s)) {
		return
	}
	if !r.try(r.repairPrompt()) {
		return
	}
	if s.State == store.StateWorking || s.State == store.StateCancelling {
		if !r.try(r.recoverTurn()) {
			return
		}
	}
	for r.ctx.Err() == nil {
		if req := r.pendingStop(); req != nil {
			err := r.stopAsked(req)
			if err == nil {
				r.takeStop()
			}
			if !r.try(err) {
				return
			}
			continue
		}
		st := r.s.State
		switch {
		case st.Ended():
			if r.exit() {
				return
			}
		case !r.d.clock.Now().Before(r.lifetimeEnd()):
			if !r.try(r.stop(fmt.Sprintf("the session reached its max lifetime of %s", r.s.Limits.MaxLifetime))) {
				return
			}
		case st == store.StateSuspended:
			work, err := r.hasWork()
			if !r.try(err) {
				return
			}
			if !work {
				if r.exit() {
					return
				}
				continue
			}
			if !r.try(r.provision()) {
				return
			}
		case st == store.StatePending || st == store.StateProvisioning:
			if !r.try(r.provision()) {
				return
			}
		case r.dormant.Load():
			if !r.try(r.dormantWait()) {
				return
			}
		case r.box == nil:
			// Live with no box in hand: a session recovered after a restart.
			if !r.try(r.attach()) {
				return
			}
		default:
			if !r.try(r.idle()) {
				return
			}
		}
	}
}

// try handles an error of a step of the loop: false means the runner must
// stop (the context ended, or the session is gone). Other errors are
// logged and retried after a pause.
func (r *runner) try(err error) bool {
	if err == nil {
		return true
	}
	if r.ctx.Err() != nil {
		return false
	}
	if errors.Is(err, store.ErrNotFound) {
		return false
	}
	var fe *fatalError
	if errors.As(err, &fe) {
		if ferr := r.fail(fe.err); ferr != nil && r.ctx.Err() == nil {
			r.log.Error("marking the session failed", "err", ferr, "because", fe.err)
			return false
		}
		return true
	}
	r.log.Error("session runner step failed; retrying", "err", err)
	// Real time, not the Manager's clock: the pause is the machine's
	// (a box to replace, a store to come back), not a session's time
	// (its lifetime, its idle timeout) that a test moves on by hand,
	// and a test's clock that nobody moves would hold the retry for
	// ever.
	retry := time.NewTimer(time.Second)
	defer retry.Stop()
	select {
	case <-retry.C:
	case <-r.ctx.Done():
		return false
	}
	// The row may have changed under a failed step: read it again.
	s, gerr := r.d.st.GetSession(r.ctx, r.id)
	if gerr != nil {
		return !errors.Is(gerr, store.ErrNotFound) && r.ctx.Err() == nil
	}
	r.s = r.d.host.withDefaults(s)
	return true
}

// fatalError ends the session as failed.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

func fatal(err error) error { return &fatalError{err} }

// exit removes the runner from the Manager unless a wake is pending (a
// message arrived: go round again). Reports whether it did.
func (r *runner) exit() bool { return r.d.host.runnerExit(r) }

func (r *runner) lifetimeEnd() time.Time { return r.s.CreatedAt.Add(r.s.Limits.MaxLifetime) }

// hasWork: queued messages the runner should deliver now.
func (r *runner) hasWork() (bool, error) {
	q, err := r.d.st.Messages(r.ctx, r.id, store.MessageQueued)
	if err != nil {
		return false, err
	}
	return len(q) > 0 && !r.isPaused() && !r.d.host.Draining(), nil
}

// setState writes a transition (with fn's other changes) and journals it.
func (r *runner) setState(ctx context.Context, st store.State, reason string, fn func(*store.Session)) error {
	s, err := r.d.st.UpdateSession(ctx, r.id, func(s *store.Session) error {
		s.State = st
		if fn != nil {
			fn(s)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("session %s: moving to %s: %w", r.id, st, err)
	}
	r.s = r.d.host.withDefaults(s)
	r.append(r.event("", event.SessionState{State: string(st), Reason: r.d.host.hideDataDir(reason)}))
	return nil
}

func (r *runner) event(turn string, p event.Payload) event.Event {
	ev := event.Event{Session: r.id, Time: r.d.clock.Now().UTC(), Turn: turn, Data: p}
	if turn != "" {
		ev.Agent = r.s.Agent
	}
	return ev
}

// finalCtx is for the writes that record how something ended: they must
// happen even when the runner is being shut down.
func (r *runner) finalCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.ctx), 30*time.Second)
}

// idle delivers the next queued message, or waits for one, for the idle
// timeout, the max lifetime or the lock.
func (r *runner) idle() error {
	q, err := r.d.st.Messages(r.ctx, r.id, store.MessageQueued)
	if err != nil {
		return err
	}
	now := r.d.clock.Now()
	if len(q) > 0 && !r.isPaused() && !now.Before(r.lockRetry) && !r.d.host.Draining() {
		return r.runTurn(q[0])
	}
	// The streak of turns is over: let other runs have the workspace.
	r.dropLease()
	idleC, stopIdle := r.d.clock.At(r.s.ActiveAt.Add(r.s.Limits.IdleTimeout))
	defer stopIdle()
	lifeC, stopLife := r.d.clock.At(r.lifetimeEnd())
	defer stopLife()
	var retryC <-chan time.Time
	if len(q) > 0 && !r.lockRetry.IsZero() {
		c, stop := r.d.clock.At(r.lockRetry)
		defer stop()
		retryC = c
	}
	select {
	case <-r.ctx.Done():
		return nil
	case <-r.wake:
		r.lockRetry = time.Time{} // a message, or an unlock: try the lock at once
		return nil
	case <-retryC:
		return nil
	case <-lifeC:
		return nil // the loop stops the session
	case <-idleC:
		return r.suspend()
	}
}

// suspend destroys the box and keeps everything else.
func (r *runner) suspend() error {
	r.dropLease()
	if r.ag != nil {
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
		if err := r.ag.Close(ctx); err != nil {
			r.log.Warn("closing the agent before suspending", "err", err)
		}
		cancel()
		r.ag = nil
	}
	if r.box != nil {
		ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
		err := r.box.Destroy(ctx)
		cancel()
		if err != nil {
			// The handle is dropped all the same: the next Recover destroys
			// the box as an orphan (its id names this session).
			r.log.Warn("destroying the box to suspend", "box", r.box.ID(), "err", err)
		}
		r.setBox(nil)
		r.setBoxID("")
	}
	// What a shell changed since the last turn, carried before the
	// session may resume on another node.
	r.d.carry.checkpoint(r.ctx, r.fence, r.s, lastTurn(r.s))
	return r.setState(r.ctx, store.StateSuspended, fmt.Sprintf("idle for %s: the box was stopped; the workspace and the conversation are kept, and the next message resumes them", r.s.Limits.IdleTimeout), func(s *store.Session) {
		s.Sandbox = nil
	})
}

// stop ends the session for good (max lifetime): box destroyed, queued
// messages dropped, workspace kept until Delete (its disk unmounted, or
// removed if no box ever ran on it: endDisk).
func (r *runner) stop(reason string) error {
	r.dropBox()
	if err := r.dropQueue(); err != nil {
		return err
	}
	ctx, cancel := r.finalCtx()
	defer cancel()
	r.endDisk() // before the state says so: whoever sees it ended sees its disk let go
	if err := r.setState(ctx, store.StateStopped, reason, func(s *store.Session) { s.Sandbox = nil }); err != nil {
		return err
	}
	r.ended()
	return nil
}

// fail ends the session as failed with cause.
func (r *runner) fail(cause error) error {
	r.log.Error("session failed", "err", cause)
	r.dropBox()
	if err := r.dropQueue(); err != nil {
		return err
	}
	ctx, cancel := r.finalCtx()
	defer cancel()
	msg := r.d.host.hideDataDir(cause.Error())
	r.endDisk() // before the state says so: whoever sees it ended sees its disk let go
	err := r.setState(ctx, store.StateFailed, msg, func(s *store.Session) {
		s.Sandbox = nil
		s.Error = msg
	})
	if err == nil {
		r.ended()
	}
	return err
}

// endDisk lets go of the disk of the session that ends (disk.go), its box
// gone; a failure is logged, and the next Recover tries again. Should the
// end not be stored after all (a crash), the session is live again at the
// next start, and its disk is mounted again (or remade, for one that never
// ran: its workspace is copied afresh).
func (r *runner) endDisk() {
	if err := r.d.host.endDisk(r.s, nil); err != nil {
		r.log.Warn("letting go of the ended session's disk", "err", err)
	}
}

// ended tells the forge a session on its repositories ended (its
// conversation there says so), bounded in time; a failure is logged.
func (r *runner) ended() {
	if f := r.d.cfg.Forge; f != nil && r.s.GitHub != nil {
		ctx, cancel := r.finalCtx()
		defer cancel()
		if err := f.Ended(ctx, r.s); err != nil {
			r.log.Warn("telling GitHub the session ended", "err", err)
		}
	}
}

// dropBox closes the agent and destroys the box, if any (and releases the
// session lock).
func (r *runner) dropBox() {
	r.dropLease()
	ctx, cancel := r.finalCtx()
	defer cancel()
	if r.ag != nil {
		if err := r.ag.Close(ctx); err != nil {
			r.log.Warn("closing the agent", "err", err)
		}
		r.ag = nil
	}
	if r.box != nil {
		if err := r.box.Destroy(ctx); err != nil {
			r.log.Warn("destroying the box", "box", r.box.ID(), "err", err)
		}
		r.setBox(nil)
	} else if len(r.s.Sandbox) > 0 {
		if err := r.d.host.destroyHandle(ctx, r.s.Backend, r.s.Sandbox); err != nil {
			r.log.Warn("destroying the box", "err", err)
		}
	}
	r.setBoxID("")
}

// dropQueue marks every queued message dropped.
func (r *runner) dropQueue() error {
	r.d.traces.forget(r.id)
	ctx, cancel := r.finalCtx()
	defer cancel()
	q, err := r.d.st.Messages(ctx, r.id, store.MessageQueued)
	if err != nil {
		return err
	}
	for _, msg := range q {
		if err := r.d.st.SetMessageState(ctx, r.id, msg.ID, store.MessageDropped, ""); err != nil {
			return err
		}
	}
	return nil
}

// release lets go of the box when the runner ends: left running (its
// handle is persisted) on shutdown, destroyed on delete, and on a lost
// lease or at a node's shutdown left for the next owner when the nodes
// share the data directory, else destroyed (the next owner restores the
// workspace it carried on its own disk: nodes_carry.go).
func (r *runner) release() {
	r.dropLease()
	if r.ag == nil && r.box == nil {
		return
	}
	ctx, cancel := r.finalCtx()
	defer cancel()
	if r.ag != nil {
		// A lost lease leaves the box as it is (closing the agent would
		// stop processes in it): the new owner reattaches or replaces it.
		if !errors.Is(context.Cause(r.ctx), errLeaseLost) {
			if err := r.ag.Close(ctx); err != nil {
				r.log.Warn("closing the agent", "err", err)
			}
		}
		r.ag = nil
	}
	if r.box == nil {
		return
	}
	lost := errors.Is(context.Cause(r.ctx), errLeaseLost)
	switch {
	case errors.Is(context.Cause(r.ctx), errDeleted):
		if err := r.box.Destroy(ctx); err != nil {
			r.log.Warn("destroying the box of a deleted session", "box", r.box.ID(), "err", err)
		}
	case errors.Is(context.Cause(r.ctx), errShutdown) && r.d.cfg.StopBoxesOnExit:
		r.stopForGood(ctx)
		return
	case (lost || errors.Is(context.Cause(r.ctx), errShutdown)) && r.d.carry != nil:
		// Nodes that do not share the data directory: the lease is lost,
		// or given up at shutdown, and the next owner restores the
		// carried workspace on its own disk; it never uses this box,
		// whose tools would run on for nothing.
		if err := r.box.Destroy(ctx); err != nil {
			r.log.Warn("destroying the box of a session another node took over", "box", r.box.ID(), "err", err)
		}
	default:
		if errors.Is(context.Cause(r.ctx), errShutdown) {
			// Given up in good order, the box left for the next owner
			// (nodes sharing the data directory): it holds no turn, and
			// the next owner arms it again when it reattaches it.
			r.disarm(ctx)
		}
		r.box.Close()
	}
	r.setBox(nil)
}

// stopForGood destroys the box at a shutdown with StopBoxesOnExit. An idle
// session is suspended (as at its idle timeout: the next message resumes
// it); another keeps its state, without a box (the next start makes one).
// The box is destroyed before the handle is cleared: a failure leaves the
// handle, and the next start destroys or reattaches the box.
func (r *runner) stopForGood(ctx context.Context) {
	id := r.box.ID()
	err := r.box.Destroy(ctx)
	r.setBox(nil)
	r.setBoxID("")
	if err != nil {
		r.log.Warn("destroying the box of a server stopping for good", "box", id, "err", err)
		return
	}
	if r.s.State == store.StateIdle {
		r.d.carry.checkpoint(ctx, r.fence, r.s, lastTurn(r.s))
		err = r.setState(ctx, store.StateSuspended, "the server stopped with --stop-boxes-on-exit: the box was stopped; the workspace and the conversation are kept, and the next message resumes them", func(s *store.Session) {
			s.Sandbox = nil
		})
	} else {
		_, err = r.d.st.UpdateSession(ctx, r.id, func(s *store.Session) error { s.Sandbox = nil; return nil })
	}
	if err != nil {
		r.log.Warn("recording that the box of a server stopping for good is gone", "err", err)
	}
}

func decodeHandle(raw []byte) (sandbox.Handle, error) {
	var h sandbox.Handle
	if err := json.Unmarshal(raw, &h); err != nil {
		return h, fmt.Errorf("the stored sandbox handle is unreadable: %w", err)
	}
	return h, nil
}

// lastTurn is the id of s's last turn ("" before the first).
func lastTurn(s *store.Session) string {
	if s.Turns == 0 {
		return ""
	}
	return turnID(s.Turns)
}
