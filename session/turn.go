package session

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/base/tracing"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// runTurn delivers msg to the agent as turn t{N+1} and supervises the turn
// until it ends and the session is idle again.
func (r *runner) runTurn(msg *store.Message) error {
	d := r.d
	if !d.host.beginTurn() {
		return nil // draining: the message stays queued for the next server
	}
	defer d.host.endTurn()
	n := r.s.Turns + 1
	tid := turnID(n)
	if r.lease == nil {
		l, err := acquireLock(r.ctx, d.st, LockKeyOf(r.s), runID(r.id, n), d.cfg.LockTTL, d.clock.Now())
		if le, ok := lockedBy(err); ok {
			r.lockRetry = d.clock.Now().Add(d.cfg.LockRetry)
			if le.Lock.Holder != r.lockSaid {
				r.lockSaid = le.Lock.Holder
				what := "the session"
				if wf := r.s.Collab.Workflow; wf != "" {
					what = "workflow " + wf
				}
				r.append(r.event("", event.SessionState{State: string(r.s.State), Reason: fmt.Sprintf("message %s waits: %s is %v; retrying every %s (an admin can force it: harvest session unlock %s)", msg.ID, what, le, d.cfg.LockRetry, r.id)}))
			}
			return nil
		}
		if err != nil {
			return err
		}
		r.lease = l
		r.lockRetry, r.lockSaid = time.Time{}, ""
	}

	// The turn's span, in the trace of the request that sent its message
	// (tracing.go); it ends when the turn is over, however it ended.
	started := time.Now()
	sctx, span := r.span(r.ctx, d.traces.take(r.id, msg.ID), "session.turn "+tid,
		attribute.String("harvest.turn", tid), attribute.String("harvest.agent", r.s.Agent),
		attribute.String("harvest.model", r.s.Model), attribute.String("harvest.message", msg.ID))
	var end event.Payload // the event that ended it
	defer func() { r.turnOver(span, tid, end, started) }()
	tctx, tcancel := context.WithCancelCause(sctx)
	defer tcancel(nil)
	ctl := &turnCtl{msgSeq: msg.Seq, cancel: tcancel, done: make(chan struct{})}
	r.mu.Lock()
	r.turn = ctl
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.turn = nil
		r.mu.Unlock()
		close(ctl.done)
	}()

	err := r.setState(r.ctx, store.StateWorking, "", func(s *store.Session) {
		s.Turns = n
		s.ActiveAt = d.clock.Now().UTC()
	})
	if err == nil {
		err = d.st.SetMessageState(r.ctx, r.id, msg.ID, store.MessageDelivered, tid)
	}
	if err != nil {
		// Turns may have moved on: the message, still queued, goes to the
		// next one.
		return err
	}
	r.append(r.event(tid, event.MessageDelivered{MessageID: msg.ID}))
	r.log.Info("turn started", append([]any{"turn", tid, "agent", r.s.Agent, "message", msg.ID}, traceAttrs(span)...)...)
	r.curTurn.Store(&tid)
	defer r.curTurn.Store(nil)

	ag := r.ag
	caps := kindOf(r.s.Agent).Caps
	sink := &turnSink{r: r, ag: ag, tid: tid, agent: r.s.Agent, checkpoints: caps.StepCheckpoints, ctx: tctx, watchdog: r.s.Limits.TurnWatchdog,
		watch: r.watchTurn(tid, msg)}
	if caps.ModelInBox && span.IsRecording() {
		// Its tools run in the box, inside its CLI: their spans are made
		// from its events.
		sink.tools = map[string]trace.Span{}
	}
	sink.last.Store(d.clock.Now().UnixNano())
	turn := ag.Turn
	berr := overBudget(tctx, d.st, r.s.User, d.clock.Now(), true)
	if berr == nil {
		berr = unpricedCap(tctx, d.st, r.s.User, r.s.Model, d.cfg.Models.Prices)
	}
	if berr != nil {
		if be, ok := errors.AsType[*BudgetError](berr); ok {
			// Not started: the message is answered with why (quota.go).
			turn = refusedTurn(r.s.Model, be)
		} else {
			// Each model call is admitted again (the payer).
			r.log.Warn("the user's budgets could not be read before the turn", "err", berr)
		}
	}
	outc := make(chan agent.Outcome, 1)
	go func() { outc <- turn(tctx, msg.Text, sink.emit) }()
	out := r.supervise(tctx, tcancel, outc, sink)
	if sink.watch != nil {
		sink.watch.Done()
	}
	sink.endTools()
	end = sink.end
	if end == nil {
		end = out.Payload() // a deleted session's: not journaled
	}

	cause := context.Cause(tctx)
	if errors.Is(context.Cause(r.ctx), errDeleted) {
		return nil // nothing more is written for a deleted session
	}
	st, serr := r.ag.State()
	if serr != nil {
		r.log.Error("the agent's state cannot be saved; the next turn continues from the last saved one", "err", serr)
	}
	reason := ""
	switch {
	case out.Cancelled != nil:
		reason = "the turn was cancelled: " + out.Cancelled.Reason
	case out.Failed != nil:
		reason = "the turn failed (" + string(out.Failed.Kind) + ")"
	}
	if errors.Is(cause, errCancelled) && reason != "" {
		reason += "; queued messages, if any, wait for the next message"
	}
	r.afterTurn(tid, msg, out)
	ctx, cancel := r.finalCtx()
	defer cancel()
	if err := r.setState(ctx, store.StateIdle, reason, func(s *store.Session) {
		s.Usage = s.Usage.Add(sink.usage)
		s.CostUSD += sink.cost
		if serr == nil {
			s.AgentState = st
		}
		s.ActiveAt = d.clock.Now().UTC()
	}); err != nil {
		return err
	}
	d.carry.checkpoint(r.ctx, r.fence, r.s, tid)
	return nil
}

