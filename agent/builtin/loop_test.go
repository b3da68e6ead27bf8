package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/harvest-dev/harvest/agent/tools"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/demo"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/llm"
)

// TestDemoFixesFailingGoTest is the first acceptance point: the
// bundled demo script, played by harvest sim, drives the loop to read, edit
// and run go test on the sample repository inside the sandbox until the test
// passes, and the fix is in the workspace.
func TestDemoFixesFailingGoTest(t *testing.T) {
	s, err := demo.Script()
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessScript(t, s, harnessOpt{wsName: "calc", api: "anthropic", model: "claude-sonnet-4-5"})
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"go.mod", "calc.go", "calc_test.go"} {
		b, err := os.ReadFile(filepath.Join(root, "examples/calc", f))
		if err != nil {
			t.Fatal(err)
		}
		h.write(f, string(b))
	}
	a := h.agent(nil)
	out, rec := h.turn(a, "Fix the failing test")
	fin := mustFinish(t, out)
	if !strings.Contains(fin.Result, "Fixed the failing test") {
		t.Errorf("final message: %q", fin.Result)
	}
	if fin.Steps != 5 {
		t.Errorf("steps = %d, want 5", fin.Steps)
	}
	if got := h.read("calc.go"); !strings.Contains(got, "for i := 0; i < len(xs); i++ {") {
		t.Errorf("the workspace does not show the fix:\n%s", got)
	}
	finished := ofType[event.ToolFinished](rec.all())
	var tools []string
	for _, f := range finished {
		tools = append(tools, f.Tool)
	}
	if strings.Join(tools, ",") != "bash,read,edit,bash" {
		t.Errorf("tools run: %v", tools)
	}
	if last := finished[len(finished)-1]; last.IsError || !strings.Contains(last.Output, "ok  \texample.com/calc") {
		t.Errorf("the second go test did not pass: %+v", last)
	}
	if first := finished[0]; !first.IsError || !strings.Contains(first.Output, "FAIL") {
		t.Errorf("the first go test should fail: %+v", first)
	}
	// Usage and cost: the script's usage summed, priced as claude-sonnet-4-5.
	if fin.Usage.OutputTokens != 38+44+96+31+71 || fin.Usage.CacheReadTokens != 2410+2670+3080+3410 {
		t.Errorf("usage %+v", fin.Usage)
	}
	if fin.CostUSD <= 0 {
		t.Errorf("cost %v", fin.CostUSD)
	}
	steps := ofType[event.StepFinished](rec.all())
	if len(steps) != 5 {
		t.Errorf("%d step.finished events", len(steps))
	}
	if n := len(ofType[event.AssistantDelta](rec.all())); n < 5 {
		t.Errorf("only %d text deltas: the reply was not streamed", n)
	}
	// The model was sent the system prompt with Harvest's instructions and
	// the workspace, and every tool.
	req := h.requests()[0]
	var body struct {
		System []struct{ Text string } `json:"system"`
		Tools  []struct{ Name string } `json:"tools"`
	}
	if err := json.Unmarshal(req.Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.System) == 0 || !strings.Contains(body.System[0].Text, "You are a coding agent run by Harvest") {
		t.Errorf("system prompt: %+v", body.System)
	}
	if len(body.Tools) != 12 {
		t.Errorf("%d tools offered", len(body.Tools))
	}
}

func TestOpenAIProviderToolRoundTrip(t *testing.T) {
	h := newHarness(t, `
mode: sequence
rules:
  - when: {api: openai, tools: [bash]}
    reply:
      tool_calls: [{name: bash, input: {command: "echo hello from $USER > out.txt && cat out.txt"}}]
  - when: {tool_result: "hello from user"}
    reply: {text: "Wrote out.txt."}
`, func(o *harnessOpt) { o.api, o.model = "openai", "gpt-4.1" })
	out, _ := h.turn(h.agent(nil), "write a file")
	if fin := mustFinish(t, out); fin.Result != "Wrote out.txt." {
		t.Errorf("result %q", fin.Result)
	}
	if got := h.read("out.txt"); got != "hello from user\n" {
		t.Errorf("out.txt = %q", got)
	}
}

