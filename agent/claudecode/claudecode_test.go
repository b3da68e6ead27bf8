package claudecode

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/agenttest"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/sim"
)

// usageOf is a rule's scripted usage as an event.Usage.
func usageOf(t *testing.T, e *env, rule string) event.Usage {
	t.Helper()
	var r *sim.Rule
	for _, x := range e.simScript().Rules {
		if x.Name == rule {
			r = x
		}
	}
	if r == nil {
		t.Fatalf("no rule %s", rule)
	}
	v := func(p *int) int64 {
		if p == nil {
			return 0
		}
		return int64(*p)
	}
	u := r.Reply.Usage
	return event.Usage{InputTokens: v(u.InputTokens), OutputTokens: v(u.OutputTokens), CacheReadTokens: v(u.CacheReadInputTokens), CacheWriteTokens: v(u.CacheCreationInputTokens)}
}

func (e *env) simScript() *sim.Script {
	s, err := sim.LoadScript(filepath.Join("testdata", "script.yaml"))
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// sonnetCost is what Claude Code 2.1.197 charges for claude-sonnet-4-5
// (per million tokens: $3 input, $15 output, $0.30 cache read, $3.75 cache
// write).
func sonnetCost(u event.Usage) float64 {
	return (float64(u.InputTokens)*3 + float64(u.OutputTokens)*15 + float64(u.CacheReadTokens)*0.3 + float64(u.CacheWriteTokens)*3.75) / 1e6
}

// TestScriptedTaskAndFollowUp: the scripted task (read, edit, run a command,
// answer) through the real CLI in a box gives the builtin agent's kinds of
// events in order, with the script's exact usage per step and per turn and
// a cost; the file really changes; Harvest's instructions reach the model
// and its settings' hooks run; a follow-up turn on the same process carries
// the first exchange.
func TestScriptedTaskAndFollowUp(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, url := e.box(ctx)
	cfg := e.config(sb, url)
	cfg.Instructions = "HARVEST-INSTRUCTIONS: commit nothing; the session branch is harvest/test."
	cfg.Settings = []byte(`{"hooks":{"PostToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"echo bash-ran >> /tmp/harvest-hook.log"}]}]}}`)
	a := e.newAgent(ctx, cfg, nil)

	start := time.Now()
	out, evs := turnOf(ctx, t, a, "Task one: fix the greeting in hello.txt and show it.")
	t.Logf("task one: %s in %s", types(evs), time.Since(start))
	fin := finished(t, out, evs)

	// The kinds, in order (deltas aside).
	var kinds []string
	for _, p := range evs {
		switch p.(type) {
		case event.AssistantDelta, event.ThinkingDelta, event.ToolInputDelta:
			continue
		}
		kinds = append(kinds, string(p.EventType()))
	}
	want := []string{
		"turn.started",
		"assistant.thinking", "assistant.message", "tool.started", "tool.finished", "step.finished", // Read
		"tool.started", "tool.finished", "step.finished", // Edit
		"tool.started", "tool.finished", "step.finished", // Bash
		"assistant.message", "step.finished", // the answer
		"turn.finished",
	}
	if strings.Join(kinds, " ") != strings.Join(want, " ") {
		t.Errorf("events\n %s\nwant\n %s", strings.Join(kinds, " "), strings.Join(want, " "))
	}
	var deltas strings.Builder
	var tools []event.ToolStarted
	var results []event.ToolFinished
	var steps []event.StepFinished
	for _, p := range evs {
		switch p := p.(type) {
		case event.AssistantDelta:
			deltas.WriteString(p.Text)
		case event.ToolStarted:
			tools = append(tools, p)
		case event.ToolFinished:
			results = append(results, p)
		case event.StepFinished:
			steps = append(steps, p)
		}
	}
	if !strings.Contains(deltas.String(), "hello, world") {
		t.Errorf("assistant deltas %q lack the answer", deltas.String())
	}
	wantTools := []struct{ name, summary, output string }{
		{"Read", "Read: hello.txt", "helo, world"},
		{"Edit", "Edit: /workspace/repo/hello.txt", "updated"},
		{"Bash", "Bash: cat hello.txt && wc -l < hello.txt", "hello, world\n1"},
	}
	if len(tools) != 3 || len(results) != 3 {
		t.Fatalf("%d tool calls, %d results; want 3", len(tools), len(results))
	}
	for i, w := range wantTools {
		if tools[i].Tool != w.name || tools[i].Summary != w.summary || tools[i].CallID == "" || len(tools[i].Input) == 0 {
			t.Errorf("tool call %d: %+v, want %s %q", i, tools[i], w.name, w.summary)
		}
		if r := results[i]; r.CallID != tools[i].CallID || r.Tool != w.name || r.IsError || !strings.Contains(r.Output, w.output) {
			t.Errorf("tool result %d: %+v, want %s's output with %q", i, r, w.name, w.output)
		}
	}
	var sum event.Usage
	for i, rule := range []string{"one-read", "one-edit", "one-run", "one-answer"} {
		u := usageOf(t, e, rule)
		sum = sum.Add(u)
		if i < len(steps) && (steps[i].Usage != u || steps[i].Step != i+1 || steps[i].Model != testModel || math.Abs(steps[i].CostUSD-sonnetCost(u)) > 1e-9) {
			t.Errorf("step %d: %+v, want step %d of %s with the usage of rule %s %+v costing $%.6f", i+1, steps[i], i+1, testModel, rule, u, sonnetCost(u))
		}
	}
	if len(steps) != 4 {
		t.Errorf("%d steps, want 4", len(steps))
	}
	if fin.Usage != sum {
		t.Errorf("turn usage %+v, want the script's sum %+v", fin.Usage, sum)
	}
	if want := sonnetCost(sum); math.Abs(fin.CostUSD-want) > 1e-9 {
		t.Errorf("turn cost $%.6f, want $%.6f", fin.CostUSD, want)
	}
	if fin.Result != `Fixed: hello.txt now says "hello, world".` || fin.Steps != 4 || fin.StopReason != "end_turn" {
		t.Errorf("turn.finished %+v", fin)
	}

	// What really happened in the box.
	if b, err := os.ReadFile(filepath.Join(e.ws, "hello.txt")); err != nil || string(b) != "hello, world\n" {
		t.Errorf("hello.txt = %q (%v), want the edit made", b, err)
	}
	if b, err := sb.ReadFile(ctx, "/tmp/harvest-hook.log"); err != nil || string(b) != "bash-ran\n" {
		t.Errorf("the settings' PostToolUse hook log: %q (%v), want one Bash call", b, err)
	}
	first := e.request("one-read")
	system, _ := conversation(t, first)
	if !strings.Contains(system, "HARVEST-INSTRUCTIONS") {
		t.Errorf("the instructions are not in the system prompt the model got")
	}
	if got := first.Header.Get("x-api-key"); got != testKey {
		t.Errorf("the CLI sent key %q, want the session token", got)
	}

	// A follow-up on the same process sees the first exchange.
	pid := a.proc.p.PID()
	out, evs = turnOf(ctx, t, a, "Task two: what did you change?")
	fin = finished(t, out, evs)
	if fin.Result != "I changed helo to hello in hello.txt." {
		t.Errorf("follow-up result %q", fin.Result)
	}
	if want := sonnetCost(usageOf(t, e, "two")); math.Abs(fin.CostUSD-want) > 1e-9 {
		t.Errorf("follow-up cost $%.6f, want only its own $%.6f (Claude Code reports a running total)", fin.CostUSD, want)
	}
	if a.proc == nil || a.proc.p.PID() != pid {
		t.Errorf("the follow-up ran in another process")
	}
	_, msgs := conversation(t, e.request("two"))
	for _, s := range []string{"Task one: fix the greeting", "helo, world", `Fixed: hello.txt now says \"hello, world\".`, "Task two"} {
		if !strings.Contains(msgs, s) {
			t.Errorf("the follow-up's request lacks %q from the conversation", s)
		}
	}
}

// TestCompaction: /compact makes Claude Code summarise; its compact boundary
// is a compaction event, and the next request carries the summary.
func TestCompaction(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, url := e.box(ctx)
	a := e.newAgent(ctx, e.config(sb, url), nil)
	out, evs := turnOf(ctx, t, a, "Task one: fix the greeting in hello.txt and show it.")
	finished(t, out, evs)
	out, evs = turnOf(ctx, t, a, "/compact")
	finished(t, out, evs)
	var c *event.Compaction
	for _, p := range evs {
		if x, ok := p.(event.Compaction); ok {
			c = &x
		}
	}
	if c == nil || !c.Summarized || c.BeforeTokens <= 0 {
		t.Fatalf("compaction event %+v in %s", c, types(evs))
	}
	out, evs = turnOf(ctx, t, a, "Task six: go on.")
	finished(t, out, evs)
	_, msgs := conversation(t, e.request("six"))
	if !strings.Contains(msgs, "SUMMARY-MARKER") {
		t.Errorf("the request after /compact lacks the summary")
	}
}

// TestFaults: a CLI that hangs after its result, one that goes silent, one
// that crashes mid-turn and one that prints garbage each end the turn with
// turn.failed of a clear kind; the process is gone, and the next turn works
// with the real CLI, resuming the conversation.
func TestFaults(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		mode       string
		kind       event.FailureKind
		says, proc string
	}{
		{"hang-after-result", event.FailCLIHung, "did not answer a control request", "sleep 1000001"},
		{"silent", event.FailCLIHung, "printed nothing for", "sleep 1000002"},
		{"crash", event.FailCLICrashed, "exit status 3", ""},
		{"garbage", event.FailCLIProtocol, "Segmentation fault: this line is not JSON", "sleep 1000003"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			e.t = t
			sb, url := e.box(ctx)
			cfg := e.config(sb, url)
			cfg.CLI = faultMount + "/claude"
			cfg.NoOutputTimeout = 8 * time.Second
			cfg.ResultTimeout = 3 * time.Second
			e.setFault("")
			a, err := New(ctx, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			out, evs := turnOf(ctx, t, a, "Ping alpha")
			finished(t, out, evs)
			state, err := a.State()
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Close(ctx); err != nil {
				t.Fatal(err)
			}

			e.setFault(tc.mode)
			a = e.newAgent(ctx, cfg, state)
			start := time.Now()
			out, _ = turnOf(ctx, t, a, "Ping bravo")
			if out.Failed == nil || out.Failed.Kind != tc.kind || !strings.Contains(out.Failed.Error, tc.says) {
				t.Fatalf("outcome %#v, want turn.failed %s saying %q", out.Payload(), tc.kind, tc.says)
			}
			t.Logf("%s: %s after %s", tc.mode, out.Failed.Error, time.Since(start))
			if tc.mode == "crash" && !strings.Contains(out.Failed.Error, "fault injector: simulated crash") {
				t.Errorf("the crash's stderr is not in the error: %s", out.Failed.Error)
			}
			if tc.proc != "" && strings.Contains(boxProcesses(ctx, t, sb), tc.proc) {
				t.Errorf("the misbehaving CLI was not killed")
			}

			e.setFault("")
			out, evs = turnOf(ctx, t, a, "Ping charlie")
			finished(t, out, evs)
			rs := e.requests("ping")
			_, msgs := conversation(t, rs[len(rs)-1])
			if !strings.Contains(msgs, "Ping alpha") || !strings.Contains(msgs, "Ping charlie") {
				t.Errorf("the turn after the fault did not resume the conversation: %s", msgs)
			}
		})
	}
}

