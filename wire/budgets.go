package wire

import "time"

// Budget is a user's or a team's budget (GET /v1/users/{id}/budget,
// /v1/teams/{team}/budget) and what it holds now. Zero caps are no cap.
type Budget struct {
	// Scope is "user" or "team"; Subject the user's id or the team's name.
	Scope   string `json:"scope"`
	Subject string `json:"subject"`
	// Set: an admin set this budget; false, the subject has none (both
	// caps 0).
	Set bool `json:"set"`
	// DailyUSD caps the model spend of a day (UTC), in US dollars.
	DailyUSD float64 `json:"daily_usd"`
	// MaxSessions caps the sessions live at once (not suspended, stopped
	// or failed).
	MaxSessions int        `json:"max_sessions"`
	UpdatedAt   *time.Time `json:"updated_at,omitempty"`
	// Today is what the subject uses now (a team's: its members together).
	Today BudgetUse `json:"today"`
}

// BudgetUse is what a user or a team uses: the day's model spend (UTC)
// and the sessions live now.
type BudgetUse struct {
	// Day is the day (UTC) SpentUSD is of: "2006-01-02".
	Day          string  `json:"day"`
	SpentUSD     float64 `json:"spent_usd"`
	LiveSessions int     `json:"live_sessions"`
}

// BudgetRequest is the body of PUT /v1/users/{id}/budget and
// /v1/teams/{team}/budget: the budget, whole (a cap left out is none).
type BudgetRequest struct {
	DailyUSD    float64 `json:"daily_usd"`
	MaxSessions int     `json:"max_sessions"`
}
