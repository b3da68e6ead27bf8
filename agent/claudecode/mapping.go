package claudecode

import (
	"encoding/json"
	"log/slog"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/llm"
)

// mapper turns the stream-json lines of one turn into event payloads (see
// the table in the package doc). It is used by the turn's goroutine only.
type mapper struct {
	emit   func(event.Payload)
	log    *slog.Logger
	now    func() time.Time
	prices *llm.PriceTable

	steps int         // model calls started (main conversation)
	step  *step       // the open step, if any
	usage event.Usage // of the finished steps
	cost  float64     // of the finished steps
	tools map[string]toolCall
	order []string // call ids in flight, oldest first
	// last is the uuid of the turn's last conversation line: the turn's
	// transcript is complete once it holds that entry.
	last string
}

// step is one model call of the main conversation, from its message_start
// (or its first assistant line) until the next one or the end of the turn,
// so that it spans the tool calls it asked for, like the builtin agent's.
type step struct {
	id       string // the message id
	n        int
	start    time.Time
	model    string
	usage    event.Usage
	stop     string
	complete bool // the model's reply arrived whole
}

type toolCall struct {
	name  string
	start time.Time
}

func newMapper(emit func(event.Payload), log *slog.Logger, prices *llm.PriceTable) *mapper {
	return &mapper{emit: emit, log: log, now: time.Now, prices: prices, tools: map[string]toolCall{}}
}

// handle maps one line (any type but result and the control lines, which
// the turn loop handles itself).
func (m *mapper) handle(l *line) {
	switch l.Type {
	case "stream_event":
		if l.Event != nil && !l.subagent() {
			m.streamEvent(l.Event)
		}
	case "assistant":
		if l.UUID != "" && !l.subagent() { // a subagent has a transcript of its own
			m.last = l.UUID
		}
		if l.Message != nil {
			m.assistant(l.Message, l.subagent())
		}
	case "user":
		if l.UUID != "" && !l.subagent() { // a subagent has a transcript of its own
			m.last = l.UUID
		}
		if l.Message != nil {
			m.user(l.Message)
		}
	case "system":
		m.system(l)
	default:
		m.log.Debug("claude code: line ignored", "type", l.Type, "subtype", l.Subtype)
	}
}

func (m *mapper) streamEvent(e *streamEvent) {
	switch e.Type {
	case "message_start":
		if e.Message != nil {
			m.open(e.Message.ID, e.Message.Model)
			m.step.usage = e.Message.Usage.event()
		}
	case "content_block_delta":
		if e.Delta == nil {
			return
		}
		switch e.Delta.Type {
		case "text_delta":
			if e.Delta.Text != "" {
				m.emit(event.AssistantDelta{Text: e.Delta.Text})
			}
		case "thinking_delta":
			if e.Delta.Thinking != "" {
				m.emit(event.ThinkingDelta{Text: e.Delta.Thinking})
			}
		case "input_json_delta":
			if e.Delta.PartialJSON != "" {
				m.emit(event.ToolInputDelta{Index: e.Index, PartialJSON: e.Delta.PartialJSON})
			}
		}
	case "message_delta":
		if m.step == nil {
			return
		}
		if e.Usage != nil {
			m.step.usage = e.Usage.event()
		}
		if e.Delta != nil && e.Delta.StopReason != "" {
			m.step.stop = e.Delta.StopReason
		}
		m.step.complete = true
	case "message_stop":
		if m.step != nil {
			m.step.complete = true
		}
	}
}

func (m *mapper) assistant(msg *message, subagent bool) {
	if !subagent && msg.Model != syntheticModel && (m.step == nil || m.step.id != msg.ID) {
		// No stream events (partial messages off, or a CLI that does not
		// send them): the step starts with its first block, and its usage
		// is the one the line carries, which Claude Code takes from
		// message_start (output tokens not final).
		m.open(msg.ID, msg.Model)
		m.step.usage = msg.Usage.event()
		m.step.stop = msg.StopReason
		m.step.complete = true
	}
	for _, b := range msg.blocks() {
		switch b.Type {
		case "text":
			if t := strings.TrimSpace(b.Text); t != "" && !subagent {
				m.emit(event.AssistantMessage{Text: t})
			}
		case "thinking":
			if b.Thinking != "" && !subagent {
				m.emit(event.Thinking{Text: b.Thinking})
			}
		case "tool_use":
			input := b.Input
			if !json.Valid(input) {
				input = nil
			}
			m.tools[b.ID] = toolCall{name: b.Name, start: m.now()}
			m.order = append(m.order, b.ID)
			m.emit(event.ToolStarted{CallID: b.ID, Tool: b.Name, Input: input, Summary: summarize(b.Name, input, subagent)})
		}
	}
}

