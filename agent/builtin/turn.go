package builtin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/llm"
)

// errTurnTimeout is the cause of a turn's context when its timeout passes.
var errTurnTimeout = errors.New("turn timeout")

// turn is the state of one running turn.
type turn struct {
	a        *Agent
	emit     func(event.Payload)
	ctx      context.Context
	start    time.Time
	msgs     []llm.Message
	step     int
	usage    llm.Usage
	cost     float64
	detector *loopDetector
	warning  string // loop warning for the next request
	stuck    agent.StuckState
	stops    int // Stop hooks that kept the turn going
	cut      int // replies in a row cut off at max tokens
	stats    TurnStats
}

// Turn implements agent.Agent.
func (a *Agent) Turn(ctx context.Context, prompt string, emit func(event.Payload)) agent.Outcome {
	h := a.def.Harness
	timeout := time.Duration(h.Timeout)
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	tctx, cancel := context.WithTimeoutCause(ctx, timeout, errTurnTimeout)
	defer cancel()
	t := &turn{
		a: a, emit: emit, ctx: tctx, start: a.now(),
		detector: newLoopDetector(h.DoomLoopThreshold),
	}
	a.mu.Lock()
	t.msgs = append([]llm.Message(nil), a.st.Messages...)
	if a.st.Task == "" {
		a.st.Task = prompt
	}
	a.turnN++
	a.mu.Unlock()

	emit(event.TurnStarted{Prompt: prompt, Model: a.client.String()})
	out := t.run(prompt)
	// Whatever happened, the conversation stays valid for the next turn:
	// every tool call has a result.
	t.msgs = closeDangling(t.msgs, "The turn ended before this tool call ran.")
	a.commit(t.msgs, nil)
	t.stats.Steps, t.stats.Total = t.step, a.now().Sub(t.start)
	a.mu.Lock()
	a.last = t.stats
	a.mu.Unlock()
	emit(out.Payload())
	return out
}

func (t *turn) run(prompt string) agent.Outcome {
	a := t.a
	res, notes := t.hooks(HookInput{Event: UserPromptSubmit, SessionID: a.session, Cwd: a.env.Workdir(), Prompt: prompt})
	t.logNotes(notes)
	switch res.Decision {
	case Block:
		return t.fail(event.FailBlocked, "a hook refused the prompt: "+res.Reason)
	case Interrupt:
		return t.fail(event.FailInterrupted, "a hook stopped the turn: "+res.Reason)
	}
	t.msgs = closeDangling(t.msgs, "The previous turn ended before this tool call ran.")
	t.msgs = appendUser(t.msgs, llm.Text{Text: prompt})
	a.commit(t.msgs, nil)
	t.stuck = agent.ReadStuck(t.ctx, a.box, a.ws)

	h := a.def.Harness
	maxSteps := h.MaxSteps
	if maxSteps == 0 {
		maxSteps = DefaultMaxSteps
	}
	for {
		if out, done := t.interrupted(); done {
			return out
		}
		if t.step >= maxSteps {
			return t.fail(event.FailMaxSteps, fmt.Sprintf("the agent used all %d steps of the turn without finishing; raise harness_config.max_steps (or --max-steps) or split the task", maxSteps))
		}
		if h.BudgetUSD > 0 && t.cost >= h.BudgetUSD {
			return t.fail(event.FailBudget, fmt.Sprintf("the turn spent $%.4f, reaching its budget of $%.4f; raise harness_config.budget_usd (or --budget) to go on", t.cost, h.BudgetUSD))
		}
		t.step++
		out, done := t.doStep()
		if done {
			return out
		}
	}
}

// interrupted checks the turn's context: cancelled by the caller, or timed out.
func (t *turn) interrupted() (agent.Outcome, bool) {
	if t.ctx.Err() == nil {
		return agent.Outcome{}, false
	}
	if errors.Is(context.Cause(t.ctx), errTurnTimeout) {
		return t.fail(event.FailTimeout, fmt.Sprintf("the turn ran longer than its timeout of %s; raise harness_config.timeout (or --timeout)", t.timeout())), true
	}
	reason := "cancelled"
	if c := context.Cause(t.ctx); c != nil && !errors.Is(c, context.Canceled) {
		reason = c.Error()
	}
	return agent.Outcome{Cancelled: &event.TurnCancelled{Reason: reason}}, true
}

func (t *turn) timeout() time.Duration {
	if d := time.Duration(t.a.def.Harness.Timeout); d > 0 {
		return d
	}
	return DefaultTimeout
}

