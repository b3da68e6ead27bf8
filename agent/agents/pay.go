package agents

import (
	"context"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/llm"
)

// Payer is who pays for an agent's model calls (Request.Payer): package
// session's, which holds a session's user to their daily budgets. Every
// model call of the agent asks Admit first, whichever way it goes: the
// host client of an agent whose loop runs in Harvest (payingProvider),
// the model proxy of one whose CLI runs in the box (Grant.Admit). So a
// budget holds for every kind, and the CLI in a box cannot get around
// it.
type Payer interface {
	// Admit is asked before each model call: an error refuses the call.
	// Its text is the message the turn ends with, so it says what was
	// reached and who can raise it.
	Admit(ctx context.Context) error
	// Pay records a model call's cost, in US dollars. It is called
	// before the agent sees the end of the response, so the agent's
	// next call finds it counted; it must not take long.
	Pay(ctx context.Context, usd float64)
}

// payTimeout bounds a Pay made from the model proxy's OnUsage, which has
// no context of its own.
const payTimeout = 10 * time.Second

// refusals remembers the Payer's last refusal during a turn, so the turn
// ends as a budget failure with its message, however the agent reported
// the refused call (the builtin as a model error, a CLI as an API
// error or a failed run).
type refusals struct {
	mu  sync.Mutex
	err error
}

func (r *refusals) note(err error) {
	r.mu.Lock()
	r.err = err
	r.mu.Unlock()
}

func (r *refusals) take() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.err
	r.err = nil
	return err
}

// admit asks p, noting a refusal.
func (r *refusals) admit(ctx context.Context, p Payer) error {
	err := p.Admit(ctx)
	if err != nil && ctx.Err() == nil {
		r.note(err)
	}
	return err
}

// payingProvider is a host client's provider whose every call is
// admitted and paid for by a Payer.
type payingProvider struct {
	llm.Provider
	payer   Payer
	refused *refusals
	// cost prices a response as the client does (llm.Client.Cost).
	cost func(*llm.Response) (float64, bool)
}

// Stream admits the call, makes it, and pays for what it used.
func (p *payingProvider) Stream(ctx context.Context, req llm.Request, fn func(llm.Event)) (*llm.Response, error) {
	if err := p.refused.admit(ctx, p.payer); err != nil {
		// Not retryable: the client gives up at once.
		return nil, &llm.Error{Kind: llm.ErrBadRequest, Provider: p.Name(), Message: "harvest: " + err.Error(), Err: err}
	}
	resp, err := p.Provider.Stream(ctx, req, fn)
	if resp != nil {
		if usd, ok := p.cost(resp); ok && usd > 0 {
			p.payer.Pay(context.WithoutCancel(ctx), usd)
		}
	}
	return resp, err
}

// payingCounter is a payingProvider over a provider that counts tokens
// (which costs nothing, so is not admitted).
type payingCounter struct {
	*payingProvider
	tc llm.TokenCounter
}

func (p payingCounter) CountTokens(ctx context.Context, req llm.Request) (int, error) {
	return p.tc.CountTokens(ctx, req)
}

// paying wraps open so that every client it returns is admitted and paid
// for by payer.
func paying(open func(string) (*llm.Client, error), payer Payer, refused *refusals) func(string) (*llm.Client, error) {
	return func(model string) (*llm.Client, error) {
		c, err := open(model)
		if err != nil {
			return nil, err
		}
		cp := *c
		pp := &payingProvider{Provider: c.Provider, payer: payer, refused: refused, cost: c.Cost}
		cp.Provider = pp
		if tc, ok := c.Provider.(llm.TokenCounter); ok {
			cp.Provider = payingCounter{pp, tc}
		}
		return &cp, nil
	}
}

// budgetOutcome makes a turn during which the Payer refused a call end
// as a budget failure with the refusal's message: the event the agent
// emits and the outcome it returns. (An agent may emit from a goroutine
// of its own: the refusal seen is kept under a lock.)
func budgetOutcome(refused *refusals, turn func(emit func(event.Payload)) agent.Outcome, emit func(event.Payload)) agent.Outcome {
	refused.take() // a refusal of an earlier turn is that turn's
	var (
		mu  sync.Mutex
		why string
	)
	reason := func() string {
		mu.Lock()
		defer mu.Unlock()
		if why == "" {
			if err := refused.take(); err != nil {
				why = "harvest: " + err.Error()
			}
		}
		return why
	}
	out := turn(func(p event.Payload) {
		switch v := p.(type) {
		case event.TurnFailed:
			if w := reason(); w != "" {
				v.Kind, v.Error = event.FailBudget, w
				p = v
			}
		case event.TurnFinished:
			if w := reason(); w != "" {
				p = event.TurnFailed{Kind: event.FailBudget, Error: w, Usage: v.Usage, Cost: v.CostUSD}
			}
		}
		emit(p)
	})
	w := reason()
	switch {
	case w == "":
	case out.Failed != nil:
		f := *out.Failed
		f.Kind, f.Error = event.FailBudget, w
		out.Failed = &f
	case out.Finished != nil:
		out = agent.Outcome{Failed: &event.TurnFailed{Kind: event.FailBudget, Error: w, Usage: out.Finished.Usage, Cost: out.Finished.CostUSD}}
	}
	return out
}