// turnOver ends a turn's span, logs its end and tells the Observer.
// end is the event that ended it (nil: the turn never began, its
// message stays queued).
func (r *runner) turnOver(span trace.Span, tid string, end event.Payload, started time.Time) {
	res, ok := turnResult(end)
	if !ok {
		span.SetAttributes(attribute.String("harvest.outcome", "not_begun"))
		span.End()
		return
	}
	d := time.Since(started)
	attrs := []any{"turn", tid, "outcome", res.Outcome, "ms", d.Milliseconds()}
	if res.Failure != "" {
		attrs = append(attrs, "failure", string(res.Failure))
	}
	r.log.Info("turn ended", append(attrs, traceAttrs(span)...)...)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("harvest.outcome", res.Outcome))
		if res.Failure != "" {
			span.SetAttributes(attribute.String("harvest.failure", string(res.Failure)))
			span.SetStatus(codes.Error, "the turn failed: "+string(res.Failure))
		}
	}
	span.End()
	if o := r.d.cfg.Observer; o != nil {
		o.TurnEnded(r.s.Agent, res, d)
	}
}

// dropLease releases the session lock, if the runner holds it.
func (r *runner) dropLease() {
	if r.lease == nil {
		return
	}
	ctx, cancel := r.finalCtx()
	defer cancel()
	if err := r.lease.release(ctx); err != nil {
		r.log.Warn("releasing the session lock", "run", r.lease.holder, "err", err)
	}
	r.lease = nil
	r.d.host.wakeWorkflow(r.s)
}

