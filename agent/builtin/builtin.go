package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/tools"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/sandbox"
)

// Defaults of the harness when the agent definition does not set them.
const (
	DefaultMaxSteps        = 200
	DefaultTimeout         = time.Hour
	DefaultMaxOutputTokens = 16384
	// maxTruncations is how many replies in a row may hit max_output_tokens
	// before the turn fails with kind max_tokens.
	maxTruncations = 3
)

// Failure kinds of turn.failed this agent produces (event.TurnFailed.Kind).
const ()

// Config is what an Agent needs.
type Config struct {
	// Client calls the model. Required.
	Client *llm.Client
	// Box is the session's sandbox; the tools act only in it. Required.
	Box *sandbox.Sandbox
	// Definition is the agent definition; nil is the built-in default.
	Definition *Definition
	// Workspaces are the repositories in the box; nil means every workspace
	// of the box's spec.
	Workspaces []Workspace
	// SessionID is given to hooks.
	SessionID string
	// CommandEnv is added to the environment of the commands the agent's
	// bash tool runs (the egress proxy's HTTP(S)_PROXY, for one).
	CommandEnv []string
	// Hooks are Go hooks, run before the definition's command hooks.
	Hooks []HookRegistration
	// Registry is the tool set the definition selects from; nil is
	// tools.Default().
	Registry *tools.Registry
	// Limits caps the tools' output; zero fields take tools' defaults.
	Limits tools.Limits
	// Logger receives internal errors; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Agent is Harvest's builtin agent: one conversation in one sandbox. See the
// package doc for the loop. Turns are sequential; State may be called
// concurrently with a turn.
type Agent struct {
	client    *llm.Client
	box       *sandbox.Sandbox
	def       *Definition
	ws        []Workspace
	reg       *tools.Registry
	env       *tools.Env
	llmTools  []llm.Tool
	hooks     []hookEntry
	system    string
	compactor *compactor
	window    int
	session   string
	log       *slog.Logger
	now       func() time.Time

	mu    sync.Mutex // guards st and last
	st    state
	last  TurnStats
	turnN int // turns run by this Agent
}

// TurnStats says where a turn's time went.
type TurnStats struct {
	Steps int
	// Total is the turn's wall time.
	Total time.Duration
	// Model is the time spent in model calls (streams, compaction summaries).
	Model time.Duration
	// Tools is the time tools ran (in the box), parallel calls counted once.
	Tools time.Duration
	// Hooks is the time hooks ran.
	Hooks time.Duration
}

// Overhead is the loop's own time: everything but the model, the tools and
// the hooks.
func (s TurnStats) Overhead() time.Duration { return s.Total - s.Model - s.Tools - s.Hooks }

// LastTurn returns the timing of the last finished turn.
func (a *Agent) LastTurn() TurnStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// state is the persisted conversation (State and New).
type state struct {
	Version  int           `json:"version"`
	Messages []llm.Message `json:"messages"`
	// Task is the session's first prompt, kept verbatim through compaction.
	Task string `json:"task,omitempty"`
	// LastUsage is the usage of the last model call: the measured context size.
	LastUsage *llm.Usage `json:"last_usage,omitempty"`
	// Todos is the agent's todo list.
	Todos []tools.TodoItem `json:"todos,omitempty"`
}

const stateVersion = 1

var _ agent.Agent = (*Agent)(nil)

// New returns an agent working in cfg.Box, continuing the conversation in
// saved (from State) when it is not empty.
func New(ctx context.Context, cfg Config, saved []byte) (*Agent, error) {
	if cfg.Client == nil {
		return nil, errors.New("builtin agent: no model client")
	}
	if cfg.Box == nil {
		return nil, errors.New("builtin agent: no sandbox")
	}
	def := cfg.Definition
	if def == nil {
		def = &Definition{Name: "default", Source: "built in"}
	}
	if err := def.validate(); err != nil {
		return nil, fmt.Errorf("agent definition %s: %w", def.Source, err)
	}
	ws := cfg.Workspaces
	if ws == nil {
		for _, w := range cfg.Box.Handle().Spec.Workspaces {
			ws = append(ws, Workspace{Name: w.Name, Path: cfg.Box.WorkspacePath(w.Name)})
		}
	}
	reg := cfg.Registry
	if reg == nil {
		reg = tools.Default()
	}
	if len(def.Tools) > 0 {
		var err error
		if reg, err = reg.Select(def.Tools...); err != nil {
			return nil, fmt.Errorf("agent definition %s: tools: %w", def.Source, err)
		}
	}
	policy, err := policyOf(def)
	if err != nil {
		return nil, fmt.Errorf("agent definition %s: %w", def.Source, err)
	}
	root := sandbox.WorkspaceRoot
	if cfg.Box.Unsafe() && len(ws) > 0 {
		// The host backend has no /workspace: the workspaces are host
		// directories wherever they are, and the tools are confined to them.
		root = ws[0].Path
		for _, w := range ws[1:] {
			policy.AllowPaths = append(policy.AllowPaths, w.Path)
		}
	}
	workdir := ""
	if len(ws) > 0 {
		workdir = ws[0].Path
	}
	env, err := tools.NewEnv(cfg.Box, tools.Config{
		Root: root, Workdir: workdir, Policy: policy, Limits: cfg.Limits, Logger: cfg.Logger,
		CommandEnv: cfg.CommandEnv,
	})
	if err != nil {
		return nil, err
	}
	a := &Agent{
		client: cfg.Client, box: cfg.Box, def: def, ws: ws, reg: reg, env: env,
		session: cfg.SessionID, log: cfg.Logger, now: cfg.Now,
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	for _, t := range reg.Tools() {
		a.llmTools = append(a.llmTools, llm.Tool{Name: t.Name(), Description: t.Description(), InputSchema: t.Schema()})
	}
	regs := append(append([]HookRegistration(nil), cfg.Hooks...), definitionHooks(def, cfg.Box, workdir)...)
	if a.hooks, err = compileHooks(regs); err != nil {
		return nil, err
	}
	a.window = def.Harness.ContextWindow
	if a.window <= 0 {
		a.window = contextWindowOf(cfg.Client.Model)
	}
	a.compactor = newCompactor(a.window, def.Harness.Compaction)
	if a.system, err = buildSystemPrompt(ctx, cfg.Box, def, ws); err != nil {
		return nil, err
	}
	a.st.Version = stateVersion
	if len(saved) > 0 {
		var st state
		if err := json.Unmarshal(saved, &st); err != nil {
			return nil, fmt.Errorf("builtin agent: the saved conversation is not readable: %w", err)
		}
		if st.Version != stateVersion {
			return nil, fmt.Errorf("builtin agent: the saved conversation has version %d; this Harvest reads version %d", st.Version, stateVersion)
		}
		a.st = st
		if len(st.Todos) > 0 {
			if err := env.SetTodos(st.Todos); err != nil {
				return nil, fmt.Errorf("builtin agent: the saved todo list: %w", err)
			}
		}
	}
	return a, nil
}

// policyOf turns a definition's permissions into the tools' policy.
func policyOf(def *Definition) (tools.Policy, error) {
	p := tools.DefaultPolicy()
	if def.Permissions.Mode == "plan" {
		p.Mode = tools.ModePlan
	}
	p.AllowExternal = def.Permissions.ExternalDirectory == "allow"
	p.AllowPaths = def.Permissions.AllowPaths
	for _, r := range def.Permissions.Bash {
		p.Bash = append(p.Bash, tools.BashRule{
			Pattern: r.Pattern, Action: tools.Action(r.Action),
			Source: fmt.Sprintf("%s line %d", def.Source, r.Line),
		})
	}
	return p, p.Validate()
}

// Definition is the agent definition in use.
func (a *Agent) Definition() *Definition { return a.def }

// SystemPrompt is the system prompt the model gets.
func (a *Agent) SystemPrompt() string { return a.system }

// Model is the model's name (provider/model).
func (a *Agent) Model() string { return a.client.String() }

// Messages returns a copy of the conversation.
func (a *Agent) Messages() []llm.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]llm.Message(nil), a.st.Messages...)
}