func (t *turn) fail(kind event.FailureKind, msg string) agent.Outcome {
	return agent.Outcome{Failed: &event.TurnFailed{Kind: kind, Error: msg, Usage: eventUsage(t.usage), Cost: t.cost}}
}

// hooks runs the hooks for in, timing them.
func (t *turn) hooks(in HookInput) (HookResult, []string) {
	start := t.a.now()
	defer func() { t.stats.Hooks += t.a.now().Sub(start) }()
	return runHooks(t.ctx, t.a.hooks, in)
}

func (t *turn) logNotes(notes []string) {
	for _, n := range notes {
		t.a.log.Warn(n, "session", t.a.session)
	}
}

// doStep makes one model call and runs the tools it asks for. done reports
// that the turn ended, with out.
func (t *turn) doStep() (out agent.Outcome, done bool) {
	a := t.a
	stepStart := a.now()
	if err := t.compact(false); err != nil {
		if o, d := t.interrupted(); d {
			return o, true
		}
		return t.fail(event.FailModel, err.Error()), true
	}
	if t.warning != "" {
		t.msgs = appendUser(t.msgs, llm.Text{Text: t.warning})
		t.warning = ""
	}
	resp, err := t.call()
	if err != nil && errors.Is(err, llm.ErrContextTooLong) && t.ctx.Err() == nil {
		// Our estimate was too low for this model's tokenizer: compact hard
		// and try once more.
		if cerr := t.compact(true); cerr == nil {
			resp, err = t.call()
		}
	}
	if err != nil {
		if o, d := t.interrupted(); d {
			return o, true
		}
		if errors.Is(err, llm.ErrContextTooLong) {
			return t.fail(event.FailContext, fmt.Sprintf("the conversation no longer fits the model's context window even after compaction: %v", err)), true
		}
		return t.fail(event.FailModel, err.Error()), true
	}
	usd, ok := a.client.Cost(resp)
	if !ok && a.def.Harness.BudgetUSD > 0 {
		t.usage = t.usage.Add(resp.Usage)
		return t.fail(event.FailBudget, fmt.Sprintf("the turn has a budget but model %s has no price, so its cost is unknown; add its price to a prices file (see harvest run --help) or remove the budget", a.client.String())), true
	}
	t.cost += usd
	t.usage = t.usage.Add(resp.Usage)
	usage := resp.Usage
	msg := resp.Message
	msg.Role = llm.RoleAssistant
	text := strings.TrimSpace(msg.Text())
	for _, b := range msg.Content {
		if th, ok := b.(llm.Thinking); ok && th.Text != "" {
			t.emit(event.Thinking{Text: th.Text})
		}
	}
	if text != "" {
		t.emit(event.AssistantMessage{Text: text})
	}
	t.detector.message(text)
	calls := msg.ToolUses()
	if len(msg.Content) > 0 {
		t.msgs = append(t.msgs, msg)
	}
	a.commit(t.msgs, &usage)

	finishStep := func() {
		t.emit(event.StepFinished{
			Step: t.step, Model: resp.Model, StopReason: string(resp.StopReason),
			Usage: eventUsage(resp.Usage), CostUSD: usd, DurationMS: a.now().Sub(stepStart).Milliseconds(),
		})
	}

	if resp.StopReason == llm.StopMaxTokens {
		t.cut++
		if t.cut >= maxTruncations {
			finishStep()
			return t.fail(event.FailMaxTokens, fmt.Sprintf("the model's reply was cut off at the output limit (%d tokens) %d times in a row; raise harness_config.max_output_tokens", t.maxTokens(), t.cut)), true
		}
	} else {
		t.cut = 0
	}

	if len(calls) == 0 {
		finishStep()
		if resp.StopReason == llm.StopMaxTokens {
			t.msgs = appendUser(t.msgs, llm.Text{Text: "[Harvest: your reply was cut off at the output token limit. Continue exactly where you stopped, or take a smaller step.]"})
			return agent.Outcome{}, false
		}
		if o, d := t.checkStuck(); d {
			return o, true
		}
		res, notes := t.hooks(HookInput{Event: Stop, SessionID: a.session, Cwd: a.env.Workdir(), LastMessage: text})
		t.logNotes(notes)
		switch {
		case res.Decision == Block && t.stops < maxStopContinues:
			t.stops++
			t.msgs = appendUser(t.msgs, llm.Text{Text: "[Harvest: a stop hook asks you to continue] " + res.Reason})
			return agent.Outcome{}, false
		case res.Decision == Interrupt:
			return t.fail(event.FailInterrupted, "a stop hook ended the turn: "+res.Reason), true
		}
		return agent.Outcome{Finished: &event.TurnFinished{
			Result: text, StopReason: string(resp.StopReason), Steps: t.step,
			Usage: eventUsage(t.usage), CostUSD: t.cost, DurationMS: a.now().Sub(t.start).Milliseconds(),
		}}, true
	}

	results, stop := t.runTools(calls, resp.StopReason == llm.StopMaxTokens)
	t.msgs = appendUser(t.msgs, results...)
	a.commit(t.msgs, nil)
	finishStep()
	if stop != nil {
		return *stop, true
	}
	if o, d := t.interrupted(); d {
		return o, true
	}
	// Only a tool that can write can have written STUCK.md.
	wrote := slices.ContainsFunc(calls, func(c llm.ToolUse) bool { return !a.readOnly(c.Name) })
	if wrote {
		if o, d := t.checkStuck(); d {
			return o, true
		}
	}
	if det := t.detector.check(); det != nil {
		if !t.detector.warned {
			t.detector.warned = true
			t.detector.reset()
			t.emit(event.LoopDetected{Pattern: det.pattern, Detail: det.detail, Action: "warned"})
			t.warning = det.warning()
		} else {
			t.emit(event.LoopDetected{Pattern: det.pattern, Detail: det.detail, Action: "stopped"})
			return t.fail(event.FailLoop, "the agent is going in circles: it "+det.detail+" after being warned"), true
		}
	}
	return agent.Outcome{}, false
}