// supervise waits for the turn's outcome while keeping its watchdog, its
// lock and the session's lifetime, and records a cancellation as the
// cancelling state. Wakes are left for after the turn: messages are read
// from the store then, and cancels and interrupts act on the turn's context
// directly.
func (r *runner) supervise(tctx context.Context, tcancel context.CancelCauseFunc, outc <-chan agent.Outcome, sink *turnSink) agent.Outcome {
	clock := r.d.clock
	lifeC, stopLife := clock.At(r.lifetimeEnd())
	defer stopLife()
	cancelled := tctx.Done()
	for {
		wdAt := time.Unix(0, sink.last.Load()).Add(sink.watchdog)
		wdC, stopWd := clock.At(wdAt)
		renewC, stopRenew := (<-chan time.Time)(nil), func() {}
		if r.lease != nil {
			renewC, stopRenew = clock.At(r.lease.renewAt())
		}
		select {
		case out := <-outc:
			stopWd()
			stopRenew()
			return out
		case <-wdC:
			if last := time.Unix(0, sink.last.Load()); !clock.Now().Before(last.Add(sink.watchdog)) {
				tcancel(errWatchdog)
			}
		case <-renewC:
			err := r.lease.renew(tctx, clock.Now())
			if _, lost := lockedBy(err); lost {
				r.log.Error("the turn lost its session lock; cancelling it", "err", err)
				r.lease = nil
				tcancel(errLockLost)
			} else if err != nil && tctx.Err() == nil {
				r.log.Warn("renewing the session lock; retrying", "err", err)
				r.lease.renewed = clock.Now().Add(-r.lease.ttl / 3).Add(time.Second)
			}
		case <-lifeC:
			tcancel(errLifetime)
		case <-cancelled:
			cancelled = nil
			c := context.Cause(tctx)
			var ie *interruptError
			if errors.Is(c, errCancelled) || errors.As(c, &ie) {
				if err := r.setState(r.ctx, store.StateCancelling, c.Error(), nil); err != nil && r.ctx.Err() == nil {
					r.log.Warn("recording the cancelling state", "err", err)
				}
			}
		}
		stopWd()
		stopRenew()
	}
}

// turnSink receives the agent's payloads (on the turn's goroutine, never
// concurrently), wraps them in envelopes and journals them.
type turnSink struct {
	r     *runner
	ag    agent.Agent
	tid   string
	agent string
	// checkpoints: the agent's State is saved after every step
	// (agent.Capabilities.StepCheckpoints).
	checkpoints bool
	ctx         context.Context // the turn's
	watchdog    time.Duration
	// watch is the forge's watch of the turn (nil: none).
	watch TurnWatch
	last  atomic.Int64 // clock time of the last event, ns
	// Read by the runner after the turn's goroutine is done.
	usage event.Usage
	cost  float64
	end   event.Payload // the event that ended the turn, once emitted
	// tools are the spans of the tool calls running, by call id, for an
	// agent whose tools run in the box (nil: none are made here).
	tools map[string]trace.Span
}

// toolSpan starts or ends the span of a tool call an agent in the box
// reported, from its tool.started and tool.finished events.
func (t *turnSink) toolSpan(p event.Payload) {
	switch v := p.(type) {
	case event.ToolStarted:
		_, span := tracing.Start(t.ctx, tracerScope, "tool "+v.Tool, trace.WithAttributes(
			attribute.String("harvest.tool", v.Tool), attribute.String("harvest.call", v.CallID)))
		t.tools[v.CallID] = span
	case event.ToolFinished:
		if span := t.tools[v.CallID]; span != nil {
			if v.IsError {
				span.SetStatus(codes.Error, "the tool answered an error")
			}
			span.End()
			delete(t.tools, v.CallID)
		}
	}
}

// endTools ends the spans of the tool calls the turn left unfinished.
// Called once the turn's goroutine is done.
func (t *turnSink) endTools() {
	for id, span := range t.tools {
		span.SetStatus(codes.Error, "the turn ended before the tool call")
		span.End()
		delete(t.tools, id)
	}
}

