package opencode

import (
	"encoding/json"
	"strings"

	"github.com/harvest-dev/harvest/event"
)

// mapper turns the OpenCode events of one turn into Harvest payloads (the
// table is in the package doc). It does no I/O and keeps no clock of its
// own (durations come from the events' timestamps), so recorded event
// streams test it (mapping_test.go). One Turn owns one mapper.
type mapper struct {
	session string
	model   string // the configured model, for steps whose message names none

	roles  map[string]string // message id → user | assistant
	models map[string]string // assistant message id → model id
	starts map[string]int64  // assistant message id → its step-start (ms)
	parts  map[string]*partState
	order  []*partState // every part, in the order it appeared
	tools  []*partState // tool parts in the order they started

	steps  int
	usage  event.Usage
	cost   float64
	result string // the newest complete assistant text
	stop   string // the last step's finish reason
	err    *ocError
	// busy: the session started working on this turn's prompt; idle: it
	// stopped again, after busy (an idle left over from an earlier, aborted
	// turn does not end this one); anyIdle: any idle at all.
	busy, idle, anyIdle bool
}

// partState is what the mapper remembers of one part.
type partState struct {
	typ       string
	messageID string
	text      string // text, reasoning: the text so far
	done      bool   // text, reasoning: emitted whole; tool: finished

	// tool parts
	callID  string
	tool    string
	started bool
	output  string // the running output reported so far
}

func newMapper(session, model string) *mapper {
	return &mapper{
		session: session, model: model,
		roles: map[string]string{}, models: map[string]string{}, starts: map[string]int64{},
		parts: map[string]*partState{},
	}
}

// handle maps one event. ours says whether it concerns the mapper's session
// (what the watchdog counts as a sign of life); asked is set for a
// permission or question OpenCode waits on, which the caller must answer.
func (m *mapper) handle(e ocEvent) (out []event.Payload, ours bool, asked *ocAsked, err error) {
	var ref ocSessionRef
	if len(e.Properties) > 0 {
		if err := json.Unmarshal(e.Properties, &ref); err != nil {
			return nil, false, nil, err
		}
	}
	if ref.SessionID != m.session {
		return nil, false, nil, nil
	}
	switch e.Type {
	case "message.updated":
		var v ocMessageUpdated
		if err := json.Unmarshal(e.Properties, &v); err != nil {
			return nil, true, nil, err
		}
		m.roles[v.Info.ID] = v.Info.Role
		if v.Info.Role == "assistant" && v.Info.ModelID != "" {
			m.models[v.Info.ID] = v.Info.ModelID
		}
	case "message.part.delta":
		var v ocPartDelta
		if err := json.Unmarshal(e.Properties, &v); err != nil {
			return nil, true, nil, err
		}
		p := m.parts[v.PartID]
		if p == nil || p.done || v.Field != "text" || v.Delta == "" || m.roles[v.MessageID] != "assistant" {
			break
		}
		p.text += v.Delta
		switch p.typ {
		case "text":
			out = append(out, event.AssistantDelta{Text: v.Delta})
		case "reasoning":
			out = append(out, event.ThinkingDelta{Text: v.Delta})
		}
	case "message.part.updated":
		var v struct {
			ocPartUpdated
			Time int64 `json:"time"`
		}
		if err := json.Unmarshal(e.Properties, &v); err != nil {
			return nil, true, nil, err
		}
		out = m.part(v.Part, v.Time)
	case "session.status":
		var v ocStatus
		if err := json.Unmarshal(e.Properties, &v); err != nil {
			return nil, true, nil, err
		}
		switch v.Status.Type {
		case "busy":
			m.busy = true
		case "idle":
			m.anyIdle, m.idle = true, m.busy
		}
	case "session.idle":
		m.anyIdle, m.idle = true, m.busy
	case "session.error":
		var v ocSessionError
		if err := json.Unmarshal(e.Properties, &v); err != nil {
			return nil, true, nil, err
		}
		if v.Error != nil && m.err == nil {
			m.err = v.Error
		}
	case "permission.asked", "question.asked":
		var v ocAsked
		if err := json.Unmarshal(e.Properties, &v); err != nil {
			return nil, true, nil, err
		}
		asked = &v
	}
	return out, true, asked, nil
}

