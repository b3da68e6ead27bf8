package opencode

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/event"
)

// turn is the state of one running turn.
type turn struct {
	a       *Agent
	ctx     context.Context
	emit    func(event.Payload)
	start   time.Time
	srv     *server
	session string
	m       *mapper
	sub     *subscription
}

// Turn implements agent.Agent: it sends the prompt to the OpenCode session
// (prompt_async) and maps the session's events until it is idle again. See
// "A turn" in the package doc.
func (a *Agent) Turn(ctx context.Context, prompt string, emit func(event.Payload)) agent.Outcome {
	t := &turn{a: a, ctx: ctx, emit: emit, start: time.Now()}
	emit(event.TurnStarted{Prompt: prompt, Model: a.cfg.Model})
	out := t.run(prompt)
	if t.sub != nil {
		t.sub.close()
	}
	emit(out.Payload())
	// What State answers: the conversation as it is now. After a crash it
	// stays what it was: the next turn's server saves it again.
	if t.srv != nil && t.srv.alive() {
		a.save(ctx, t.srv)
	}
	return out
}

func (t *turn) run(prompt string) agent.Outcome {
	a, ctx := t.a, t.ctx
	srv, err := a.server(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return t.cancelled()
		}
		return t.failed(event.FailCLIStart, err.Error())
	}
	t.srv, t.session = srv, a.Session()
	t.m = newMapper(t.session, a.cfg.Model)
	if t.sub, err = a.subscribe(ctx, srv); err != nil {
		if ctx.Err() != nil {
			return t.cancelled()
		}
		return t.crashed(fmt.Errorf("event stream failed: %w", err))
	}
	// A session still busy from an aborted turn (a watchdog's, a
	// cancel's) would end this one with its late idle: let it settle, then
	// map with a fresh slate.
	t.settle()
	t.m = newMapper(t.session, a.cfg.Model)
	body := map[string]any{
		"parts": []map[string]any{{"type": "text", "text": prompt}},
		"model": map[string]any{"providerID": providerID, "modelID": a.cfg.Model},
	}
	if err := a.call(ctx, srv, http.MethodPost, "/session/"+t.session+"/prompt_async", body, http.StatusNoContent, nil); err != nil {
		if ctx.Err() != nil {
			return t.cancel()
		}
		if !srv.alive() {
			return t.crashed(nil)
		}
		return t.failed(event.FailCLIError, "sending the prompt: "+err.Error())
	}
	watchdog := time.NewTimer(a.cfg.NoOutputTimeout)
	defer watchdog.Stop()
	for {
		select {
		case e, ok := <-t.sub.events:
			if !ok {
				return t.crashed(fmt.Errorf("event stream ended: %w", t.sub.cause()))
			}
			if t.handle(e) {
				watchdog.Reset(a.cfg.NoOutputTimeout)
			}
			if t.m.idle {
				if t.m.steps == 0 && t.m.result == "" && t.m.err == nil {
					// Idle with nothing done for this prompt: the late
					// busy/idle of an aborted turn. Keep waiting.
					a.log.Info("an OpenCode idle with nothing done for this turn: taken for an earlier turn's")
					t.m.busy, t.m.idle = false, false
					continue
				}
				return t.finished()
			}
		case <-srv.proc.Done():
			return t.crashed(nil)
		case <-watchdog.C:
			return t.hung()
		case <-ctx.Done():
			return t.cancel()
		}
	}
}

// handle maps one event and emits what it gives; it answers a permission
// or question OpenCode waits on. It reports whether the event is a sign
// of the session's work: any event but the stream's own (heartbeats), as
// the server serves this session alone and a subagent's work comes as
// the events of a child session.
func (t *turn) handle(e ocEvent) bool {
	out, _, asked, err := t.m.handle(e)
	if err != nil {
		t.a.log.Warn("an OpenCode event of an unexpected shape", "type", e.Type, "err", err)
	}
	for _, p := range out {
		t.emit(p)
	}
	if asked != nil {
		t.reject(e.Type, asked)
	}
	return !strings.HasPrefix(e.Type, "server.")
}