// State implements agent.Agent.
func (a *Agent) State() ([]byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.st
	st.Todos = a.env.Todos()
	return json.Marshal(st)
}

// Close implements agent.Agent: it kills the background processes the bash
// tool started.
func (a *Agent) Close(ctx context.Context) error { return a.env.Close(ctx) }

func (a *Agent) commit(msgs []llm.Message, usage *llm.Usage) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.Messages = msgs
	if usage != nil {
		a.st.LastUsage = usage
	}
}

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
	stuck    stuckState
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
	t.stuck = readStuck(t.ctx, a.box, a.ws)

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
	name, text, ok := newStuck(t.ctx, t.a.box, t.a.ws, t.stuck)
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

// callOutcome is one tool call's result as the loop tracks it.
type callOutcome struct {
	call    llm.ToolUse
	res     tools.Result
	blocked string
	dur     time.Duration
	ran     bool
}

// runTools runs a step's tool calls: consecutive read-only calls in
// parallel, the others one at a time, in the model's order. Hooks run in
// order, never concurrently. It returns the tool results for the model and,
// when a hook interrupted the turn, its outcome.
func (t *turn) runTools(calls []llm.ToolUse, truncated bool) ([]llm.Block, *agent.Outcome) {
	a := t.a
	outs := make([]callOutcome, len(calls))
	var stop *agent.Outcome
	for i := 0; i < len(calls); {
		// The group: calls[i:j], all read-only, or one call that is not.
		j := i + 1
		if a.readOnly(calls[i].Name) {
			for j < len(calls) && a.readOnly(calls[j].Name) {
				j++
			}
		}
		var run []int
		for k := i; k < j; k++ {
			c := calls[k]
			outs[k].call = c
			t.emit(event.ToolStarted{CallID: c.ID, Tool: c.Name, Input: validJSON(c.Input), Summary: summarize(c.Name, c.Input)})
			if stop != nil || t.ctx.Err() != nil {
				continue
			}
			if truncated && !json.Valid(c.Input) {
				outs[k].res = tools.Result{IsError: true, Output: "This call's input was cut off at the output token limit, so it was not run. Make the call again with a smaller input (for a big file, write it in parts or use edit)."}
				outs[k].ran = true
				continue
			}
			hr, notes := t.hooks(HookInput{Event: PreToolUse, SessionID: a.session, Cwd: a.env.Workdir(), ToolName: c.Name, ToolInput: validJSON(c.Input)})
			t.logNotes(notes)
			switch hr.Decision {
			case Block:
				outs[k].blocked = hr.Reason
				outs[k].res = tools.Result{IsError: true, Denied: true, Output: "A hook blocked this call: " + hr.Reason}
				outs[k].ran = true
				continue
			case Interrupt:
				o := t.fail(event.FailInterrupted, "a hook stopped the turn before "+c.Name+": "+hr.Reason)
				stop = &o
				continue
			}
			run = append(run, k)
		}
		runStart := a.now()
		t.execute(outs, run)
		t.stats.Tools += a.now().Sub(runStart)
		for k := i; k < j; k++ {
			o := &outs[k]
			if !o.ran {
				o.res = tools.Result{IsError: true, Output: "Not run: the turn was stopped before this call."}
			} else if slices.Contains(run, k) {
				hr, notes := t.hooks(HookInput{
					Event: PostToolUse, SessionID: a.session, Cwd: a.env.Workdir(), ToolName: o.call.Name,
					ToolInput: validJSON(o.call.Input), ToolResponse: &HookToolResponse{Output: o.res.Output, IsError: o.res.IsError},
				})
				t.logNotes(notes)
				switch hr.Decision {
				case Block:
					o.res.Output += "\n\n[A hook objected to this result: " + hr.Reason + "]"
				case Interrupt:
					if stop == nil {
						out := t.fail(event.FailInterrupted, "a hook stopped the turn after "+o.call.Name+": "+hr.Reason)
						stop = &out
					}
				}
			}
			t.emit(event.ToolFinished{
				CallID: o.call.ID, Tool: o.call.Name, Output: o.res.Output, IsError: o.res.IsError,
				DurationMS: o.dur.Milliseconds(), Blocked: o.blocked,
			})
			if o.call.Name == "todo" && !o.res.IsError {
				t.emit(event.TodoUpdated{Items: todoItems(a.env.Todos())})
			}
			errText := ""
			if o.res.IsError {
				errText = o.res.Output
			}
			t.detector.call(o.call.Name, o.call.Input, errText)
		}
		i = j
	}
	blocks := make([]llm.Block, len(outs))
	for k, o := range outs {
		blocks[k] = llm.ToolResult{ToolUseID: o.call.ID, Content: []llm.Block{llm.Text{Text: nonEmpty(o.res.Output)}}, IsError: o.res.IsError}
	}
	return blocks, stop
}

