package session

import (
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
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

// After every step of the builtin agent its conversation so far is in the
// store, so that a crash mid-turn does not lose what the agent did (the
// crash itself: TestCrashRecovery); the turn's usage is charged once, at
// its end.
func TestStepCheckpoint(t *testing.T) {
	e := newEnv(t)
	s, err := sim.ParseScript("checkpoint.yaml", []byte(checkpointScript))
	if err != nil {
		t.Fatal(err)
	}
	e.Sim.Store(sim.New(s))
	ctx := testbin.Context(t)
	v := e.create("Checkpoint task")
	w := e.watch(v.ID)
	stacktest.Typed[event.ToolStarted](w, "t1", func(p event.ToolStarted) bool { return strings.Contains(string(p.Input), "until") })

	// Mid-turn: step 1 is stored.
	got, err := e.st.GetSession(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Checkpoint task", "echo step-one-output", `step-one-output\n[exit code 0]`} {
		if !strings.Contains(string(got.AgentState), want) {
			t.Errorf("the stored conversation lacks %q mid-turn:\n%.2000s", want, got.AgentState)
		}
	}

	release(t, v)
	f := w.Finished("t1")
	w.State(store.StateIdle)
	got, err = e.st.GetSession(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Usage.InputTokens != 6000 || got.Usage.OutputTokens != 60 || got.Usage != f.Usage || got.CostUSD != f.CostUSD {
		t.Errorf("stored after the turn: usage %+v, $%v; want the turn's %+v, $%v (6000 in, 60 out)", got.Usage, got.CostUSD, f.Usage, f.CostUSD)
	}
	if !strings.Contains(string(got.AgentState), "Checkpointed.") {
		t.Errorf("the stored conversation lacks the answer")
	}
}
