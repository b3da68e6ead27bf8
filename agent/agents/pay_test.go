package agents

import (
	"context"
	"errors"
	"testing"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/event"
)

// payer refuses once its cap is reached, as session's does.
type capPayer struct{ spent, cap float64 }

func (p *capPayer) Admit(context.Context) error {
	if p.spent >= p.cap {
		return errors.New("the daily model budget of user usr-ann is spent")
	}
	return nil
}

func (p *capPayer) Pay(_ context.Context, usd float64) { p.spent += usd }

// TestBudgetOutcome: a turn during which the payer refused a call ends
// failed, kind budget, with the refusal's message, whether the agent
// reported the refused call as a failure of its own or finished anyway,
// in the event it emits and the outcome it returns; a refusal of an
// earlier turn is not this one's, and a turn with none is left as it is.
func TestBudgetOutcome(t *testing.T) {
	ctx := context.Background()
	const want = "harvest: the daily model budget of user usr-ann is spent"
	for _, c := range []struct {
		name string
		end  agent.Outcome
	}{
		{"failed", agent.Outcome{Failed: &event.TurnFailed{Kind: event.FailModel, Error: "API Error: 402"}}},
		{"finished", agent.Outcome{Finished: &event.TurnFinished{Result: "gave up", CostUSD: 0.5}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &capPayer{cap: 1}
			var r refusals
			run := func(refuse bool) (agent.Outcome, []event.Payload) {
				var seen []event.Payload
				out := budgetOutcome(&r, func(emit func(event.Payload)) agent.Outcome {
					if refuse {
						p.Pay(ctx, 1)
						if err := r.admit(ctx, p); err == nil {
							t.Fatal("the payer admitted a call over its cap")
						}
					}
					emit(event.TurnStarted{})
					emit(c.end.Payload())
					return c.end
				}, func(ev event.Payload) { seen = append(seen, ev) })
				return out, seen
			}
			out, seen := run(true)
			f, ok := seen[len(seen)-1].(event.TurnFailed)
			if !ok || f.Kind != event.FailBudget || f.Error != want || out.Failed == nil || out.Failed.Kind != event.FailBudget || out.Failed.Error != want {
				t.Fatalf("a refused turn ended with %+v, outcome %+v; want failed, kind budget, %q", seen[len(seen)-1], out.Payload(), want)
			}
			// A refusal noted after its turn (a CLI's late call) is not the
			// next turn's.
			r.note(errors.New("late"))
			if out, seen := run(false); out.Payload() != c.end.Payload() || seen[len(seen)-1] != c.end.Payload() {
				t.Errorf("a turn with no refusal ended with %+v, outcome %+v; want it as the agent said", seen[len(seen)-1], out.Payload())
			}
		})
	}
}