// maxLiveOutput bounds the tool.output events of one call; what the model
// gets is bounded separately by the tool.
const maxLiveOutput = 1 << 20

type outputChunk struct {
	id, stream, text string
}

// execute runs the calls outs[k] for k in run, at once, each on its own
// goroutine, and emits their live output (tool.output) from the turn's
// goroutine while they run. It returns when all have returned.
func (t *turn) execute(outs []callOutcome, run []int) {
	if len(run) == 0 {
		return
	}
	ch := make(chan outputChunk, 64)
	var wg sync.WaitGroup
	for _, k := range run {
		o := &outs[k]
		ctx := tools.WithOutput(t.ctx, liveOutput(t.ctx, o.call.ID, ch))
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := t.a.now()
			o.res = t.a.reg.Run(ctx, t.a.env, o.call.Name, o.call.Input)
			o.dur = t.a.now().Sub(start)
			o.ran = true
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	for {
		select {
		case c := <-ch:
			t.emit(event.ToolOutput{CallID: c.id, Stream: c.stream, Text: c.text})
		case <-done:
			for {
				select {
				case c := <-ch:
					t.emit(event.ToolOutput{CallID: c.id, Stream: c.stream, Text: c.text})
				default:
					return
				}
			}
		}
	}
}

// liveOutput is the tools.OutputFunc of one call: it cuts the output at
// whole UTF-8 characters and hands it to the turn's goroutine, up to
// maxLiveOutput bytes.
func liveOutput(ctx context.Context, id string, ch chan<- outputChunk) tools.OutputFunc {
	var mu sync.Mutex
	sent := 0
	partial := map[string][]byte{}
	return func(stream string, p []byte) {
		mu.Lock()
		if sent >= maxLiveOutput {
			mu.Unlock()
			return
		}
		b := append(partial[stream], p...)
		cut := len(b)
		for i := 1; i <= 3 && i <= len(b); i++ { // an incomplete rune at the end waits for the rest
			if r := b[len(b)-i]; r >= 0xC0 {
				if need := utf8Len(r); need > i {
					cut = len(b) - i
				}
				break
			} else if r < 0x80 {
				break
			}
		}
		partial[stream] = append([]byte(nil), b[cut:]...)
		text := string(b[:cut])
		sent += len(text)
		mu.Unlock()
		if text == "" {
			return
		}
		select {
		case ch <- outputChunk{id, stream, text}:
		case <-ctx.Done():
		}
	}
}

// utf8Len is the length of the UTF-8 sequence a leading byte starts.
func utf8Len(b byte) int {
	switch {
	case b >= 0xF0:
		return 4
	case b >= 0xE0:
		return 3
	default:
		return 2
	}
}

func (a *Agent) readOnly(name string) bool {
	tool, ok := a.reg.Lookup(name)
	return ok && tool.ReadOnly()
}

// nonEmpty gives an empty output a visible form: APIs reject empty text.
func nonEmpty(s string) string {
	if s == "" {
		return "(no output)"
	}
	return s
}

func validJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || !json.Valid(raw) {
		b, _ := json.Marshal(string(raw))
		return b
	}
	return raw
}