func (t *turn) maxTokens() int {
	if n := t.a.def.Harness.MaxOutputTokens; n > 0 {
		return n
	}
	return DefaultMaxOutputTokens
}

// call streams one model reply, mapping the stream to delta events.
func (t *turn) call() (*llm.Response, error) {
	a := t.a
	req := llm.Request{
		System: a.system, Messages: t.msgs, Tools: a.llmTools,
		MaxTokens: t.maxTokens(), Cache: true,
	}
	if b := a.def.Harness.Thinking; b > 0 {
		req.Thinking = &llm.ThinkingConfig{BudgetTokens: b}
		if req.MaxTokens <= b {
			req.MaxTokens = b + t.maxTokens()
		}
	}
	start := a.now()
	defer func() { t.stats.Model += a.now().Sub(start) }()
	return a.client.Stream(t.ctx, req, func(ev llm.Event) {
		switch e := ev.(type) {
		case llm.TextDelta:
			if e.Text != "" {
				t.emit(event.AssistantDelta{Text: e.Text})
			}
		case llm.ThinkingDelta:
			if e.Text != "" {
				t.emit(event.ThinkingDelta{Text: e.Text})
			}
		case llm.ToolInputDelta:
			t.emit(event.ToolInputDelta{Index: e.Index, PartialJSON: e.PartialJSON})
		}
	})
}

// compact shrinks the conversation when it is over the threshold (or always,
// when forced after the API said the context is too long).
func (t *turn) compact(force bool) error {
	a := t.a
	c := a.compactor
	a.mu.Lock()
	last := a.st.LastUsage
	task := a.st.Task
	a.mu.Unlock()
	before := contextTokens(last, a.system, t.msgs)
	if !force && !c.needed(before) {
		return nil
	}
	if c.disabled && !force {
		return nil
	}
	msgs, pruned := c.prune(t.msgs)
	after := estimateTokens(a.system, msgs)
	summarized := false
	if force || after > c.limit() {
		if cut := c.summaryCut(msgs); cut > 0 {
			start := a.now()
			s, err := c.summarise(t.ctx, a.client, task, msgs, cut)
			t.stats.Model += a.now().Sub(start)
			if err != nil {
				return err
			}
			msgs, summarized = s, true
			after = estimateTokens(a.system, msgs)
		}
	}
	if pruned == 0 && !summarized {
		return nil
	}
	t.msgs = msgs
	// The provider's last count no longer describes the conversation.
	a.mu.Lock()
	a.st.Messages, a.st.LastUsage = msgs, nil
	a.mu.Unlock()
	t.emit(event.Compaction{BeforeTokens: before, AfterTokens: after, Pruned: pruned, Summarized: summarized})
	return nil
}

// checkStuck ends the turn when the agent wrote (or changed) a STUCK.md.
func (t *turn) checkStuck() (agent.Outcome, bool) {
	name, text, ok := agent.NewStuck(t.ctx, t.a.box, t.a.ws, t.stuck)
	if !ok {
		return agent.Outcome{}, false
	}
	t.emit(event.Stuck{Repo: name, Text: text})
	t.stuck[name] = text
	return t.fail(event.FailStuck, "the agent is stuck and wrote STUCK.md in "+name+": "+firstLine(text)), true
}

func firstLine(s string) string {
	s = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(s), "# "))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}
