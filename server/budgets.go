package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// # Budgets
//
// An admin caps what a user, or a team's users together, may use: model
// spend per day (UTC, in US dollars) and sessions live at once
// (store/quotas.go; package session enforces them). Each change is
// audited in its transaction: budget.set, budget.delete. A user reads
// the budgets they are held to, and what they use today, in GET /v1/me.
//
//	GET    /v1/users/{id}/budget     → Budget (caps 0, set false: none)
//	PUT    /v1/users/{id}/budget     BudgetRequest → Budget
//	DELETE /v1/users/{id}/budget     → 204
//	GET    /v1/teams/{team}/budget   → Budget
//	PUT    /v1/teams/{team}/budget   BudgetRequest → Budget
//	DELETE /v1/teams/{team}/budget   → 204
//
// A session refused for a live-session cap is 429 over_budget (POST
// /v1/sessions); a turn stopped by the day's spend cap ends with
// turn.failed, kind budget, in the session's events.

// budgetSubject is the scope and subject of a budget route: {id} a user
// that exists, or {team} a team's name.
func (s *Server) budgetSubject(r *http.Request) (scope, subject string, e *apiError) {
	if r.PathValue("team") != "" {
		name, e := teamName(r)
		return store.QuotaTeam, name, e
	}
	u, e := s.user(r, r.PathValue("id"))
	if e != nil {
		return "", "", e
	}
	return store.QuotaUser, u.ID, nil
}

// budgetView is a subject's budget (q nil: none) with what it uses now.
func (s *Server) budgetView(ctx context.Context, scope, subject string, q *store.Quota) (*wire.Budget, error) {
	day := store.Day(time.Now())
	use, err := s.cfg.Store.UseOf(ctx, scope, subject, day)
	if err != nil {
		return nil, err
	}
	b := &wire.Budget{Scope: scope, Subject: subject, Today: wire.BudgetUse{Day: day, SpentUSD: use.SpentUSD, LiveSessions: use.LiveSessions}}
	if q != nil {
		t := q.UpdatedAt
		b.Set, b.DailyUSD, b.MaxSessions, b.UpdatedAt = true, q.DailyUSD, q.MaxSessions, &t
	}
	return b, nil
}

// budgetError maps a store error about a subject's budget.
func budgetError(err error, scope, subject string) *apiError {
	if errors.Is(err, store.ErrNotFound) {
		where := "GET /v1/users"
		if scope == store.QuotaTeam {
			where = "GET /v1/teams"
		}
		return errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("%s: see %s", err.Error(), where))
	}
	return fromManager(err)
}

func (s *Server) getBudget(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	scope, subject, e := s.budgetSubject(r)
	if e != nil {
		return e
	}
	q, err := s.cfg.Store.GetQuota(r.Context(), scope, subject)
	if errors.Is(err, store.ErrNotFound) {
		q, err = nil, nil
	}
	if err != nil {
		return fromManager(err)
	}
	b, err := s.budgetView(r.Context(), scope, subject, q)
	if err != nil {
		return fromManager(err)
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

// checkBudget lists what is wrong with a budget's caps.
func checkBudget(req wire.BudgetRequest) []string {
	var p []string
	if math.IsNaN(req.DailyUSD) || req.DailyUSD < 0 || req.DailyUSD > store.MaxDailyUSD {
		p = append(p, fmt.Sprintf(`"daily_usd" %v: give US dollars a day between 0 (no cap) and %v, like 25 or 2.50`, req.DailyUSD, store.MaxDailyUSD))
	}
	if req.MaxSessions < 0 || req.MaxSessions > store.MaxQuotaSessions {
		p = append(p, fmt.Sprintf(`"max_sessions" %d: give a number of sessions between 0 (no cap) and %d`, req.MaxSessions, store.MaxQuotaSessions))
	}
	if len(p) == 0 && req.DailyUSD == 0 && req.MaxSessions == 0 {
		p = append(p, `give "daily_usd", "max_sessions" or both above 0; to remove the budget, DELETE it`)
	}
	return p
}

func (s *Server) putBudget(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	b, e := readBody(w, r)
	if e != nil {
		return e
	}
	scope, subject, e := s.budgetSubject(r)
	if e != nil {
		return e
	}
	if a := auditOf(r); a != nil {
		a.e.Target = scope + ":" + subject
	}
	var req wire.BudgetRequest
	if e := decodeBody(r.Header.Get("Content-Type"), b, &req, true); e != nil {
		return e
	}
	if p := checkBudget(req); len(p) > 0 {
		return invalid(p)
	}
	if a := auditOf(r); a != nil {
		a.e.Detail = mustJSON(req)
	}
	q := &store.Quota{Scope: scope, Subject: subject, DailyUSD: req.DailyUSD, MaxSessions: req.MaxSessions, UpdatedAt: time.Now().UTC()}
	if err := s.cfg.Store.SetQuota(r.Context(), q); err != nil {
		return budgetError(err, scope, subject)
	}
	v, err := s.budgetView(r.Context(), scope, subject, q)
	if err != nil {
		return fromManager(err)
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (s *Server) deleteBudget(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noBody(w, r); e != nil {
		return e
	}
	scope, subject, e := s.budgetSubject(r)
	if e != nil {
		return e
	}
	if a := auditOf(r); a != nil {
		a.e.Target = scope + ":" + subject
	}
	if err := s.cfg.Store.DeleteQuota(r.Context(), scope, subject); err != nil {
		return budgetError(err, scope, subject)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// myBudgets fills a user's budgets and what they use today into out
// (GET /v1/me).
func (s *Server) myBudgets(ctx context.Context, user string, out *wire.Me) error {
	qs, err := s.cfg.Store.QuotasOf(ctx, user)
	if err != nil {
		return err
	}
	for _, q := range qs {
		b, err := s.budgetView(ctx, q.Scope, q.Subject, q)
		if err != nil {
			return err
		}
		out.Budgets = append(out.Budgets, b)
	}
	if len(qs) > 0 && qs[0].Scope == store.QuotaUser {
		out.Today = &out.Budgets[0].Today
		return nil
	}
	b, err := s.budgetView(ctx, store.QuotaUser, user, nil)
	if err != nil {
		return err
	}
	out.Today = &b.Today
	return nil
}
