package session

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/agent/claudecode"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
)

// quotaScript: "budget task" makes two model calls (a bash command that
// prints paid-once, then an answer), for the builtin agent (bash) and
// Claude Code (Bash); "msg ..." one. Each call is 100 tokens in and 10
// out: $0.00045 on claude-sonnet-4-5.
const quotaScript = `
rules:
  - name: title
    when: {api: anthropic, system: "Generate a concise, sentence-case title"}
    reply: {text: '{"title": "Budget"}', usage: {input_tokens: 100, output_tokens: 10}}
  - name: msg
    when: {last_user_regexp: "^msg"}
    reply: {text: "ok", usage: {input_tokens: 100, output_tokens: 10}}
  - name: second
    when: {tool_result: "paid-once"}
    reply: {text: "the second call of a budgeted turn", usage: {input_tokens: 100, output_tokens: 10}}
  - name: first-builtin
    when: {last_user: "budget task", tools: [bash]}
    reply:
      tool_calls: [{name: bash, input: {command: "echo paid-once"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: first-claude
    when: {last_user: "budget task", tools: [Bash]}
    reply:
      tool_calls: [{name: Bash, input: {command: "echo paid-once", description: "Pay once"}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

// TestDailyBudget: a user's daily spend cap reached by a turn's model
// call refuses the next call, whichever way the agent reaches the model
// (the builtin's host client, Claude Code through the model proxy): the
// turn ends failed, kind budget, saying the cap and how to raise it; no
// turn starts while the cap is reached; the next day (UTC) it starts
// again. The spend is the user's, in the store.
func TestDailyBudget(t *testing.T) {
	for _, kind := range []string{AgentBuiltin, claudecode.Kind.Name} {
		t.Run(kind, func(t *testing.T) { testDailyBudget(t, kind) })
	}
}

func testDailyBudget(t *testing.T, kind string) {
	if kind == claudecode.Kind.Name {
		testbin.Claude(t)
	}
	e := newEnv(t, withScript(quotaScript))
	ctx := testbin.Context(t)
	if err := e.st.CreateUser(ctx, &store.User{ID: "usr-ann", Name: "Ann", Role: store.RoleMember}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.SetQuota(ctx, &store.Quota{Scope: store.QuotaUser, Subject: "usr-ann", DailyUSD: 0.0004}); err != nil {
		t.Fatal(err)
	}
	v := e.create("budget task", func(r *CreateRequest) {
		r.Agent, r.User = kind, "usr-ann"
		r.Limits.MaxLifetime = 72 * time.Hour
	})
	w := e.watch(v.ID)
	f := stacktest.Typed[event.TurnFailed](w, "t1", func(event.TurnFailed) bool { return true })
	if f.Kind != event.FailBudget || !strings.Contains(f.Error, "daily model budget of user usr-ann is spent") ||
		!strings.Contains(f.Error, "of $0.0004") || !strings.Contains(f.Error, "harvest user budget set usr-ann --daily-usd") {
		t.Fatalf("turn t1 failed with %+v, want kind budget saying the cap and how to raise it", f)
	}
	day := store.Day(e.Clock.Now())
	use, err := e.st.UseOf(ctx, store.QuotaUser, "usr-ann", day)
	if err != nil || use.SpentUSD < 0.00045 {
		t.Fatalf("the user's spend of %s: %+v, %v; want the admitted call's", day, use, err)
	}
	calls := len(e.Sim.Load().Requests())
	w.State(store.StateIdle)

	// The next turn does not start: no model request.
	e.send(v.ID, "msg again", "")
	if f := stacktest.Typed[event.TurnFailed](w, "t2", func(event.TurnFailed) bool { return true }); f.Kind != event.FailBudget ||
		!strings.Contains(f.Error, "starts again at 00:00 UTC") {
		t.Fatalf("turn t2 failed with %+v, want kind budget", f)
	}
	if n := len(e.Sim.Load().Requests()); n != calls {
		t.Errorf("a turn refused at its start made %d model requests", n-calls)
	}
	// Another user is not held to Ann's budget.
	if _, err := e.m.Create(ctx, "owner-2", CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Prompt: "msg bob", Agent: kind}); err != nil {
		t.Fatal(err)
	}

	// The next day (UTC): turns go on.
	e.Clock.Advance(24 * time.Hour)
	e.send(v.ID, "msg next day", "")
	if f := w.Finished("t3"); f.Result != "ok" {
		t.Fatalf("turn t3 the next day finished with %+v", f)
	}
}

// TestSessionCap: a user at a live-session cap of theirs, or of a team's,
// gets a *BudgetError (ErrOverBudget) from Create naming the cap, and
// nothing is stored; a suspended session makes room, and its resume is
// refused while the cap is reached.
func TestSessionCap(t *testing.T) {
	e := newEnv(t)
	ctx := testbin.Context(t)
	for _, u := range []string{"usr-ann", "usr-ben"} {
		if err := e.st.CreateUser(ctx, &store.User{ID: u, Name: u, Role: store.RoleMember}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.st.CreateTeam(ctx, &store.Team{Name: "qa"}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"usr-ann", "usr-ben"} {
		if err := e.st.AddTeamMember(ctx, "qa", u); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.st.SetQuota(ctx, &store.Quota{Scope: store.QuotaUser, Subject: "usr-ann", MaxSessions: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.SetQuota(ctx, &store.Quota{Scope: store.QuotaTeam, Subject: "qa", MaxSessions: 2}); err != nil {
		t.Fatal(err)
	}
	as := func(user string) func(*CreateRequest) { return func(r *CreateRequest) { r.User = user } }
	create := func(user string) (*View, error) {
		return e.m.Create(ctx, "owner-1", CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Prompt: "msg hi", User: user})
	}
	first := e.create("msg one", as("usr-ann"))
	_, err := create("usr-ann")
	var be *BudgetError
	if !errors.As(err, &be) || !errors.Is(err, ErrOverBudget) || be.Scope != store.QuotaUser || be.Cap != 1 ||
		!strings.Contains(err.Error(), "max_sessions 1") || !strings.Contains(err.Error(), "harvest user budget set usr-ann --max-sessions") {
		t.Fatalf("Ann's second session: %v, want her cap of 1", err)
	}
	e.create("msg two", as("usr-ben"))
	_, err = create("usr-ben")
	if !errors.As(err, &be) || be.Scope != store.QuotaTeam || be.Subject != "qa" || !strings.Contains(err.Error(), "team qa (of user usr-ben) has 2 live sessions") {
		t.Fatalf("Ben's second session, the team's third: %v, want the team's cap of 2", err)
	}
	if ss, err := e.st.ListSessions(ctx, store.SessionFilter{}); err != nil || len(ss) != 2 {
		t.Fatalf("%d sessions stored, %v; want the two admitted", len(ss), err)
	}
	// Ann's first session is suspended: not live, so there is room for
	// her again; but resuming it would make two.
	w := e.watch(first.ID)
	w.Finished("t1")
	w.State(store.StateIdle)
	e.Clock.Advance(DefaultIdleTimeout)
	w.State(store.StateSuspended)
	if _, err := create("usr-ann"); err != nil {
		t.Fatalf("Ann's session while her first is suspended: %v", err)
	}
	_, err = e.m.Send(ctx, "owner-1", first.ID, "msg resume", "")
	if !errors.As(err, &be) || be.Subject != "usr-ann" || !strings.Contains(err.Error(), "resuming session "+first.ID) {
		t.Fatalf("resuming Ann's suspended session at her cap: %v, want her cap refusing", err)
	}
	if q, err := e.st.Messages(ctx, first.ID, store.MessageQueued); err != nil || len(q) != 0 {
		t.Errorf("the refused message was stored: %d queued, %v", len(q), err)
	}
}

// TestUnpricedModelUnderCap: a daily cap cannot be held on a model with
// no price (its calls would cost nothing): a turn of a capped user on one
// is refused at its start, saying so; a user with no cap runs it.
func TestUnpricedModelUnderCap(t *testing.T) {
	e := newEnv(t)
	ctx := testbin.Context(t)
	if err := e.st.CreateUser(ctx, &store.User{ID: "usr-ann", Name: "Ann", Role: store.RoleMember}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.SetQuota(ctx, &store.Quota{Scope: store.QuotaUser, Subject: "usr-ann", DailyUSD: 5}); err != nil {
		t.Fatal(err)
	}
	const model = "anthropic/claude-unpriced-test-1"
	v := e.create("msg one", func(r *CreateRequest) { r.User, r.Model = "usr-ann", model })
	w := e.watch(v.ID)
	if f := stacktest.Typed[event.TurnFailed](w, "t1", func(event.TurnFailed) bool { return true }); f.Kind != event.FailBudget ||
		!strings.Contains(f.Error, "no price for model "+model) || !strings.Contains(f.Error, "user usr-ann ($5.00)") {
		t.Fatalf("a capped user's turn on an unpriced model failed with %+v, want kind budget saying why", f)
	}
	other := e.create("msg two", func(r *CreateRequest) { r.Model = model })
	if f := e.watch(other.ID).Finished("t1"); f.Result != "ok" {
		t.Fatalf("a turn with no budget on an unpriced model finished with %+v", f)
	}
}