func (t *turnSink) emit(p event.Payload) {
	r := t.r
	now := r.d.clock.Now()
	t.last.Store(now.UnixNano())
	if t.tools != nil {
		t.toolSpan(p)
	}
	switch v := p.(type) {
	case event.StepFinished:
		t.usage = t.usage.Add(v.Usage)
		t.cost += v.CostUSD
		if t.checkpoints {
			defer t.checkpoint()
		}
	case event.TurnCancelled:
		p = t.outcome(v)
	}
	if errors.Is(context.Cause(r.ctx), errDeleted) {
		return
	}
	p = redactPayload(r.redact, p)
	ev := event.Event{Session: r.id, Time: now.UTC(), Turn: t.tid, Agent: t.agent, Data: p}
	switch p.(type) {
	case event.TurnFinished, event.TurnCancelled, event.TurnFailed:
		t.end = p
		ctx, cancel := r.finalCtx()
		defer cancel()
		if _, err := r.d.j.AppendSync(ctx, ev); errors.Is(err, store.ErrLeaseLost) {
			r.log.Info("the end of the turn is not journaled here: this node lost the session's lease (the next owner says the turn was interrupted)", "turn", t.tid)
		} else if err != nil {
			r.log.Error("journaling the end of a turn", "turn", t.tid, "err", err)
		}
	default:
		r.append(ev)
	}
	if t.watch != nil {
		t.watch.See(ev)
	}
}

// checkpoint stores the builtin agent's conversation after each step, so
// a crash mid-turn does not lose what the agent did and saw: its State is
// the conversation in memory, committed at every step (a tool call left
// without a result is closed by the next turn). The step's usage needs no
// checkpoint: its step.finished event, handed to the journal just before,
// is what recovery counts. An external agent's State reads its CLI's transcript out of the
// box, too costly for every step: the box keeps it, and the end of the turn
// saves it. A failed write is logged; the end of the turn writes it again.
func (t *turnSink) checkpoint() {
	r := t.r
	if errors.Is(context.Cause(r.ctx), errDeleted) {
		return
	}
	st, err := t.ag.State()
	if err != nil {
		r.log.Warn("the agent's state cannot be checkpointed", "turn", t.tid, "err", err)
		return
	}
	ctx, cancel := r.finalCtx()
	defer cancel()
	if _, err := r.d.st.UpdateSession(ctx, r.id, func(s *store.Session) error {
		s.AgentState = st
		return nil
	}); err != nil {
		r.log.Warn("checkpointing the conversation", "turn", t.tid, "err", err)
	}
}

// outcome turns a cancellation the session caused into what it means: the
// watchdog's and a shutdown's are failures of the turn, not a user's
// cancel.
func (t *turnSink) outcome(c event.TurnCancelled) event.Payload {
	cause := context.Cause(t.ctx)
	switch {
	case errors.Is(cause, errWatchdog):
		return event.TurnFailed{Kind: event.FailWatchdog, Usage: t.usage, Cost: t.cost,
			Error: fmt.Sprintf("the turn made no progress (no event) for %s and was cancelled; send a message to go on, or raise limits.turn_watchdog", t.watchdog)}
	case errors.Is(cause, errShutdown):
		return event.TurnFailed{Kind: event.FailInterrupted, Usage: t.usage, Cost: t.cost,
			Error: "Harvest shut down during this turn: what the agent did is kept; send the message again to go on"}
	case errors.Is(cause, errLeaseLost):
		// As when a node dies or pauses: the turn is interrupted, and
		// whichever node runs the session next says so if this one
		// cannot (its writes are fenced).
		return event.TurnFailed{Kind: event.FailInterrupted, Usage: t.usage, Cost: t.cost,
			Error: "this turn's node lost the session's lease (it was paused, or cut off from the store, past its deadline) and stopped it: send the message again to go on"}
	case errors.Is(cause, errLockLost):
		return event.TurnFailed{Kind: event.FailLock, Usage: t.usage, Cost: t.cost,
			Error: "the session lock expired and another run took it, so this turn stopped; send the message again when that run is done"}
	}
	return c
}

// refusedTurn is a turn that fails at once, kind budget, before the
// agent is asked.
func refusedTurn(model string, why *BudgetError) func(context.Context, string, func(event.Payload)) agent.Outcome {
	return func(_ context.Context, prompt string, emit func(event.Payload)) agent.Outcome {
		f := event.TurnFailed{Kind: event.FailBudget, Error: "harvest: " + why.Error()}
		emit(event.TurnStarted{Prompt: prompt, Model: model})
		emit(f)
		return agent.Outcome{Failed: &f}
	}
}