// part maps a message.part.updated; at is the event's time (ms).
func (m *mapper) part(p ocPart, at int64) []event.Payload {
	if m.roles[p.MessageID] != "assistant" {
		return nil // the user's own parts, echoed back
	}
	st := m.parts[p.ID]
	if st == nil {
		st = &partState{typ: p.Type, messageID: p.MessageID, callID: p.CallID, tool: p.Tool}
		m.parts[p.ID] = st
		m.order = append(m.order, st)
	}
	var out []event.Payload
	switch p.Type {
	case "text", "reasoning":
		if p.Synthetic || p.Ignored || st.done {
			break
		}
		st.text = p.Text
		if p.Time != nil && p.Time.End != 0 {
			out = append(out, m.finishText(st)...)
		}
	case "tool":
		out = m.tool(st, p)
	case "step-start":
		m.starts[p.MessageID] = at
	case "step-finish":
		// A text the step never marked ended is still the step's text.
		out = append(out, m.flushTexts(p.MessageID)...)
		m.steps++
		sf := event.StepFinished{Step: m.steps, Model: m.models[p.MessageID], StopReason: p.Reason, CostUSD: p.Cost}
		if sf.Model == "" {
			sf.Model = m.model
		}
		if p.Tokens != nil {
			sf.Usage = event.Usage{InputTokens: p.Tokens.Input, OutputTokens: p.Tokens.Output, CacheReadTokens: p.Tokens.Cache.Read, CacheWriteTokens: p.Tokens.Cache.Write}
		}
		if start, ok := m.starts[p.MessageID]; ok && at >= start {
			sf.DurationMS = at - start
		}
		m.usage = m.usage.Add(sf.Usage)
		m.cost += sf.CostUSD
		m.stop = p.Reason
		out = append(out, sf)
	}
	return out
}

// flushTexts finishes the text and reasoning parts of a message that have
// text and were not emitted whole yet.
func (m *mapper) flushTexts(messageID string) []event.Payload {
	var out []event.Payload
	for _, o := range m.order {
		if o.messageID == messageID && (o.typ == "text" || o.typ == "reasoning") && !o.done && o.text != "" {
			out = append(out, m.finishText(o)...)
		}
	}
	return out
}

// finishText emits a complete text or reasoning part once.
func (m *mapper) finishText(st *partState) []event.Payload {
	st.done = true
	if strings.TrimSpace(st.text) == "" {
		return nil
	}
	if st.typ == "reasoning" {
		return []event.Payload{event.Thinking{Text: st.text}}
	}
	m.result = st.text
	return []event.Payload{event.AssistantMessage{Text: st.text}}
}

// tool maps a tool part's state: the first state with an input starts the
// call, the running bash output streams as tool.output, completed and error
// finish it.
func (m *mapper) tool(st *partState, p ocPart) []event.Payload {
	if st.done || p.State == nil {
		return nil
	}
	s := p.State
	var out []event.Payload
	if !st.started && s.Status != "pending" {
		// The model wrote its text before the call: OpenCode marks the
		// text ended only later, but it comes first.
		out = append(out, m.flushTexts(p.MessageID)...)
		st.started = true
		m.tools = append(m.tools, st)
		out = append(out, event.ToolStarted{CallID: p.CallID, Tool: p.Tool, Input: s.Input, Summary: summarize(p.Tool, s.Input, s.Title)})
	}
	switch s.Status {
	case "running":
		var md struct {
			Output string `json:"output"`
		}
		if len(s.Metadata) > 0 && json.Unmarshal(s.Metadata, &md) == nil && md.Output != st.output {
			text := md.Output
			if strings.HasPrefix(md.Output, st.output) {
				text = md.Output[len(st.output):]
			}
			st.output = md.Output
			if text != "" {
				out = append(out, event.ToolOutput{CallID: p.CallID, Stream: "stdout", Text: text})
			}
		}
	case "completed", "error":
		st.done = true
		tf := event.ToolFinished{CallID: p.CallID, Tool: p.Tool, Output: s.Output}
		if s.Status == "error" {
			tf.IsError, tf.Output = true, s.Error
		}
		if s.Time != nil && s.Time.End >= s.Time.Start {
			tf.DurationMS = s.Time.End - s.Time.Start
		}
		out = append(out, tf)
	}
	return out
}

// openTools finishes, as errors, the tool calls that started and never
// finished (the turn was cancelled or the server died under them).
func (m *mapper) openTools(why string) []event.Payload {
	var out []event.Payload
	for _, st := range m.tools {
		if !st.done {
			st.done = true
			out = append(out, event.ToolFinished{CallID: st.callID, Tool: st.tool, Output: why, IsError: true})
		}
	}
	return out
}

// summarize is a one-line description of a tool call ("bash: go test").
func summarize(tool string, input json.RawMessage, title string) string {
	var in map[string]any
	_ = json.Unmarshal(input, &in)
	for _, k := range []string{"command", "filePath", "pattern", "path", "url", "description"} {
		if s, ok := in[k].(string); ok && s != "" {
			return tool + ": " + firstLine(s)
		}
	}
	if title != "" {
		return tool + ": " + firstLine(title)
	}
	return tool
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