// reject refuses a permission request or a question: nobody could answer
// it during a turn, and the session would wait for it forever.
func (t *turn) reject(typ string, q *ocAsked) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), requestTimeout)
	defer cancel()
	var err error
	if typ == "permission.asked" {
		t.a.log.Warn("OpenCode asked for a permission; rejected", "permission", q.Permission)
		err = t.a.call(ctx, t.srv, http.MethodPost, "/permission/"+q.ID+"/reply", map[string]string{
			"reply": "reject", "message": "Harvest runs OpenCode unattended: nobody can grant permissions during a turn.",
		}, http.StatusOK, nil)
	} else {
		t.a.log.Warn("OpenCode asked the user a question; rejected")
		err = t.a.call(ctx, t.srv, http.MethodPost, "/question/"+q.ID+"/reject", nil, http.StatusOK, nil)
	}
	if err != nil {
		t.a.log.Error("rejecting OpenCode's request", "type", typ, "err", err)
	}
}

// finished: the session went idle after working on the prompt.
func (t *turn) finished() agent.Outcome {
	m := t.m
	if e := m.err; e != nil {
		kind := event.FailCLIError
		switch e.Name {
		case "APIError", "ProviderAuthError":
			kind = event.FailModel
		case "ContextOverflowError":
			kind = event.FailContext
		case "MessageOutputLengthError":
			kind = event.FailMaxTokens
		case "MessageAbortedError":
			return t.failed(event.FailCLIError, "OpenCode aborted the turn, and Harvest did not ask it to")
		}
		return t.failed(kind, "OpenCode: "+e.String())
	}
	return agent.Outcome{Finished: &event.TurnFinished{
		Result: m.result, StopReason: m.stop, Steps: m.steps,
		Usage: m.usage, CostUSD: m.cost, DurationMS: time.Since(t.start).Milliseconds(),
	}}
}

// cancel: the turn's context ended. OpenCode aborts the session (killing a
// running tool's process tree); the turn waits for it to go idle, at most
// AbortGrace, then stops the server if it did not.
func (t *turn) cancel() agent.Outcome {
	t.stopSession("the turn was cancelled")
	for _, p := range t.m.openTools("interrupted: the turn was cancelled") {
		t.emit(p)
	}
	return t.cancelled()
}

func (t *turn) cancelled() agent.Outcome {
	reason := "cancelled"
	if c := context.Cause(t.ctx); c != nil && !errors.Is(c, context.Canceled) {
		reason = c.Error()
	}
	return agent.Outcome{Cancelled: &event.TurnCancelled{Reason: reason}}
}

// hung: the session reported nothing for NoOutputTimeout. A server that
// went silent is not trusted with the next turn: after the abort it is
// stopped, and the next turn starts a new one on the same session (after
// an abort of a hung model call OpenCode 1.18.33 reports a late busy and
// idle, and can drop a prompt sent meanwhile).
func (t *turn) hung() agent.Outcome {
	t.stopSession("the turn was aborted: OpenCode reported nothing")
	for _, p := range t.m.openTools("interrupted: OpenCode reported nothing for " + t.a.cfg.NoOutputTimeout.String()) {
		t.emit(p)
	}
	t.a.stopServer(t.srv)
	return t.failed(event.FailCLIHung, fmt.Sprintf("OpenCode reported nothing for %v; the turn was aborted", t.a.cfg.NoOutputTimeout))
}

