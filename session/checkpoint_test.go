package session

import (
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/sim"
	"github.com/harvest-dev/harvest/store"
)

// checkpointScript: a turn of three steps, the second waiting for "go".
const checkpointScript = `
rules:
  - name: one
    when: {api: anthropic, last_user: "Checkpoint task", turn: 1}
    reply:
      tool_calls: [{name: bash, input: {command: "echo step-one-output"}}]
      usage: {input_tokens: 1000, output_tokens: 10}
  - name: two
    when: {api: anthropic, last_user: "Checkpoint task", turn: 2}
    reply:
      tool_calls: [{name: bash, input: {command: "until [ -e go ]; do sleep 0.02; done; echo released"}}]
      usage: {input_tokens: 2000, output_tokens: 20}
  - name: three
    when: {api: anthropic, last_user: "Checkpoint task", turn: 3}
    reply: {text: "Checkpointed.", usage: {input_tokens: 3000, output_tokens: 30}}
`

// After every step the session's usage, cost and (builtin agent) the
// conversation so far are in the store, so that a crash mid-turn loses
// neither the spending nor what the agent did; the end of the turn adds
// only what is left, never a step twice.
func TestStepCheckpoint(t *testing.T) {
	e := newEnv(t)
	s, err := sim.ParseScript("checkpoint.yaml", []byte(checkpointScript))
	if err != nil {
		t.Fatal(err)
	}
	e.sim.Store(sim.New(s))
	ctx := ctxT(t)
	v := e.create("Checkpoint task")
	w := e.watch(v.ID)
	step1 := typed[event.StepFinished](w, "t1", func(p event.StepFinished) bool { return p.Step == 1 })
	typed[event.ToolStarted](w, "t1", func(p event.ToolStarted) bool { return strings.Contains(string(p.Input), "until") })

	// Mid-turn: step 1 is stored.
	got, err := e.st.GetSession(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Usage.InputTokens != 1000 || got.Usage.OutputTokens != 10 || got.CostUSD != step1.CostUSD || got.CostUSD <= 0 {
		t.Errorf("stored mid-turn: usage %+v, cost %v; want step 1's (1000 in, 10 out, $%v)", got.Usage, got.CostUSD, step1.CostUSD)
	}
	for _, want := range []string{"Checkpoint task", "echo step-one-output", `step-one-output\n[exit code 0]`} {
		if !strings.Contains(string(got.AgentState), want) {
			t.Errorf("the stored conversation lacks %q mid-turn:\n%.2000s", want, got.AgentState)
		}
	}

	release(t, v)
	f := w.finished("t1")
	w.state(store.StateIdle)
	got, err = e.st.GetSession(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Usage.InputTokens != 6000 || got.Usage.OutputTokens != 60 || got.Usage != f.Usage {
		t.Errorf("stored after the turn: usage %+v; want the turn's %+v, 6000 in and 60 out (each step once)", got.Usage, f.Usage)
	}
	if d := got.CostUSD - f.CostUSD; d > 1e-9 || d < -1e-9 {
		t.Errorf("stored cost %v, the turn's %v", got.CostUSD, f.CostUSD)
	}
	if !strings.Contains(string(got.AgentState), "Checkpointed.") {
		t.Errorf("the stored conversation lacks the answer")
	}
}
