package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/harvest-dev/harvest/wire"
)

// budgetPath is the budget route of a user ("user") or a team ("team").
func budgetPath(scope, subject string) string {
	if scope == "team" {
		return "/v1/teams/" + url.PathEscape(subject) + "/budget"
	}
	return "/v1/users/" + url.PathEscape(subject) + "/budget"
}

// GetBudget reads a user's or a team's budget and what it uses today
// (admin); scope is "user" or "team".
func (c *Client) GetBudget(ctx context.Context, scope, subject string) (*wire.Budget, error) {
	var b wire.Budget
	return &b, c.request(ctx, http.MethodGet, budgetPath(scope, subject), nil, nil, &b)
}

// SetBudget sets a user's or a team's budget, whole (admin).
func (c *Client) SetBudget(ctx context.Context, scope, subject string, req wire.BudgetRequest) (*wire.Budget, error) {
	var b wire.Budget
	return &b, c.request(ctx, http.MethodPut, budgetPath(scope, subject), nil, req, &b)
}

// DeleteBudget removes a user's or a team's budget (admin).
func (c *Client) DeleteBudget(ctx context.Context, scope, subject string) error {
	return c.request(ctx, http.MethodDelete, budgetPath(scope, subject), nil, nil, nil)
}
