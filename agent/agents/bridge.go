package agents

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/egress"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/modelproxy"
	"github.com/harvest-dev/harvest/sandbox"
)

// wired is an agent with the bridges Open made for it, which its Close
// stops after the agent.
type wired struct {
	agent.Agent
	model  *modelBridge // nil: the agent calls the model from the host
	egress *EgressBridge
	git    *gitBridge
	mcp    *mcpBridge
	// payer admits and pays for the model calls (nil: none does);
	// refused is its refusals during the turn.
	payer   Payer
	refused *refusals
	// stuck: the agent does not report a STUCK.md itself; the turn's end
	// looks for one in ws.
	stuck     bool
	box       *sandbox.Sandbox
	ws        []agent.Workspace
	closeOnce sync.Once
	closeErr  error
}

// Turn sets up the model bridge for the turn (budget, metering) and runs
// the agent's turn.
func (w *wired) Turn(ctx context.Context, prompt string, emit func(event.Payload)) agent.Outcome {
	if w.stuck {
		emit = w.stuckEmit(ctx, emit)
	}
	turn := func(emit func(event.Payload)) agent.Outcome {
		if w.model == nil {
			return w.Agent.Turn(ctx, prompt, emit)
		}
		return w.model.turn(ctx, w.Agent, prompt, emit)
	}
	if w.refused == nil {
		return turn(emit)
	}
	return budgetOutcome(w.refused, turn, emit)
}

// stuckEmit reports a STUCK.md the agent wrote during the turn as a stuck
// event, just before the turn's ending event.
func (w *wired) stuckEmit(ctx context.Context, emit func(event.Payload)) func(event.Payload) {
	before := agent.ReadStuck(ctx, w.box, w.ws)
	return func(p event.Payload) {
		switch p.(type) {
		case event.TurnFinished, event.TurnFailed, event.TurnCancelled:
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if name, text, ok := agent.NewStuck(rctx, w.box, w.ws, before); ok {
				emit(event.Stuck{Repo: name, Text: text})
			}
			cancel()
		}
		emit(p)
	}
}

// Close closes the agent, then its bridges.
func (w *wired) Close(ctx context.Context) error {
	w.closeOnce.Do(func() {
		w.closeErr = w.Agent.Close(ctx)
		w.stop()
	})
	return w.closeErr
}

func (w *wired) stop() {
	if w.model != nil {
		w.model.stop()
	}
	if w.egress != nil {
		w.egress.Close()
	}
	if w.git != nil {
		w.git.stop()
	}
	if w.mcp != nil {
		w.mcp.stop()
	}
}

// modelBridge is the model proxy served on a loopback listener in a box,
// for one session's token.
type modelBridge struct {
	proxy   *modelproxy.Proxy
	session string
	budget  float64

	ln        *sandbox.Listener
	revoke    func()
	stopServe context.CancelFunc
	served    chan struct{}

	// meter: the agent reports no usage, so the turn's usage is what the
	// proxy measured.
	meter bool
	// payer pays for each call the proxy metered (nil: none).
	payer Payer
	mu    sync.Mutex
	usage []modelproxy.Usage // during a turn (OnUsage runs on the proxy's request goroutines)
	// turnCtx is the context of the turn running (nil between turns): the
	// model calls the proxy forwards are spans of its trace.
	turnCtx context.Context
}

// bridgeModel serves p in req's box and returns the bridge, the in-box URL
// and the session's token.
func bridgeModel(ctx context.Context, req Request, p *modelproxy.Proxy, meter bool, refused *refusals) (*modelBridge, string, string, error) {
	ln, err := req.Box.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", "", fmt.Errorf("bridging the model endpoint into the box: %w", err)
	}
	b := &modelBridge{proxy: p, session: req.SessionID, budget: req.Limits.BudgetUSD, ln: ln, served: make(chan struct{}), meter: meter, payer: req.Payer}
	g := modelproxy.Grant{Session: req.SessionID, OnUsage: b.onUsage, Trace: b.trace}
	if req.Payer != nil {
		g.Admit = func(ctx context.Context) error { return refused.admit(ctx, req.Payer) }
	}
	token, revoke := p.Grant(g)
	b.revoke = revoke
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.stopServe = cancel
	go func() {
		defer close(b.served)
		if err := p.Serve(sctx, ln); err != nil && sctx.Err() == nil {
			req.Logger.Warn("serving the model proxy in the box stopped", "session", req.SessionID, "err", err)
		}
	}()
	return b, "http://" + ln.Addr().String(), token, nil
}

func (b *modelBridge) onUsage(u modelproxy.Usage) {
	if b.payer != nil && u.CostUSD > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), payTimeout)
		b.payer.Pay(ctx, u.CostUSD)
		cancel()
	}
	b.mu.Lock()
	b.usage = append(b.usage, u)
	b.mu.Unlock()
}