// summarize is a tool call in one line, for people: "bash: go test ./...".
func summarize(name string, input json.RawMessage) string {
	var in map[string]any
	_ = json.Unmarshal(input, &in)
	for _, key := range []string{"command", "path", "pattern", "id", "ref"} {
		if v, ok := in[key].(string); ok && v != "" {
			v = strings.Join(strings.Fields(v), " ")
			if len(v) > 100 {
				v = v[:97] + "..."
			}
			if key == "path" {
				v = path.Clean(v)
			}
			return name + ": " + v
		}
	}
	return name
}

func todoItems(items []tools.TodoItem) []event.TodoItem {
	out := make([]event.TodoItem, len(items))
	for i, it := range items {
		out[i] = event.TodoItem{Content: it.Content, Status: string(it.Status)}
	}
	return out
}

func eventUsage(u llm.Usage) event.Usage {
	return event.Usage{
		InputTokens: int64(u.InputTokens), OutputTokens: int64(u.OutputTokens),
		CacheReadTokens: int64(u.CacheReadTokens), CacheWriteTokens: int64(u.CacheWriteTokens),
	}
}

// appendUser adds blocks to the conversation as the user: to the last
// message when it is already the user's (tool results, then a note or the
// next prompt, in one message as the APIs want), else as a new message.
func appendUser(msgs []llm.Message, blocks ...llm.Block) []llm.Message {
	if n := len(msgs); n > 0 && msgs[n-1].Role == llm.RoleUser {
		last := msgs[n-1]
		content := append(append([]llm.Block(nil), last.Content...), blocks...)
		msgs = append(msgs[:n-1:n-1], llm.Message{Role: llm.RoleUser, Content: content})
		return msgs
	}
	return append(msgs, llm.Message{Role: llm.RoleUser, Content: blocks})
}

// closeDangling answers every tool call of a final assistant message that has
// no result yet (a turn cancelled mid-step, a crash), so the conversation is
// valid to send again.
func closeDangling(msgs []llm.Message, why string) []llm.Message {
	n := len(msgs)
	if n == 0 || msgs[n-1].Role != llm.RoleAssistant {
		return msgs
	}
	var blocks []llm.Block
	for _, c := range msgs[n-1].ToolUses() {
		blocks = append(blocks, llm.ToolResult{ToolUseID: c.ID, Content: []llm.Block{llm.Text{Text: why}}, IsError: true})
	}
	if len(blocks) == 0 {
		return msgs
	}
	return append(msgs, llm.Message{Role: llm.RoleUser, Content: blocks})
}
