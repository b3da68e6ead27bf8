package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/harvest-dev/harvest/agent/agents"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/store"
)

// Budgets: a user is held to their own budget and to each of their
// teams' (store.Quota): model spend per day (UTC) and sessions live at
// once. The session layer enforces both where they cannot be got round:
//
//   - Create refuses a session of a user whose live sessions are at a
//     cap (a *BudgetError; the API's 429), before anything is stored, and
//     Send a message that would resume a suspended one (not stored);
//   - every model call of a session's agent is admitted by the session's
//     payer first (agents.Payer: the model proxy for a CLI in the box,
//     the host client for the builtin agent) and refused once the day's
//     spend of the user, or of one of their teams, reached its cap; the
//     turn then ends failed, kind budget, with the refusal's message;
//   - a turn does not start while the day's spend is at a cap: its
//     message is taken by a turn that fails at once the same way, so the
//     person who sent it hears why (the API's events, GitHub's reply).
//
// The payer records each call's cost as the user's spend of the day
// (store.AddSpend) before the agent sees the end of the response, so the
// agent's next call finds it counted. Calls in flight together can go
// over a cap by what they cost, as the model proxy's session budget can;
// two sessions created at once can both pass a session cap that has room
// for one. A session with no user (one made before users existed) has no
// budget.

// ErrOverBudget: a user's or a team's budget refuses the request. Wrapped
// by *BudgetError, which says which cap and who may raise it; the API
// answers 429.
var ErrOverBudget = errors.New("over budget")

// BudgetError is a request a budget refuses.
type BudgetError struct {
	// Scope and Subject are whose budget: store.QuotaUser and the user's
	// id, or store.QuotaTeam and the team's name. User is the user the
	// request was for.
	Scope, Subject, User string
	// Spend: the day's spend cap was reached (Cap and Used in dollars);
	// else the live-session cap (Cap and Used in sessions).
	Spend     bool
	Cap, Used float64
	// Unpriced, when set, is the session's model, which has no price: a
	// daily cap cannot be held on it (Cap is the cap).
	Unpriced string
}

func (e *BudgetError) Error() string {
	who := "user " + e.Subject
	set := "harvest user budget set " + e.Subject
	if e.Scope == store.QuotaTeam {
		who = "team " + e.Subject + " (of user " + e.User + ")"
		set = "harvest team budget set " + e.Subject
	}
	if e.Unpriced != "" {
		return fmt.Sprintf("Harvest has no price for model %s, so the daily model budget of %s (%s) cannot be held; use a priced model, or ask an admin to remove the daily cap (%s --daily-usd 0 with --max-sessions, or harvest %s budget clear %s)",
			e.Unpriced, who, dollars(e.Cap), set, e.Scope, e.Subject)
	}
	if e.Spend {
		return fmt.Sprintf("the daily model budget of %s is spent: %s of %s today (UTC); it starts again at 00:00 UTC, or an admin can raise it (%s --daily-usd N)",
			who, dollars(e.Used), dollars(e.Cap), set)
	}
	return fmt.Sprintf("%s has %d live sessions, the most its budget allows (max_sessions %d); stop or delete one (harvest session stop ID), or ask an admin to raise it (%s --max-sessions N)",
		who, int(e.Used), int(e.Cap), set)
}

func (e *BudgetError) Unwrap() error { return ErrOverBudget }

func dollars(v float64) string {
	if v >= 1 || v == 0 {
		return fmt.Sprintf("$%.2f", v)
	}
	return "$" + strconv.FormatFloat(v, 'f', 4, 64)
}

// overBudget returns a *BudgetError for the first of user's budgets
// whose cap is reached: spend (the day's, at now) or live sessions. nil:
// none is, or user is "".
func overBudget(ctx context.Context, st store.Store, user string, now time.Time, spend bool) error {
	if user == "" {
		return nil
	}
	qs, err := st.QuotasOf(ctx, user)
	if err != nil {
		return fmt.Errorf("reading the budgets of user %s: %w", user, err)
	}
	day := store.Day(now)
	for _, q := range qs {
		if (spend && q.DailyUSD <= 0) || (!spend && q.MaxSessions <= 0) {
			continue
		}
		use, err := st.UseOf(ctx, q.Scope, q.Subject, day)
		if err != nil {
			return fmt.Errorf("reading what %s %s uses: %w", q.Scope, q.Subject, err)
		}
		e := &BudgetError{Scope: q.Scope, Subject: q.Subject, User: user, Spend: spend}
		switch {
		case spend && use.SpentUSD >= q.DailyUSD:
			e.Cap, e.Used = q.DailyUSD, use.SpentUSD
			return e
		case !spend && use.LiveSessions >= q.MaxSessions:
			e.Cap, e.Used = float64(q.MaxSessions), float64(use.LiveSessions)
			return e
		}
	}
	return nil
}

// unpricedCap is a *BudgetError when user has a daily cap and model
// (Harvest's "endpoint/model") has no price in prices: its calls would
// cost nothing, and the cap would never be reached.
func unpricedCap(ctx context.Context, st store.Store, user, model string, prices *llm.PriceTable) error {
	if user == "" {
		return nil
	}
	_, id, err := llm.ParseModel(model)
	if err != nil {
		return nil // the agent says what is wrong with it
	}
	if prices == nil {
		prices = llm.DefaultPrices
	}
	if _, ok := prices.Lookup(id); ok {
		return nil
	}
	qs, err := st.QuotasOf(ctx, user)
	if err != nil {
		return fmt.Errorf("reading the budgets of user %s: %w", user, err)
	}
	for _, q := range qs {
		if q.DailyUSD > 0 {
			return &BudgetError{Scope: q.Scope, Subject: q.Subject, User: user, Spend: true, Cap: q.DailyUSD, Unpriced: model}
		}
	}
	return nil
}

// payer holds a session's model calls to its user's daily budgets
// (agents.Payer).
type payer struct {
	st    store.Store
	clock Clock
	user  string
	log   *slog.Logger
}

var _ agents.Payer = (*payer)(nil)

// Admit refuses a call once the day's spend of the user, or of one of
// their teams, reached its cap. A budget that cannot be read refuses
// too: the store is what a budget is kept in, and a call let through
// unchecked is one a cap did not hold.
func (p *payer) Admit(ctx context.Context) error {
	return overBudget(ctx, p.st, p.user, p.clock.Now(), true)
}

// Pay adds usd to the user's spend of the day; a failure is logged (the
// call was made: it cannot be taken back).
func (p *payer) Pay(ctx context.Context, usd float64) {
	if err := p.st.AddSpend(ctx, p.user, store.Day(p.clock.Now()), usd); err != nil {
		p.log.Error("recording a model call's cost in the user's daily spend", "user", p.user, "usd", usd, "err", err)
	}
}