// trace is the proxy's Grant.Trace: the turn's context, whose span the
// model calls are children of (none between turns).
func (b *modelBridge) trace() context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.turnCtx == nil {
		return context.Background()
	}
	return b.turnCtx
}

// turn sets the turn's budget on the proxy (what the session spent so far
// plus the budget) and runs ag's turn; with meter, the usage the proxy
// measured becomes the turn's step.finished events and totals.
func (b *modelBridge) turn(ctx context.Context, ag agent.Agent, prompt string, emit func(event.Payload)) agent.Outcome {
	b.mu.Lock()
	b.usage = nil
	b.turnCtx = ctx
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.turnCtx = nil
		b.mu.Unlock()
	}()
	if b.budget > 0 {
		b.proxy.SetBudget(b.session, b.proxy.Spent(b.session)+b.budget)
	}
	if !b.meter {
		return ag.Turn(ctx, prompt, emit)
	}
	var total event.Usage
	var cost float64
	var n int
	withUsage := func(p event.Payload) event.Payload {
		switch p := p.(type) {
		case event.TurnFinished:
			total, cost, n = b.steps(emit)
			p.Usage, p.CostUSD, p.Steps = total, cost, n
			return p
		case event.TurnFailed:
			total, cost, _ = b.steps(emit)
			p.Usage, p.Cost = total, cost
			return p
		case event.TurnCancelled:
			total, cost, _ = b.steps(emit)
		}
		return p
	}
	out := ag.Turn(ctx, prompt, func(p event.Payload) { emit(withUsage(p)) })
	switch {
	case out.Finished != nil:
		out.Finished.Usage, out.Finished.CostUSD, out.Finished.Steps = total, cost, n
	case out.Failed != nil:
		out.Failed.Usage, out.Failed.Cost = total, cost
	}
	return out
}

// steps emits the model calls the proxy metered during the turn as
// step.finished events, and returns their sum and number. The proxy
// records a call's usage before the CLI sees its response end, so every
// call of the turn is there by the time the CLI says it is done.
func (b *modelBridge) steps(emit func(event.Payload)) (event.Usage, float64, int) {
	b.mu.Lock()
	us := b.usage
	b.usage = nil
	b.mu.Unlock()
	var total event.Usage
	var cost float64
	for i, u := range us {
		eu := event.Usage{InputTokens: int64(u.Tokens.InputTokens), OutputTokens: int64(u.Tokens.OutputTokens),
			CacheReadTokens: int64(u.Tokens.CacheReadTokens), CacheWriteTokens: int64(u.Tokens.CacheWriteTokens)}
		emit(event.StepFinished{Step: i + 1, Model: u.Model, Usage: eu, CostUSD: u.CostUSD, DurationMS: u.Duration.Milliseconds()})
		total = total.Add(eu)
		cost += u.CostUSD
	}
	return total, cost, len(us)
}

func (b *modelBridge) stop() {
	b.revoke()
	b.stopServe()
	b.ln.Close()
	<-b.served
}

// EgressBridge is the egress proxy served on a loopback listener in a box.
type EgressBridge struct {
	ln        *sandbox.Listener
	revoke    func()
	cancel    context.CancelFunc
	served    chan struct{}
	closeOnce sync.Once
}

// BridgeEgress serves ep on a loopback port in box for session, and returns
// the environment that points commands at it: HTTP(S)_PROXY and friends,
// with a proxy token of the session's that is worth nothing outside that
// listener. allow, when not nil, narrows ep's allowlist for the session.
// Close stops it.
func BridgeEgress(ctx context.Context, box *sandbox.Sandbox, ep *egress.Proxy, allow []string, session string, log *slog.Logger) (*EgressBridge, []string, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var token string
	var revoke func()
	if allow == nil {
		token, revoke = ep.Grant(session, nil)
	} else {
		var err error
		if token, revoke, err = ep.GrantOnly(session, allow, nil); err != nil {
			return nil, nil, err
		}
	}
	ln, err := box.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		revoke()
		return nil, nil, fmt.Errorf("bridging the egress proxy into the box: %w", err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e := &EgressBridge{ln: ln, revoke: revoke, cancel: cancel, served: make(chan struct{})}
	go func() {
		defer close(e.served)
		if err := ep.Serve(sctx, ln); err != nil && sctx.Err() == nil {
			log.Warn("serving the egress proxy in the box stopped", "session", session, "err", err)
		}
	}()
	return e, egress.Env("http://harvest:" + token + "@" + ln.Addr().String()), nil
}

// Close revokes the token, stops serving and closes the listener; it
// returns once the serving goroutine is done. Idempotent.
func (e *EgressBridge) Close() {
	e.closeOnce.Do(func() {
		e.revoke()
		e.cancel()
		e.ln.Close()
		<-e.served
	})
}
