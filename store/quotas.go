package store

import (
	"context"
	"fmt"
	"math"
	"time"
)

// # Budgets (quotas)
//
// A budget — a Quota, so as not to be taken for a store call's Budget
// (budget.go) — caps what one user, or one team's users together, may use:
// model spend per day (UTC) in US dollars, and sessions live at once
// (State.Live: pending to cancelling, not suspended or ended). A zero
// field is no cap. A user is held to their own budget and to the budget
// of every team they are in; the first one reached refuses.
//
// Spend is counted per user and day (AddSpend) by the model calls the
// session layer meters (package session: the model proxy's usage for an
// agent whose CLI runs in the box, the host client's for the builtin
// agent), priced by the server's price table. A team's spend on a day is
// the sum of its members' (as the team is now: a user who joins brings
// the day's spend along). Spend rows are kept; a day's row is one small
// row per user who spent that day.
//
// Budgets are the admin's (server /v1/users/{id}/budget,
// /v1/teams/{team}/budget; harvest user budget, harvest team budget),
// each change recorded in the audit log in its transaction (WithAudit).

// Budget scopes (Quota.Scope).
const (
	QuotaUser = "user"
	QuotaTeam = "team"
)

// Quota is a budget: it caps a user's or a team's use. Zero fields are no cap.
type Quota struct {
	// Scope is QuotaUser or QuotaTeam; Subject the user's id or the
	// team's name.
	Scope   string `json:"scope"`
	Subject string `json:"subject"`
	// DailyUSD caps the model spend of a day (UTC), in US dollars.
	DailyUSD float64 `json:"daily_usd"`
	// MaxSessions caps the sessions live at once.
	MaxSessions int       `json:"max_sessions"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// MaxDailyUSD bounds a daily cap: a typo of a few digits is refused
// rather than taken for no cap at all.
const MaxDailyUSD = 1e6

// MaxQuotaSessions bounds a cap on live sessions.
const MaxQuotaSessions = 100000

// Check says what is wrong with b's scope and caps, or nil.
func (b *Quota) Check() error {
	switch {
	case b.Scope != QuotaUser && b.Scope != QuotaTeam:
		return fmt.Errorf("budget scope %q: want %q or %q", b.Scope, QuotaUser, QuotaTeam)
	case b.Subject == "":
		return fmt.Errorf("a %s budget needs the %s it is for", b.Scope, b.Scope)
	case math.IsNaN(b.DailyUSD) || b.DailyUSD < 0 || b.DailyUSD > MaxDailyUSD:
		return fmt.Errorf("daily_usd %v: give dollars between 0 (no cap) and %v, like 25 or 2.50", b.DailyUSD, MaxDailyUSD)
	case b.MaxSessions < 0 || b.MaxSessions > MaxQuotaSessions:
		return fmt.Errorf("max_sessions %d: give a count between 0 (no cap) and %d", b.MaxSessions, MaxQuotaSessions)
	}
	return nil
}

// Day is the day (UTC) t falls on, as spend is kept: "2006-01-02".
func Day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// Use is what a user, or a team's users, use now: the day's spend and
// the sessions live.
type Use struct {
	SpentUSD     float64 `json:"spent_usd"`
	LiveSessions int     `json:"live_sessions"`
}

var _ Quotas = Store(nil)

// Quotas is the part of a Store that keeps budgets and spend.
type Quotas interface {
	// SetQuota stores b (replacing the subject's budget; a zero
	// UpdatedAt is now), with the context's audit entry (WithAudit). A
	// budget that fails Check is an error saying why; a user or team
	// that does not exist is ErrNotFound.
	SetQuota(ctx context.Context, b *Quota) error
	// GetQuota reads a subject's budget, or ErrNotFound.
	GetQuota(ctx context.Context, scope, subject string) (*Quota, error)
	// DeleteQuota removes a subject's budget (ErrNotFound when it has
	// none), with the context's audit entry.
	DeleteQuota(ctx context.Context, scope, subject string) error
	// QuotasOf lists the budgets a user is held to: their own, then
	// their teams', by team name.
	QuotasOf(ctx context.Context, user string) ([]*Quota, error)
	// AddSpend adds usd (>= 0) to user's spend on day (Day).
	AddSpend(ctx context.Context, user, day string, usd float64) error
	// UseOf is what a subject uses: its spend on day, and its sessions
	// live now (a team's: its members' together).
	UseOf(ctx context.Context, scope, subject, day string) (Use, error)
}