// settle waits, at most AbortGrace, for the session to be idle before a
// prompt, dropping what it reports meanwhile (the end of an aborted turn,
// already reported as that turn's outcome).
func (t *turn) settle() {
	a := t.a
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), a.cfg.AbortGrace)
	defer cancel()
	busy := func() bool {
		var status map[string]struct {
			Type string `json:"type"`
		}
		if err := a.call(ctx, t.srv, http.MethodGet, "/session/status", nil, http.StatusOK, &status); err != nil {
			return false
		}
		st, ok := status[t.session]
		return ok && st.Type != "idle"
	}
	if !busy() {
		return
	}
	a.log.Info("the OpenCode session is still busy from an earlier turn: waiting for it to settle")
	drop := newMapper(t.session, a.cfg.Model)
	for !drop.anyIdle {
		select {
		case e, ok := <-t.sub.events:
			if !ok {
				return
			}
			_, _, _, _ = drop.handle(e)
		case <-t.srv.proc.Done():
			return
		case <-ctx.Done():
			a.log.Warn("the OpenCode session is still busy after an abort; sending the prompt anyway", "grace", a.cfg.AbortGrace)
			return
		}
	}
}

// stopSession aborts the session and waits, at most AbortGrace, for it to
// go idle, mapping what it reports meanwhile (the tool results of the
// abort); when it does not, the server is stopped (the next turn starts
// it again).
func (t *turn) stopSession(why string) {
	a := t.a
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), a.cfg.AbortGrace)
	defer cancel()
	if err := a.abort(ctx, t.srv, t.session); err != nil {
		a.log.Warn("aborting the OpenCode session", "why", why, "err", err)
	}
	// A session that is not busy (the prompt never reached it, or it was
	// done already) sends no idle.
	var status map[string]struct {
		Type string `json:"type"`
	}
	if err := a.call(ctx, t.srv, http.MethodGet, "/session/status", nil, http.StatusOK, &status); err == nil {
		if st, ok := status[t.session]; !ok || st.Type == "idle" {
			return
		}
	}
	for !t.m.anyIdle {
		select {
		case e, ok := <-t.sub.events:
			if !ok {
				return // the server is gone: nothing runs any more
			}
			t.handle(e)
			continue
		case <-t.srv.proc.Done():
			return
		case <-ctx.Done():
		}
		a.log.Warn("the OpenCode session did not stop after an abort; stopping the server", "why", why, "grace", a.cfg.AbortGrace)
		a.stopServer(t.srv)
		return
	}
}

// crashed: the server exited, or its event stream broke, during the turn.
// The server is stopped for good; the next turn starts a new one, which
// continues the same OpenCode session from the box's database.
func (t *turn) crashed(err error) agent.Outcome {
	a := t.a
	if !a.box.Alive() {
		return t.failed(event.FailSandbox, "lost the connection to the box during the turn")
	}
	// A server that dies breaks its stream a moment before the box's agent
	// reports its exit: give the exit a moment, to say what happened.
	exited := time.NewTimer(2 * time.Second)
	select {
	case <-t.srv.proc.Done():
	case <-exited.C:
	}
	exited.Stop()
	var what string
	if t.srv.alive() {
		what = fmt.Sprintf("the OpenCode server's %v; the server was stopped", err)
	} else {
		what = "the OpenCode server " + t.srv.exitReason()
	}
	a.stopServer(t.srv)
	if t.m != nil {
		for _, p := range t.m.openTools("interrupted: the OpenCode server stopped") {
			t.emit(p)
		}
	}
	return t.failed(event.FailCLICrashed, fmt.Sprintf("%s during the turn; the next turn starts it again and continues OpenCode session %s", what, t.session))
}

func (t *turn) failed(kind event.FailureKind, msg string) agent.Outcome {
	f := &event.TurnFailed{Kind: kind, Error: msg}
	if t.m != nil {
		f.Usage, f.Cost = t.m.usage, t.m.cost
	}
	return agent.Outcome{Failed: f}
}

// stopServer stops s if it is still the agent's server.
func (a *Agent) stopServer(s *server) {
	a.srvMu.Lock()
	defer a.srvMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), stopGrace+15*time.Second)
	defer cancel()
	if err := s.stop(ctx); err != nil {
		a.log.Error("stopping the OpenCode server", "err", err)
	}
	if a.srv == s {
		a.srv = nil
	}
}