func TestDoomLoopPatterns(t *testing.T) {
	cases := []struct {
		name, pattern, script string
	}{
		{"same call", "same_call", `
rules:
  - reply:
      text: "Checking again."
      tool_calls: [{name: bash, input: {command: "cat missing.txt"}}]
`},
		{"same error", "same_error", `
mode: sequence
rules:
  - reply: {tool_calls: [{name: bash, input: {command: "false"}}]}
  - reply: {tool_calls: [{name: bash, input: {command: "test -e /nope"}}]}
  - reply: {tool_calls: [{name: bash, input: {command: "[ -e /nada ]"}}]}
  - reply: {tool_calls: [{name: bash, input: {command: "test -d /nope"}}]}
  - reply: {tool_calls: [{name: bash, input: {command: "test -f /nope"}}]}
  - reply: {tool_calls: [{name: bash, input: {command: "test -s /nope"}}]}
`},
		{"same message", "same_message", `
mode: sequence
rules:
  - reply: {text: "I will look around.", tool_calls: [{name: bash, input: {command: "echo 1"}}]}
  - reply: {text: "I will look around.", tool_calls: [{name: bash, input: {command: "echo 2"}}]}
  - reply: {text: "I will look around.", tool_calls: [{name: bash, input: {command: "echo 3"}}]}
  - reply: {text: "I will look around.", tool_calls: [{name: bash, input: {command: "echo 4"}}]}
  - reply: {text: "I will look around.", tool_calls: [{name: bash, input: {command: "echo 5"}}]}
  - reply: {text: "I will look around.", tool_calls: [{name: bash, input: {command: "echo 6"}}]}
`},
		{"cycle", "cycle", `
mode: sequence
rules:
  - reply: {tool_calls: [{name: read, input: {path: a.txt}}]}
  - reply: {tool_calls: [{name: read, input: {path: b.txt}}]}
  - reply: {tool_calls: [{name: read, input: {path: a.txt}}]}
  - reply: {tool_calls: [{name: read, input: {path: b.txt}}]}
  - reply: {tool_calls: [{name: read, input: {path: a.txt}}]}
  - reply: {tool_calls: [{name: read, input: {path: b.txt}}]}
  - reply: {tool_calls: [{name: read, input: {path: a.txt}}]}
  - reply: {tool_calls: [{name: read, input: {path: b.txt}}]}
`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.script)
			h.write("a.txt", "A\n")
			h.write("b.txt", "B\n")
			out, rec := h.turn(h.agent(nil), "do it")
			failed := mustFail(t, out, event.FailLoop)
			loops := ofType[event.LoopDetected](rec.all())
			if len(loops) != 2 || loops[0].Action != "warned" || loops[1].Action != "stopped" {
				t.Fatalf("loop events: %+v", loops)
			}
			for _, l := range loops {
				if l.Pattern != c.pattern {
					t.Errorf("pattern %q, want %q (%s)", l.Pattern, c.pattern, l.Detail)
				}
			}
			if !strings.Contains(failed.Error, "going in circles") {
				t.Errorf("error: %s", failed.Error)
			}
			// The warning reached the model exactly once, in the request after
			// the first detection.
			warned := 0
			for _, b := range h.bodies() {
				if strings.Contains(b, "Harvest loop detector") {
					warned++
				}
			}
			if warned == 0 {
				t.Error("the model was never warned")
			}
			reqs := h.requests()
			last := string(reqs[len(reqs)-1].Body)
			if !strings.Contains(last, "Harvest loop detector") {
				t.Error("the warning was dropped from the conversation")
			}
		})
	}
}