func (m *mapper) user(msg *message) {
	for _, b := range msg.blocks() {
		if b.Type != "tool_result" {
			continue
		}
		tc, ok := m.tools[b.ToolUseID]
		if !ok {
			m.log.Debug("claude code: a tool result for a call this turn did not start", "call", b.ToolUseID)
		}
		m.finishTool(b.ToolUseID, tc, b.resultText(), b.IsError)
	}
}

func (m *mapper) finishTool(id string, tc toolCall, output string, isError bool) {
	var dur int64
	if !tc.start.IsZero() {
		dur = m.now().Sub(tc.start).Milliseconds()
	}
	delete(m.tools, id)
	for i, o := range m.order {
		if o == id {
			m.order = append(m.order[:i:i], m.order[i+1:]...)
			break
		}
	}
	m.emit(event.ToolFinished{CallID: id, Tool: tc.name, Output: output, IsError: isError, DurationMS: dur})
}

func (m *mapper) system(l *line) {
	switch l.Subtype {
	case "init":
		m.log.Debug("claude code: turn init", "model", l.Model, "claude_session", l.SessionID)
	case "compact_boundary":
		c := event.Compaction{Summarized: true}
		if md := l.CompactMetadata; md != nil {
			c.BeforeTokens, c.AfterTokens = md.PreTokens, md.PostTokens
		}
		m.emit(c)
	case "api_retry":
		m.log.Warn("claude code: retrying a model request", "line", l.Subtype)
	default:
		m.log.Debug("claude code: system line ignored", "subtype", l.Subtype)
	}
}

// open starts a step, finishing the previous one.
func (m *mapper) open(id, model string) {
	m.finishStep(-1)
	m.steps++
	m.step = &step{id: id, n: m.steps, start: m.now(), model: model}
}

// finishStep emits step.finished for the open step, if its reply arrived,
// with cost (when >= 0) or else the price table's estimate for its usage
// (Claude Code reports cost per turn only).
func (m *mapper) finishStep(cost float64) {
	s := m.step
	m.step = nil
	if s == nil || !s.complete {
		return
	}
	if cost < 0 {
		cost, _ = m.prices.Cost(s.model, llm.Usage{
			InputTokens: int(s.usage.InputTokens), OutputTokens: int(s.usage.OutputTokens),
			CacheReadTokens: int(s.usage.CacheReadTokens), CacheWriteTokens: int(s.usage.CacheWriteTokens),
		})
	}
	m.usage = m.usage.Add(s.usage)
	m.cost += cost
	m.emit(event.StepFinished{
		Step: s.n, Model: s.model, StopReason: s.stop, Usage: s.usage, CostUSD: cost,
		DurationMS: m.now().Sub(s.start).Milliseconds(),
	})
}

// result closes the turn at its result line, whose cost is total: the last
// step gets what the earlier ones' estimates leave of it, so the steps add
// up to what Claude Code charged. Cost beyond the main loop's replies
// (compaction summaries, subagents) with no step left to carry it gets a
// step.finished of its own, without a model.
func (m *mapper) result(total float64, why string) {
	m.closeCalls(why)
	rest := max(total-m.cost, 0)
	if m.step != nil && m.step.complete {
		m.finishStep(rest)
	} else {
		m.finishStep(-1)
		if rest := total - m.cost; rest > 1e-12 {
			m.steps++
			m.cost += rest
			m.emit(event.StepFinished{Step: m.steps, CostUSD: rest})
		}
	}
}

// end closes the turn's open step, and every tool call without a result
// with why (every tool.started gets its tool.finished).
func (m *mapper) end(why string) {
	m.closeCalls(why)
	m.finishStep(-1)
}

// closeCalls finishes every tool call without a result, as an error.
func (m *mapper) closeCalls(why string) {
	for _, id := range append([]string(nil), m.order...) {
		m.finishTool(id, m.tools[id], why, true)
	}
}

// syntheticModel marks an assistant message Claude Code made itself, with
// no model call ("Not enough messages to compact.").
const syntheticModel = "<synthetic>"

// summarize is a tool call's one-line description: "Bash: go test ./...".
func summarize(name string, input json.RawMessage, subagent bool) string {
	if subagent {
		name = "subagent " + name
	}
	var in map[string]any
	_ = json.Unmarshal(input, &in)
	for _, key := range []string{"command", "file_path", "notebook_path", "pattern", "path", "url", "query", "description", "skill"} {
		if v, ok := in[key].(string); ok && v != "" {
			v = strings.Join(strings.Fields(v), " ")
			if len(v) > 100 {
				v = truncate(v, 97) + "..."
			}
			return name + ": " + v
		}
	}
	return name
}