// TestCancelLadder: a CLI that ignores the interrupt request and SIGINT is
// killed after two grace periods; the turn is cancelled, its open tool call
// finished as an error, and the next turn resumes with the real CLI.
func TestCancelLadder(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, url := e.box(ctx)
	cfg := e.config(sb, url)
	cfg.CLI = faultMount + "/claude"
	cfg.InterruptGrace = time.Second
	a := e.newAgent(ctx, cfg, nil)
	out, evs := turnOf(ctx, t, a, "Ping alpha")
	finished(t, out, evs)
	// A fresh process for the fault: Close, then the same state.
	state, err := a.State()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	e.setFault("deaf")
	a = e.newAgent(ctx, cfg, state)

	tctx, tcancel := context.WithCancelCause(ctx)
	defer tcancel(nil)
	rec := agenttest.NewRecorder()
	done := make(chan agent.Outcome, 1)
	go func() { done <- a.Turn(tctx, "Ping bravo", rec.Emit) }()
	rec.WaitFor(ctx, t, "tool.started", func(p event.Payload) bool { _, ok := p.(event.ToolStarted); return ok })
	start := time.Now()
	tcancel(errTestCancel)
	out = <-done
	took := time.Since(start)
	evs = rec.All()
	checkContract(t, out, evs)
	if out.Cancelled == nil {
		t.Fatalf("outcome %#v, want turn.cancelled", out.Payload())
	}
	t.Logf("a deaf CLI was cancelled in %s", took)
	if took < 2*cfg.InterruptGrace {
		t.Errorf("cancelled in %s: the ladder should wait %s for the interrupt, then for SIGINT", took, cfg.InterruptGrace)
	}
	if strings.Contains(boxProcesses(ctx, t, sb), "sleep 1000004") {
		t.Errorf("the deaf CLI survived the kill")
	}
	e.setFault("")
	out, evs = turnOf(ctx, t, a, "Ping charlie")
	finished(t, out, evs)
	rs := e.requests("ping")
	if _, msgs := conversation(t, rs[len(rs)-1]); !strings.Contains(msgs, "Ping alpha") {
		t.Errorf("the turn after the kill did not resume the conversation")
	}
}