func TestCompactionSummarisesAndGoesOn(t *testing.T) {
	long := strings.Repeat("I am thinking about this in detail. ", 55) // ~2 KB, ~500 tokens
	h := newHarness(t, `
mode: sequence
defaults:
  usage: {input_tokens: 100, output_tokens: 50}
rules:
  - name: step1
    reply: {text: "STEP ONE `+long+`", tool_calls: [{name: bash, input: {command: "echo one"}}]}
  - name: step2
    reply: {text: "STEP TWO `+long+`", tool_calls: [{name: bash, input: {command: "echo two"}}]}
  - name: step3
    reply: {text: "STEP THREE `+long+`", tool_calls: [{name: bash, input: {command: "echo three"}}]}
  - name: summary
    when: {system: "You are compacting the history"}
    reply: {text: "SUMMARY-7f3: ran echo one and echo two; next, finish."}
  - name: final
    when: {tool_result: "three"}
    reply: {text: "All done."}
`)
	d := parseDef(t, "---\nharness_config:\n  context_window: 2000\n---\n")
	out, rec := h.turn(h.agent(d), "ORIGINAL-TASK-42: echo some numbers")
	mustFinish(t, out)
	comp := ofType[event.Compaction](rec.all())
	if len(comp) != 1 || !comp[0].Summarized || comp[0].AfterTokens >= comp[0].BeforeTokens {
		t.Fatalf("compaction events: %+v", comp)
	}
	bodies := h.bodies()
	if len(bodies) != 5 {
		t.Fatalf("%d requests", len(bodies))
	}
	if !strings.Contains(bodies[3], "STEP ONE") {
		t.Error("the summary request did not carry the old history")
	}
	final := bodies[4]
	for _, want := range []string{"SUMMARY-7f3", "ORIGINAL-TASK-42", "STEP THREE"} {
		if !strings.Contains(final, want) {
			t.Errorf("the request after compaction lacks %q", want)
		}
	}
	if strings.Contains(final, "STEP ONE") {
		t.Error("the request after compaction still has the summarised history")
	}
}

func TestCompactionPrunesOldToolOutput(t *testing.T) {
	big := `head -c 3000 /dev/zero | tr '\\0' x`
	h := newHarness(t, `
mode: sequence
defaults:
  usage: {input_tokens: 100, output_tokens: 50}
rules:
  - reply: {tool_calls: [{name: bash, input: {command: "`+big+`; echo A"}}]}
  - reply: {tool_calls: [{name: bash, input: {command: "`+big+`; echo B"}}]}
  - reply: {tool_calls: [{name: bash, input: {command: "`+big+`; echo C"}}]}
  - reply: {text: "done"}
`)
	d := parseDef(t, "---\nharness_config:\n  context_window: 3000\n---\n")
	out, rec := h.turn(h.agent(d), "make output")
	mustFinish(t, out)
	comp := ofType[event.Compaction](rec.all())
	if len(comp) == 0 || comp[0].Pruned == 0 || comp[0].Summarized {
		t.Fatalf("compaction events: %+v", comp)
	}
	bodies := h.bodies()
	if !strings.Contains(bodies[len(bodies)-1], "output pruned by Harvest") {
		t.Error("the pruned output was still sent")
	}
}

func TestHookBlocksWipingTheWorkspace(t *testing.T) {
	h := newHarness(t, `
mode: sequence
rules:
  - reply: {text: "Cleaning up.", tool_calls: [{name: bash, input: {command: "rm -rf /workspace"}}]}
  - when: {tool_result: "would destroy the workspace"}
    reply: {text: "The hook stopped me; I will not delete anything."}
`)
	h.write("keep.txt", "precious\n")
	// The example hook shipped in examples/hooks.
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	guard, err := os.ReadFile(filepath.Join(root, "examples/hooks/guard.sh"))
	if err != nil {
		t.Fatal(err)
	}
	h.write(".harvest/hooks/guard.sh", string(guard))
	h.write(".harvest/agents/careful.md", `---
hooks:
  pre_tool:
    - matcher: bash
      command: .harvest/hooks/guard.sh
---
Be careful.
`)
	ctx := context.Background()
	var d *Definition
	d, err = LoadDefinition(ctx, h.box, []Workspace{{Name: "w", Path: h.ws()}}, "", "careful")
	if err != nil {
		t.Fatal(err)
	}
	out, rec := h.turn(h.agent(d), "clean up")
	mustFinish(t, out)
	fin := ofType[event.ToolFinished](rec.all())
	if len(fin) != 1 || !strings.Contains(fin[0].Blocked, "blocked by guard.sh") || !fin[0].IsError {
		t.Fatalf("tool.finished: %+v", fin)
	}
	if got := h.read("keep.txt"); got != "precious\n" {
		t.Errorf("keep.txt = %q", got)
	}
}

