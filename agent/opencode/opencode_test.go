package opencode

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/agent/agenttest"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/llm"
)

const taskPrompt = "Write a greeting script greet.sh that greets its first argument, run it with the argument harvest saving the output to out.txt, and check the output."

// TestScriptedTask: the scripted task (write a file, run a command, read
// its output, answer) runs in the real OpenCode server in a box, reached
// only through the box's agent; its events come in order with their
// content, the files are written in the workspace, every model request
// carried the session's token; a follow-up turn continues the same
// conversation (the sim sees the first turn in its request).
func TestScriptedTask(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, url := e.box(ctx)
	a := e.newAgent(ctx, e.config(sb, url), nil)

	fin, events := runTurn(ctx, t, a, taskPrompt)

	// The events, without the deltas and tool output (checked below).
	var got []string
	var deltas strings.Builder
	var toolOut strings.Builder
	var steps []event.StepFinished
	for _, p := range events {
		switch v := p.(type) {
		case event.AssistantDelta:
			deltas.WriteString(v.Text)
			continue
		case event.ToolOutput:
			toolOut.WriteString(v.Text)
			continue
		case event.AssistantMessage:
			got = append(got, "message: "+v.Text)
		case event.ToolStarted:
			got = append(got, "started: "+v.Summary)
		case event.ToolFinished:
			if v.IsError || v.CallID == "" {
				t.Errorf("tool %s finished %+v", v.Tool, v)
			}
			got = append(got, "finished: "+v.Tool)
		case event.StepFinished:
			steps = append(steps, v)
			got = append(got, "step: "+v.StopReason)
		default:
			got = append(got, string(p.EventType()))
		}
	}
	report := "Done: greet.sh prints \"hello, harvest\", and out.txt holds the same line."
	want := []string{
		"turn.started",
		"message: I'll write the script first.",
		"started: write: greet.sh", "finished: write", "step: tool-calls",
		"started: bash: sh greet.sh harvest | tee out.txt", "finished: bash", "step: tool-calls",
		"started: read: out.txt", "finished: read", "step: tool-calls",
		"message: " + report, "step: stop",
		"turn.finished",
	}
	if !slices.Equal(got, want) {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if deltas.String() != "I'll write the script first."+report {
		t.Errorf("assistant deltas %q", deltas.String())
	}
	if !strings.Contains(toolOut.String(), "hello, harvest") {
		t.Errorf("tool output %q: want the bash tool's output", toolOut.String())
	}
	if fin.Result != report || fin.Steps != 4 || fin.StopReason != "stop" {
		t.Errorf("turn.finished %+v", fin)
	}
	// OpenCode's usage: input excludes cache reads (as Harvest's does).
	wantUsage := event.Usage{InputTokens: 9800 + 9900 + 10000 + 10100, OutputTokens: 70 + 45 + 30 + 25, CacheReadTokens: 9800 + 9900 + 10000}
	if fin.Usage != wantUsage {
		t.Errorf("usage %+v, want %+v", fin.Usage, wantUsage)
	}
	if len(steps) == 4 && (steps[1].Usage != event.Usage{InputTokens: 9900, OutputTokens: 45, CacheReadTokens: 9800} || steps[1].Model != testModel || steps[1].Step != 2) {
		t.Errorf("step 2: %+v", steps[1])
	}
	if b, err := os.ReadFile(filepath.Join(e.ws, "greet.sh")); err != nil || string(b) != "#!/bin/sh\necho \"hello, $1\"\n" {
		t.Errorf("greet.sh: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(e.ws, "out.txt")); err != nil || string(b) != "hello, harvest\n" {
		t.Errorf("out.txt: %q %v: the bash tool did not run the script", b, err)
	}
	for _, r := range e.sim.Requests() {
		if r.Status != 200 {
			t.Errorf("sim request #%d (rule %q): %d %s", r.Seq, r.Rule, r.Status, r.Error)
		}
		if got := r.Header.Get("Authorization"); got != "Bearer "+testKey {
			t.Errorf("sim request #%d sent Authorization %q", r.Seq, got)
		}
	}
	if n := len(e.sim.Requests()); n != 4 {
		t.Errorf("%d model requests, want 4 (OpenCode asked for a title?)", n)
	}

	// A follow-up sees the conversation.
	fin, _ = runTurn(ctx, t, a, "what did you write?")
	if fin.Result != "I wrote greet.sh." {
		t.Errorf("follow-up result %q", fin.Result)
	}
	conv := messages(t, e.request("followup"))
	for _, s := range []string{"greeting script", "hello, harvest", "Done: greet.sh prints"} {
		if !strings.Contains(conv, s) {
			t.Errorf("the follow-up's model request lacks %q from the first turn", s)
		}
	}
	st, err := a.State()
	if err != nil || len(st) == 0 {
		t.Fatalf("State: %d bytes, %v", len(st), err)
	}
	t.Logf("State: %d bytes after two turns", len(st))
	e.checkClosed(ctx, a, sb)
}

// TestServerCrash: the OpenCode server killed mid-turn ends the turn with
// turn.failed (cli_crashed) saying what happened; the next turn starts the
// server again and continues the same session.
func TestServerCrash(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, url := e.box(ctx)
	a := e.newAgent(ctx, e.config(sb, url), nil)
	session := a.Session()

	rec := agenttest.NewRecorder()
	done := make(chan event.Payload, 1)
	go func() { done <- a.Turn(ctx, "do the long task", rec.Emit).Payload() }()
	rec.WaitFor(ctx, t, "tool.started", func(p event.Payload) bool { _, ok := p.(event.ToolStarted); return ok })
	a.srvMu.Lock()
	pid := a.srv.proc.PID()
	a.srvMu.Unlock()
	e.run(ctx, sb, "kill -9 "+strconv.Itoa(pid))
	var out event.Payload
	select {
	case out = <-done:
	case <-ctx.Done():
		t.Fatal("the turn did not end after the server was killed")
	}
	checkOutcome(t, out, rec.All())
	f, ok := out.(event.TurnFailed)
	if !ok || f.Kind != event.FailCLICrashed || !strings.Contains(f.Error, "SIGKILL") || !strings.Contains(f.Error, session) {
		t.Fatalf("outcome %#v, want turn.failed %s saying the server was killed and naming session %s", out, event.FailCLICrashed, session)
	}
	t.Logf("turn.failed: %s", f.Error)
	// The tool's orphan ends once it is released (see the package doc).
	e.run(ctx, sb, "touch go")

	fin, _ := runTurn(ctx, t, a, "msg after the crash")
	if fin.Result != "ok" || a.Session() != session {
		t.Errorf("the next turn: %+v in session %s (was %s)", fin, a.Session(), session)
	}
	if conv := messages(t, e.requests("msg")[0]); !strings.Contains(conv, "do the long task") {
		t.Errorf("the turn after the crash lost the conversation: %s", conv)
	}
}

// TestWatchdog: a session that reports nothing for NoOutputTimeout (the
// model never answers) is aborted and the turn fails cli_hung; the server
// is restarted and the next turn works.
func TestWatchdog(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, url := e.box(ctx)
	cfg := e.config(sb, url)
	// Long enough for the next turn's first model call on a restarted
	// server (OpenCode loads its provider then: seconds on a loaded machine).
	cfg.NoOutputTimeout = 6 * time.Second
	a := e.newAgent(ctx, cfg, nil)
	rec := agenttest.NewRecorder()
	start := time.Now()
	out := a.Turn(ctx, "slow answer please", rec.Emit)
	checkOutcome(t, out.Payload(), rec.All())
	if out.Failed == nil || out.Failed.Kind != event.FailCLIHung || !strings.Contains(out.Failed.Error, "reported nothing for 6s") {
		t.Fatalf("outcome %#v, want turn.failed %s", out.Payload(), event.FailCLIHung)
	}
	if d := time.Since(start); d > 25*time.Second {
		t.Errorf("the watchdog took %v", d)
	}
	if fin, _ := runTurn(ctx, t, a, "msg after the watchdog"); fin.Result != "ok" {
		t.Errorf("the next turn: %+v", fin)
	}
}

// TestModelError: the model API refusing a request ends the turn with
// turn.failed (model) carrying OpenCode's error.
func TestModelError(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, url := e.box(ctx)
	a := e.newAgent(ctx, e.config(sb, url), nil)
	rec := agenttest.NewRecorder()
	out := a.Turn(ctx, "refuse this", rec.Emit)
	checkOutcome(t, out.Payload(), rec.All())
	if out.Failed == nil || out.Failed.Kind != event.FailModel || !strings.Contains(out.Failed.Error, "scripted refusal") {
		t.Fatalf("outcome %#v, want turn.failed %s with the API's message", out.Payload(), event.FailModel)
	}
	if fin, _ := runTurn(ctx, t, a, "msg after the refusal"); fin.Result != "ok" {
		t.Errorf("the next turn: %+v", fin)
	}
}

// TestAnthropic: with an Anthropic endpoint, the model's thinking maps to
// assistant.thinking, and the price the agent gives OpenCode makes it
// report each step's cost.
func TestAnthropic(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, url := e.box(ctx)
	cfg := e.config(sb, url)
	cfg.API, cfg.Model = APIAnthropic, "claude-sonnet-4-5"
	a := e.newAgent(ctx, cfg, nil)
	fin, events := runTurn(ctx, t, a, "remember a word for me")
	var thinking, message string
	var steps []event.StepFinished
	for _, p := range events {
		switch v := p.(type) {
		case event.Thinking:
			thinking = v.Text
		case event.AssistantMessage:
			message = v.Text
		case event.StepFinished:
			steps = append(steps, v)
		}
	}
	if thinking != "The user wants me to keep a word in mind." || message != "I will remember the word pineapple." {
		t.Errorf("thinking %q, message %q; events %s", thinking, message, types(events))
	}
	price, _ := llm.DefaultPrices.Lookup("claude-sonnet-4-5")
	want := price.Cost(llm.Usage{InputTokens: 100, OutputTokens: 10})
	if len(steps) != 1 || math.Abs(steps[0].CostUSD-want) > 1e-9 || math.Abs(fin.CostUSD-want) > 1e-9 || steps[0].Model != "claude-sonnet-4-5" {
		t.Errorf("steps %+v, turn cost %g; want one step costing %g", steps, fin.CostUSD, want)
	}
	r := e.request("remember")
	if r.API != "anthropic" || r.Header.Get("X-Api-Key") != testKey {
		t.Errorf("the model request: api %s, x-api-key %q", r.API, r.Header.Get("X-Api-Key"))
	}
}

// TestStateBound: a conversation over MaxStateBytes is not kept: State
// says so (the caller keeps what it saved before), and the turn itself is
// unaffected.
func TestStateBound(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, url := e.box(ctx)
	cfg := e.config(sb, url)
	cfg.MaxStateBytes = 1000
	a := e.newAgent(ctx, cfg, nil)
	runTurn(ctx, t, a, "remember a word for me")
	if st, err := a.State(); err == nil || !strings.Contains(err.Error(), "over the 1000 bytes") {
		t.Errorf("State of a conversation over the bound: %d bytes, %v", len(st), err)
	}
}
