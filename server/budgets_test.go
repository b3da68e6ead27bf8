package server_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/stacktest/apitest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// TestBudgets: an admin sets a user's budget; a session over its live
// sessions cap is 429 naming the cap and how to raise it; a daily spend
// cap reached by a turn's first model call refuses its second (the turn
// ends with turn.failed, kind budget, and the message), and the next
// turn does not start (refused at once, without a model request); the
// user reads their budget and today's spend in GET /v1/me; raising the
// cap lets turns go on; bad caps are refused saying why; a user token
// may not set budgets; each change is audited.
func TestBudgets(t *testing.T) {
	e := newAPIEnv(t, apitest.WithSimHits)
	ctx := testbin.Context(t)
	alice := store.UserIDForToken(e.AliceID)

	if _, err := e.AliceC.SetBudget(ctx, "user", alice, wire.BudgetRequest{DailyUSD: 100}); !isStatus(err, http.StatusForbidden) {
		t.Fatalf("a user setting their own budget: %v, want 403", err)
	}
	for _, c := range []struct {
		req  wire.BudgetRequest
		want string
	}{
		{wire.BudgetRequest{DailyUSD: -1}, `"daily_usd" -1`},
		{wire.BudgetRequest{MaxSessions: -3}, `"max_sessions" -3`},
		{wire.BudgetRequest{}, "to remove the budget, DELETE it"},
	} {
		_, err := e.AdminC.SetBudget(ctx, "user", alice, c.req)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != 400 || !strings.Contains(strings.Join(ce.Details, " "), c.want) {
			t.Errorf("SetBudget(%+v) = %v, want 400 saying %q", c.req, err, c.want)
		}
	}
	if _, err := e.AdminC.SetBudget(ctx, "user", "usr-nobody", wire.BudgetRequest{DailyUSD: 1}); !isStatus(err, http.StatusNotFound) {
		t.Errorf("a budget for no user: %v, want 404", err)
	}
	if _, err := e.AdminC.SetBudget(ctx, "team", "nope", wire.BudgetRequest{DailyUSD: 1}); !isStatus(err, http.StatusNotFound) {
		t.Errorf("a budget for no team: %v, want 404", err)
	}

	// One live session at most.
	b, err := e.AdminC.SetBudget(ctx, "user", alice, wire.BudgetRequest{MaxSessions: 1})
	if err != nil || !b.Set || b.MaxSessions != 1 || b.DailyUSD != 0 {
		t.Fatalf("SetBudget: %+v, %v", b, err)
	}
	v := e.create(e.AliceC, "msg one")
	st := e.AliceC.Events(ctx, v.ID, client.StreamOptions{})
	defer st.Close()
	stacktest.ReadUntil(t, st, "turn t1 to end", stacktest.TurnEnded("t1"))
	_, err = e.AliceC.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: e.Repo}}, Prompt: "msg two"})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusTooManyRequests || ce.Code != server.CodeOverBudget ||
		!strings.Contains(ce.Message, "max_sessions 1") || !strings.Contains(ce.Message, "harvest user budget set "+alice+" --max-sessions") {
		t.Fatalf("a second session over a cap of 1: %v, want 429 over_budget naming the cap and how to raise it", err)
	}
	// Bob has no budget: not held to alice's. (His turn ends before the
	// model's requests are counted below: its request is not alice's.)
	bv := e.create(e.BobC, "msg bob")
	bst := e.BobC.Events(ctx, bv.ID, client.StreamOptions{})
	stacktest.ReadUntil(t, bst, "bob's turn t1 to end", stacktest.TurnEnded("t1"))
	bst.Close()

	// A day's spend: each model call is 100 tokens in, 10 out on
	// claude-sonnet-4-5: $0.00045. Turn t1 spent one; the first call of
	// the next turn reaches a cap of $0.0008.
	if _, err := e.AdminC.SetBudget(ctx, "user", alice, wire.BudgetRequest{DailyUSD: 0.0008, MaxSessions: 1}); err != nil {
		t.Fatal(err)
	}
	for len(e.SimHits) > 0 {
		<-e.SimHits
	}
	if _, err := e.AliceC.Send(ctx, v.ID, "budget task", ""); err != nil {
		t.Fatal(err)
	}
	seen := stacktest.ReadUntil(t, st, "turn t2 to end", stacktest.TurnEnded("t2"))
	failed, ok := seen[len(seen)-1].Data.(event.TurnFailed)
	if !ok || failed.Kind != event.FailBudget || !strings.Contains(failed.Error, "daily model budget of user "+alice+" is spent") ||
		!strings.Contains(failed.Error, "$0.0009 of $0.0008") || !strings.Contains(failed.Error, "--daily-usd") {
		t.Fatalf("turn t2 ended with %+v, want turn.failed kind budget saying the cap and how to raise it:%s", seen[len(seen)-1].Data, stacktest.Describe(seen))
	}
	if tools, _ := stacktest.OfType[event.ToolFinished](seen); len(tools) != 1 {
		t.Errorf("turn t2 ran %d tools, want the first call's one:%s", len(tools), stacktest.Describe(seen))
	}
	if n := len(e.SimHits); n != 1 {
		t.Errorf("the model got %d requests in turn t2, want 1 (the second refused before it left)", n)
	}
	<-e.SimHits

	// The next turn does not start: refused at once.
	if _, err := e.AliceC.Send(ctx, v.ID, "msg three", ""); err != nil {
		t.Fatal(err)
	}
	seen = stacktest.ReadUntil(t, st, "turn t3 to end", stacktest.TurnEnded("t3"))
	if f, ok := seen[len(seen)-1].Data.(event.TurnFailed); !ok || f.Kind != event.FailBudget || !strings.Contains(f.Error, "starts again at 00:00 UTC") {
		t.Fatalf("turn t3 ended with %+v, want turn.failed kind budget", seen[len(seen)-1].Data)
	}
	if n := len(e.SimHits); n != 0 {
		t.Errorf("a turn refused at its start made %d model requests", n)
	}

	me, err := e.AliceC.Me(ctx)
	if err != nil || len(me.Budgets) != 1 || me.Budgets[0].DailyUSD != 0.0008 || me.Today == nil ||
		me.Today.SpentUSD < 0.0008 || me.Today.LiveSessions != 1 || me.Today.Day == "" {
		t.Fatalf("GET /v1/me: %+v (today %+v), %v; want her budget and today's spend", me, me.Today, err)
	}

	// Raised: turns go on.
	if _, err := e.AdminC.SetBudget(ctx, "user", alice, wire.BudgetRequest{DailyUSD: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.AliceC.Send(ctx, v.ID, "msg four", ""); err != nil {
		t.Fatal(err)
	}
	seen = stacktest.ReadUntil(t, st, "turn t4 to end", stacktest.TurnEnded("t4"))
	if _, ok := seen[len(seen)-1].Data.(event.TurnFinished); !ok {
		t.Fatalf("turn t4 after the cap was raised:%s", stacktest.Describe(seen))
	}
	if got, err := e.AdminC.GetBudget(ctx, "user", alice); err != nil || got.Today.SpentUSD < 0.0009 || got.DailyUSD != 5 {
		t.Errorf("GetBudget after 3 model calls: %+v, %v", got, err)
	}

	// A team's budget holds its members, together.
	if _, err := e.AdminC.CreateTeam(ctx, "qa"); err != nil {
		t.Fatal(err)
	}
	if err := e.AdminC.AddTeamMember(ctx, "qa", alice); err != nil {
		t.Fatal(err)
	}
	if _, err := e.AdminC.SetBudget(ctx, "team", "qa", wire.BudgetRequest{DailyUSD: 0.0001}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.AliceC.Send(ctx, v.ID, "msg five", ""); err != nil {
		t.Fatal(err)
	}
	seen = stacktest.ReadUntil(t, st, "turn t5 to end", stacktest.TurnEnded("t5"))
	if f, ok := seen[len(seen)-1].Data.(event.TurnFailed); !ok || f.Kind != event.FailBudget || !strings.Contains(f.Error, "team qa (of user "+alice+")") ||
		!strings.Contains(f.Error, "harvest team budget set qa") {
		t.Fatalf("turn t5 ended with %+v, want the team's budget refusing", seen[len(seen)-1].Data)
	}
	if err := e.AdminC.DeleteBudget(ctx, "team", "qa"); err != nil {
		t.Fatal(err)
	}
	if err := e.AdminC.DeleteBudget(ctx, "team", "qa"); !isStatus(err, http.StatusNotFound) {
		t.Errorf("deleting a budget twice: %v, want 404", err)
	}

	for _, a := range []struct {
		action string
		ok     int
	}{{"budget.set", 4}, {"budget.delete", 1}} {
		l, err := e.AdminC.Audit(ctx, client.AuditOptions{Action: a.action})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, en := range l.Entries {
			if en.Result == "ok" {
				n++
				if en.User == "" || en.Target == "" {
					t.Errorf("%s entry without its user or target: %+v", a.action, en)
				}
			}
		}
		if n != a.ok {
			t.Errorf("%d %s entries with result ok, want %d", n, a.action, a.ok)
		}
	}
}

func isStatus(err error, status int) bool {
	var ce *client.Error
	return errors.As(err, &ce) && ce.Status == status
}