func TestLimits(t *testing.T) {
	t.Run("budget", func(t *testing.T) {
		h := newHarness(t, `
rules:
  - reply:
      tool_calls: [{name: bash, input: {command: "echo spend"}}]
      usage: {input_tokens: 100000, output_tokens: 50000}
`)
		d := parseDef(t, "---\nharness_config:\n  budget_usd: 1\n---\n")
		out, rec := h.turn(h.agent(d), "spend")
		f := mustFail(t, out, event.FailBudget)
		// 100k input at $3/M + 50k output at $15/M = $1.05 after one step.
		if f.Cost < 1.049 || f.Cost > 1.051 || !strings.Contains(f.Error, "budget of $1.0000") {
			t.Errorf("failure: %+v", f)
		}
		if n := len(ofType[event.StepFinished](rec.all())); n != 1 {
			t.Errorf("%d steps ran", n)
		}
	})
	t.Run("max steps", func(t *testing.T) {
		h := newHarness(t, `
mode: sequence
rules:
  - reply: {tool_calls: [{name: bash, input: {command: "echo 1"}}]}
  - reply: {tool_calls: [{name: bash, input: {command: "echo 2"}}]}
  - reply: {tool_calls: [{name: bash, input: {command: "echo 3"}}]}
`)
		d := parseDef(t, "---\nharness_config:\n  max_steps: 3\n---\n")
		out, _ := h.turn(h.agent(d), "count")
		f := mustFail(t, out, event.FailMaxSteps)
		if !strings.Contains(f.Error, "all 3 steps") {
			t.Errorf("error: %s", f.Error)
		}
		if n := len(h.requests()); n != 3 {
			t.Errorf("%d model calls", n)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		h := newHarness(t, `
rules:
  - reply: {tool_calls: [{name: bash, input: {command: "sleep 300"}}]}
`)
		d := parseDef(t, "---\nharness_config:\n  timeout: 1s\n---\n")
		out, _ := h.turn(h.agent(d), "wait")
		f := mustFail(t, out, event.FailTimeout)
		if !strings.Contains(f.Error, "timeout of 1s") {
			t.Errorf("error: %s", f.Error)
		}
	})
	t.Run("max output tokens", func(t *testing.T) {
		h := newHarness(t, `
rules:
  - when: {max_tokens: 100}
    reply: {text: "This reply goes on and on and", stop_reason: max_tokens}
`)
		d := parseDef(t, "---\nharness_config:\n  max_output_tokens: 100\n---\n")
		out, _ := h.turn(h.agent(d), "write a lot")
		f := mustFail(t, out, event.FailMaxTokens)
		if !strings.Contains(f.Error, "100 tokens") {
			t.Errorf("error: %s", f.Error)
		}
		bodies := h.bodies()
		if len(bodies) != 3 || !strings.Contains(bodies[1], "cut off at the output token limit") {
			t.Errorf("%d requests; the second should ask to continue", len(bodies))
		}
	})
}

// waitFile waits for a file the box writes, and returns its content.
func waitFile(t *testing.T, p string) string {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		if b, err := os.ReadFile(p); err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(string(b))
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s never appeared", p)
		}
	}
}

func TestStuckEndsTheTurn(t *testing.T) {
	h := newHarness(t, `
rules:
  - reply:
      text: "I cannot go on."
      tool_calls:
        - name: write
          input: {path: STUCK.md, content: "# Blocked: the tests need a database\n\nI tried sqlite; the code needs PostgreSQL.\n"}
`)
	out, rec := h.turn(h.agent(nil), "make the tests pass")
	f := mustFail(t, out, event.FailStuck)
	if !strings.Contains(f.Error, "Blocked: the tests need a database") {
		t.Errorf("error: %s", f.Error)
	}
	st := ofType[event.Stuck](rec.all())
	if len(st) != 1 || st[0].Repo != "w" || !strings.Contains(st[0].Text, "PostgreSQL") {
		t.Errorf("stuck events: %+v", st)
	}
}

func TestParallelReadsKeepOrder(t *testing.T) {
	h := newHarness(t, `
mode: sequence
rules:
  - reply:
      tool_calls:
        - {id: toolu_a, name: read, input: {path: a.txt}}
        - {id: toolu_b, name: grep, input: {pattern: "B"}}
        - {id: toolu_c, name: write, input: {path: c.txt, content: "C\n"}}
        - {id: toolu_d, name: read, input: {path: c.txt}}
  - when: {tool_result: "C"}
    reply: {text: "ok"}
`)
	h.write("a.txt", "A\n")
	h.write("b.txt", "B\n")
	out, rec := h.turn(h.agent(nil), "look")
	mustFinish(t, out)
	var ids []string
	for _, f := range ofType[event.ToolFinished](rec.all()) {
		ids = append(ids, f.CallID)
		if f.IsError {
			t.Errorf("%s failed: %s", f.CallID, f.Output)
		}
	}
	if strings.Join(ids, ",") != "toolu_a,toolu_b,toolu_c,toolu_d" {
		t.Errorf("order %v", ids)
	}
	// The results go back in the model's order; the read of c.txt ran after
	// the write (writes are barriers).
	var req struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	bodies := h.bodies()
	if err := json.Unmarshal([]byte(bodies[1]), &req); err != nil {
		t.Fatal(err)
	}
	last := string(req.Messages[len(req.Messages)-1].Content)
	ia, ib, ic, id := strings.Index(last, "toolu_a"), strings.Index(last, "toolu_b"), strings.Index(last, "toolu_c"), strings.Index(last, "toolu_d")
	if !(ia < ib && ib < ic && ic < id) {
		t.Errorf("results out of order: %s", last)
	}
}

func TestPlanModeRefusesWrites(t *testing.T) {
	h := newHarness(t, `
mode: sequence
rules:
  - reply: {tool_calls: [{name: write, input: {path: x.txt, content: "x"}}]}
  - when: {tool_result: "plan mode"}
    reply: {text: "Here is my plan instead."}
`)
	d := parseDef(t, "---\npermissions:\n  mode: plan\n---\n")
	out, rec := h.turn(h.agent(d), "change things")
	mustFinish(t, out)
	if _, err := os.Stat(h.host + "/x.txt"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("x.txt was written in plan mode: %v", err)
	}
	if f := ofType[event.ToolFinished](rec.all()); len(f) != 1 || !f[0].IsError {
		t.Errorf("tool.finished: %+v", f)
	}
}

func TestHooks(t *testing.T) {
	t.Run("stop hook keeps the turn going", func(t *testing.T) {
		h := newHarness(t, `
mode: sequence
rules:
  - reply: {text: "Done, I think."}
  - when: {last_user: "run the tests first"}
    reply: {text: "Ran them; really done."}
`)
		stops := 0
		hook := HookRegistration{Event: Stop, Name: "tests-first", Hook: HookFunc(func(ctx context.Context, in HookInput) (HookResult, error) {
			stops++
			if stops == 1 {
				return HookResult{Decision: Block, Reason: "run the tests first"}, nil
			}
			return HookResult{}, nil
		})}
		out, _ := h.turn(h.agent(nil, func(c *Config) { c.Hooks = []HookRegistration{hook} }), "finish")
		if fin := mustFinish(t, out); fin.Result != "Ran them; really done." || fin.Steps != 2 {
			t.Errorf("finished %+v", fin)
		}
	})
	t.Run("prompt hook refuses", func(t *testing.T) {
		h := newHarness(t, "rules:\n  - reply: {text: never}\n")
		hook := HookRegistration{Event: UserPromptSubmit, Name: "no-secrets", Hook: HookFunc(func(ctx context.Context, in HookInput) (HookResult, error) {
			if strings.Contains(in.Prompt, "password") {
				return HookResult{Decision: Block, Reason: "prompts must not contain passwords"}, nil
			}
			return HookResult{}, nil
		})}
		out, _ := h.turn(h.agent(nil, func(c *Config) { c.Hooks = []HookRegistration{hook} }), "the password is hunter2")
		f := mustFail(t, out, event.FailBlocked)
		if !strings.Contains(f.Error, "must not contain passwords") {
			t.Errorf("error %s", f.Error)
		}
		if n := len(h.requests()); n != 0 {
			t.Errorf("the model was called %d times", n)
		}
	})
	t.Run("interrupt and audit", func(t *testing.T) {
		h := newHarness(t, `
rules:
  - reply:
      tool_calls:
        - {name: bash, input: {command: "echo one"}}
        - {name: bash, input: {command: "echo two"}}
`)
		var audit strings.Builder
		interrupt := HookRegistration{Event: PostToolUse, Matcher: "bash", Name: "one-is-enough", Hook: HookFunc(func(ctx context.Context, in HookInput) (HookResult, error) {
			if in.ToolResponse != nil && strings.Contains(in.ToolResponse.Output, "one") {
				return HookResult{Decision: Interrupt, Reason: "saw one"}, nil
			}
			return HookResult{}, nil
		})}
		a := h.agent(nil, func(c *Config) { c.Hooks = []HookRegistration{AuditHook(&audit, "s-test"), interrupt} })
		out, _ := h.turn(a, "echo")
		f := mustFail(t, out, event.FailInterrupted)
		if !strings.Contains(f.Error, "saw one") {
			t.Errorf("error %s", f.Error)
		}
		lines := strings.Split(strings.TrimSpace(audit.String()), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], `"tool":"bash"`) || !strings.Contains(lines[0], "echo one") {
			t.Errorf("audit log: %q", audit.String())
		}
	})
}

func TestSystemPromptAndState(t *testing.T) {
	h := newHarness(t, `
rules:
  - when: {last_user: "second"}
    reply: {text: "second answer"}
  - when: {tool_result: "Write the haiku"}
    reply: {text: "first answer"}
  - when: {system: "Always answer in haiku"}
    reply:
      tool_calls:
        - name: todo
          input: {todos: [{content: "Write the haiku", status: in_progress}]}
`)
	h.write("AGENTS.md", "Always answer in haiku.\n")
	h.write("CLAUDE.md", "IGNORED-BECAUSE-AGENTS-MD-WINS\n")
	h.write("FORK.md", "This fork tracks upstream weekly.\n")
	a := h.agent(nil)
	for _, want := range []string{"Always answer in haiku", "This fork tracks upstream weekly"} {
		if !strings.Contains(a.SystemPrompt(), want) {
			t.Errorf("the system prompt lacks %q", want)
		}
	}
	if strings.Contains(a.SystemPrompt(), "IGNORED-BECAUSE") {
		t.Error("CLAUDE.md was used although AGENTS.md exists")
	}
	out, rec := h.turn(a, "first")
	mustFinish(t, out)
	if todos := ofType[event.TodoUpdated](rec.all()); len(todos) != 1 || todos[0].Items[0].Status != "in_progress" {
		t.Errorf("todo events %+v", todos)
	}
	saved, err := a.State()
	if err != nil {
		t.Fatal(err)
	}
	// A new agent (a resumed session) continues the same conversation.
	b, err := New(context.Background(), Config{Client: h.client, Box: h.box}, saved)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	if got := b.env.Todos(); len(got) != 1 {
		t.Errorf("todos after resume: %+v", got)
	}
	out, _ = h.turn(b, "second")
	if fin := mustFinish(t, out); fin.Result != "second answer" {
		t.Errorf("result %q", fin.Result)
	}
	bodies := h.bodies()
	if !strings.Contains(bodies[len(bodies)-1], "first answer") {
		t.Error("the resumed conversation lost the first turn")
	}
}

func TestModelErrorsFailClearly(t *testing.T) {
	h := newHarness(t, `
rules:
  - reply: {error: {status: 401, type: authentication_error, message: "invalid x-api-key"}}
`)
	out, _ := h.turn(h.agent(nil), "hi")
	f := mustFail(t, out, event.FailModel)
	if !strings.Contains(f.Error, "invalid x-api-key") || !errors.Is(llm.ErrAuth, llm.ErrAuth) {
		t.Errorf("error: %s", f.Error)
	}
}

func TestClosesDanglingToolCalls(t *testing.T) {
	msgs := []llm.Message{
		llm.UserText("go"),
		{Role: llm.RoleAssistant, Content: []llm.Block{llm.ToolUse{ID: "t1", Name: "bash", Input: json.RawMessage(`{}`)}}},
	}
	msgs = closeDangling(msgs, "gone")
	msgs = appendUser(msgs, llm.Text{Text: "next"})
	if len(msgs) != 3 || len(msgs[2].Content) != 2 {
		t.Fatalf("%+v", msgs)
	}
	if tr, ok := msgs[2].Content[0].(llm.ToolResult); !ok || tr.ToolUseID != "t1" || !tr.IsError {
		t.Errorf("%+v", msgs[2].Content[0])
	}
}

// TestExampleDefinitions: every agent definition shipped in examples/agents
// parses.
func TestExampleDefinitions(t *testing.T) {
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "examples/agents/*.md"))
	if len(files) == 0 {
		t.Fatal("no example agent definitions")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".md")
		d, err := ParseDefinition(name, f, b)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if _, err := policyOf(d); err != nil {
			t.Errorf("%s: permissions: %v", f, err)
		}
		if len(d.Tools) > 0 {
			if _, err := tools.Default().Select(d.Tools...); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		}
	}
}

// TestLiveToolOutput: a running command's output arrives as tool.output
// events before the call finishes, whole characters only, and adds up to
// what it printed.
func TestLiveToolOutput(t *testing.T) {
	h := newHarness(t, `
mode: sequence
rules:
  - reply: {tool_calls: [{name: bash, input: {command: "printf 'héllo\\n'; printf 'wörld\\n' >&2; echo done"}}]}
  - reply: {text: "ok"}
`)
	out, rec := h.turn(h.agent(nil), "print")
	mustFinish(t, out)
	var live strings.Builder
	sawFinish := false
	for _, e := range rec.all() {
		switch v := e.(type) {
		case event.ToolOutput:
			if sawFinish {
				t.Error("tool.output after tool.finished")
			}
			if !utf8.ValidString(v.Text) {
				t.Errorf("a chunk splits a character: %q", v.Text)
			}
			live.WriteString(v.Text)
		case event.ToolFinished:
			sawFinish = true
		}
	}
	for _, want := range []string{"héllo\n", "wörld\n", "done\n"} {
		if !strings.Contains(live.String(), want) {
			t.Errorf("live output %q lacks %q", live.String(), want)
		}
	}
}

func TestLiveOutputCutsAtCharacters(t *testing.T) {
	ch := make(chan outputChunk, 10)
	f := liveOutput(context.Background(), "c1", ch)
	b := []byte("aé€😀z")
	for i := range b { // one byte at a time: every split point
		f("stdout", b[i:i+1])
	}
	close(ch)
	var got strings.Builder
	for c := range ch {
		if !utf8.ValidString(c.text) {
			t.Errorf("chunk %q", c.text)
		}
		got.WriteString(c.text)
	}
	if got.String() != string(b) {
		t.Errorf("got %q", got.String())
	}
}
