package sim

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The Anthropic Messages API: request validation, the facts rules match on,
// and replies, streamed or not, shaped like api.anthropic.com's.

type anthMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anthBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID *string         `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

type anthTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// anthInvalid is a 400 invalid_request_error with the API's message.
type anthInvalid string

func (e anthInvalid) Error() string { return string(e) }

// parseAnthropic validates a Messages (or count_tokens) request the way the
// API does and returns its facts. midSystem allows role "system" inside
// messages (the mid-conversation-system beta Claude Code uses).
func parseAnthropic(body []byte, countTokens, midSystem bool) (*exchange, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, anthInvalid("There was an issue with your request body: it is not a JSON object (" + err.Error() + ")")
	}
	x := &exchange{api: APIAnthropic, inputTokens: estimateTokens(len(body))}
	if err := decodeField(top, "model", &x.model, true, "a valid string"); err != nil {
		return nil, err
	}
	if x.model == "" {
		return nil, anthInvalid("model: String should have at least 1 character")
	}
	if !countTokens {
		if err := decodeField(top, "max_tokens", &x.maxTokens, true, "a valid integer"); err != nil {
			return nil, err
		}
		if x.maxTokens < 1 {
			return nil, anthInvalid("max_tokens: Input should be greater than or equal to 1")
		}
		if err := decodeField(top, "stream", &x.stream, false, "a valid boolean"); err != nil {
			return nil, err
		}
		var thinking struct {
			Type         string `json:"type"`
			BudgetTokens int    `json:"budget_tokens"`
		}
		if err := decodeField(top, "thinking", &thinking, false, "a valid dictionary"); err != nil {
			return nil, err
		}
		if thinking.Type == "enabled" {
			if thinking.BudgetTokens < 1024 {
				return nil, anthInvalid("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
			}
			if x.maxTokens <= thinking.BudgetTokens {
				return nil, anthInvalid("`max_tokens` must be greater than `thinking.budget_tokens`")
			}
		}
	}
	var msgs []json.RawMessage
	if err := decodeField(top, "messages", &msgs, true, "a valid list"); err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, anthInvalid("messages: at least one message is required")
	}
	if raw, ok := top["system"]; ok && string(raw) != "null" {
		sys, err := anthText(raw, "system")
		if err != nil {
			return nil, err
		}
		x.system = sys
	}
	if raw, ok := top["tools"]; ok && string(raw) != "null" {
		var tools []anthTool
		if err := json.Unmarshal(raw, &tools); err != nil {
			return nil, anthInvalid("tools: Input should be a valid list of tools")
		}
		for i, t := range tools {
			if t.Name == "" {
				return nil, anthInvalid(fmt.Sprintf("tools.%d.name: Field required", i))
			}
			if (t.Type == "" || t.Type == "custom") && len(t.InputSchema) == 0 {
				return nil, anthInvalid(fmt.Sprintf("tools.%d.custom.input_schema: Field required", i))
			}
			x.tools = append(x.tools, t.Name)
		}
	}
	if err := anthConversation(msgs, midSystem, x); err != nil {
		return nil, err
	}
	return x, nil
}

// decodeField decodes top[name] into v, with the API's messages for a
// missing field or a wrong type.
func decodeField(top map[string]json.RawMessage, name string, v any, required bool, want string) error {
	raw, ok := top[name]
	if !ok || string(raw) == "null" {
		if required {
			return anthInvalid(name + ": Field required")
		}
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return anthInvalid(fmt.Sprintf("%s: Input should be %s", name, want))
	}
	return nil
}

// anthConversation checks roles, content and tool_use/tool_result pairing and
// fills in the conversation facts.
func anthConversation(raws []json.RawMessage, midSystem bool, x *exchange) error {
	type parsed struct {
		role    string
		blocks  []anthBlock
		text    string // for string content
		isText  bool
		results []string // tool_use ids answered
		uses    []string // tool_use ids asked
	}
	msgs := make([]parsed, len(raws))
	x.turn = 1
	for i, raw := range raws {
		var m anthMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return anthInvalid(fmt.Sprintf("messages.%d: Input should be a valid dictionary", i))
		}
		p := &msgs[i]
		p.role = m.Role
		switch m.Role {
		case "user", "assistant":
		case "system":
			if !midSystem {
				return anthInvalid(fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i))
			}
		case "":
			return anthInvalid(fmt.Sprintf("messages.%d.role: Field required", i))
		default:
			return anthInvalid(fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i))
		}
		if len(m.Content) == 0 || string(m.Content) == "null" {
			return anthInvalid(fmt.Sprintf("messages.%d.content: Field required", i))
		}
		last := i == len(raws)-1
		if m.Content[0] == '"' {
			json.Unmarshal(m.Content, &p.text)
			p.isText = true
			if p.text == "" && !(last && m.Role == "assistant") {
				return anthInvalid(fmt.Sprintf("messages.%d: all messages must have non-empty content except for the optional final assistant message", i))
			}
		} else {
			if err := json.Unmarshal(m.Content, &p.blocks); err != nil {
				return anthInvalid(fmt.Sprintf("messages.%d.content: Input should be a valid list", i))
			}
			if len(p.blocks) == 0 && !(last && m.Role == "assistant") {
				return anthInvalid(fmt.Sprintf("messages.%d: all messages must have non-empty content except for the optional final assistant message", i))
			}
			for j, b := range p.blocks {
				where := fmt.Sprintf("messages.%d.content.%d", i, j)
				switch b.Type {
				case "":
					return anthInvalid(where + ".type: Field required")
				case "text":
					if b.Text == nil {
						return anthInvalid(where + ".text.text: Field required")
					}
				case "tool_use":
					if m.Role != "assistant" {
						return anthInvalid(where + ": tool_use blocks can only be in assistant messages")
					}
					if b.ID == "" || b.Name == "" {
						return anthInvalid(where + ".tool_use: id and name are required")
					}
					if len(b.Input) == 0 || b.Input[0] != '{' {
						return anthInvalid(where + ".tool_use.input: Input should be a valid dictionary")
					}
					p.uses = append(p.uses, b.ID)
				case "tool_result":
					if m.Role != "user" {
						return anthInvalid(where + ": tool_result blocks can only be in user messages")
					}
					if b.ToolUseID == nil {
						return anthInvalid(where + ".tool_result.tool_use_id: Field required")
					}
					p.results = append(p.results, *b.ToolUseID)
				}
			}
		}
		if m.Role == "assistant" {
			x.turn++
		}
	}

	// Pairing: a tool_result answers a tool_use of the previous message, and
	// every tool_use is answered in the next one. System messages between
	// them (the mid-conversation-system beta) are skipped.
	prev := func(i int) int {
		for i--; i >= 0 && msgs[i].role == "system"; i-- {
		}
		return i
	}
	nextOf := func(i int) int {
		for i++; i < len(msgs) && msgs[i].role == "system"; i++ {
		}
		return i
	}
	// Results first: a wrong tool_use_id is reported as the unexpected id it
	// is, not as the tool_use it leaves unanswered.
	for i, m := range msgs {
		if len(m.results) == 0 {
			continue
		}
		var asked []string
		if p := prev(i); p >= 0 && msgs[p].role == "assistant" {
			asked = msgs[p].uses
		}
		for j, id := range m.results {
			if !contains(asked, id) {
				return anthInvalid(fmt.Sprintf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, resultIndex(m.blocks, j), id))
			}
		}
	}
	for i, m := range msgs {
		if len(m.uses) == 0 {
			continue
		}
		n := nextOf(i)
		if n >= len(msgs) {
			continue // the conversation ends with the tool calls: prefill
		}
		var missing []string
		for _, id := range m.uses {
			if msgs[n].role != "user" || !contains(msgs[n].results, id) {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return anthInvalid(fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i, strings.Join(missing, ", ")))
		}
	}

	// Facts: system messages add to the system prompt; the newest user
	// message without tool results is what the user last said; the newest
	// one with tool results holds the newest results.
	userDone, resultDone := false, false
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		switch m.role {
		case "system":
			if m.isText {
				x.system += "\n" + m.text
			} else {
				x.system += "\n" + blocksText(m.blocks)
			}
		case "user":
			// What the user said: a message of text, or the text blocks
			// sent along with tool results (a client's next prompt after
			// a cancelled turn, a note after the results).
			if !userDone {
				text := m.text
				if !m.isText {
					text = blocksText(m.blocks)
				}
				if len(m.results) == 0 || strings.TrimSpace(text) != "" {
					userDone = true
					x.lastUser = text
				}
			}
			if len(m.results) > 0 && !resultDone {
				resultDone, x.hasResult = true, true
				var parts []string
				for _, b := range m.blocks {
					if b.Type == "tool_result" {
						t, _ := anthText(b.Content, "content")
						parts = append(parts, t)
					}
				}
				x.toolResult = strings.Join(parts, "\n")
			}
		}
	}
	return nil
}

func resultIndex(blocks []anthBlock, n int) int {
	for i, b := range blocks {
		if b.Type == "tool_result" {
			if n == 0 {
				return i
			}
			n--
		}
	}
	return 0
}

// anthText reads a string or a list of blocks as text (text blocks joined by
// newlines).
func anthText(raw json.RawMessage, what string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		json.Unmarshal(raw, &s)
		return s, nil
	}
	var blocks []anthBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", anthInvalid(what + ": Input should be a valid string or a list of content blocks")
	}
	return blocksText(blocks), nil
}

func blocksText(blocks []anthBlock) string {
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" && b.Text != nil {
			parts = append(parts, *b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// anthropic handles POST /v1/messages and /v1/messages/count_tokens.
func (s *Server) anthropic(w http.ResponseWriter, r *http.Request, body []byte, req *Request, countTokens bool) {
	if r.Header.Get("x-api-key") == "" && !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		s.apiError(w, req, http.StatusUnauthorized, "authentication_error", "x-api-key header is required")
		return
	}
	if r.Header.Get("anthropic-version") == "" {
		s.apiError(w, req, http.StatusBadRequest, "", "anthropic-version: header is required")
		return
	}
	midSystem := strings.Contains(r.Header.Get("anthropic-beta"), "mid-conversation-system")
	x, err := parseAnthropic(body, countTokens, midSystem)
	if err != nil {
		s.apiError(w, req, http.StatusBadRequest, "", err.Error())
		return
	}
	if countTokens {
		req.Model, req.Turn = x.model, x.turn
		req.Rule = "count_tokens"
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("request-id", newID("req_", 24))
		fmt.Fprintf(w, `{"input_tokens":%d}`, x.inputTokens)
		return
	}
	rule := s.answer(w, req, x)
	if rule == nil {
		return
	}
	before, chunk := s.delays(rule)
	if err := sleep(r.Context(), before); err != nil {
		return
	}
	if e := rule.Reply.Error; e != nil {
		req.Error = writeAnthropicError(w, e.Status, e.Type, e.Message, e.RetryAfter, e.hasRetry)
		return
	}
	in, out, cr, cw := s.usage(rule, x)
	m := anthResponse(&rule.Reply, x.model)
	m.Usage = anthUsage{InputTokens: in, CacheCreationInputTokens: cw, CacheReadInputTokens: cr,
		CacheCreation: &anthCacheCreation{Ephemeral5m: cw}, OutputTokens: out, ServiceTier: "standard"}
	h := w.Header()
	h.Set("request-id", newID("req_", 24))
	if !x.stream {
		h.Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(m)
		return
	}
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	sse := newSSE(r.Context(), w, chunk)
	anthStream(sse, m)
	if sse.err != nil {
		req.Error = "the stream was cut: " + sse.err.Error()
	}
}

type anthOut struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []anthOutBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	StopDetails  any            `json:"stop_details"`
	Container    any            `json:"container"`
	Usage        anthUsage      `json:"usage"`
}

type anthOutBlock struct {
	Type      string           `json:"type"`
	Text      *string          `json:"text,omitempty"`
	Thinking  *string          `json:"thinking,omitempty"`
	Signature *string          `json:"signature,omitempty"`
	ID        string           `json:"id,omitempty"`
	Name      string           `json:"name,omitempty"`
	Input     *json.RawMessage `json:"input,omitempty"`
}

type anthUsage struct {
	InputTokens              int                `json:"input_tokens"`
	CacheCreationInputTokens int                `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int                `json:"cache_read_input_tokens"`
	CacheCreation            *anthCacheCreation `json:"cache_creation,omitempty"`
	OutputTokens             int                `json:"output_tokens"`
	ServiceTier              string             `json:"service_tier,omitempty"`
}

type anthCacheCreation struct {
	Ephemeral5m int `json:"ephemeral_5m_input_tokens"`
	Ephemeral1h int `json:"ephemeral_1h_input_tokens"`
}

// anthResponse builds the complete message of a reply (usage filled in by
// the caller).
func anthResponse(r *Reply, model string) *anthOut {
	m := &anthOut{ID: newID("msg_01", 22), Type: "message", Role: "assistant", Model: model, Content: []anthOutBlock{}}
	if r.HasThinking {
		th, sig := r.Thinking, signature()
		m.Content = append(m.Content, anthOutBlock{Type: "thinking", Thinking: &th, Signature: &sig})
	}
	if r.HasText {
		t := r.Text
		m.Content = append(m.Content, anthOutBlock{Type: "text", Text: &t})
	}
	for _, tc := range r.ToolCalls {
		id := tc.ID
		if id == "" {
			id = newID("toolu_01", 22)
		}
		in := json.RawMessage(tc.Input)
		m.Content = append(m.Content, anthOutBlock{Type: "tool_use", ID: id, Name: tc.Name, Input: &in})
	}
	stop := stopReasons[r.StopReason][0]
	if stop == "" {
		stop = "end_turn"
		if len(r.ToolCalls) > 0 {
			stop = "tool_use"
		}
	}
	m.StopReason = &stop
	return m
}

// signature stands in for the opaque signature of a thinking block; clients
// send it back and never read it.
func signature() string {
	return base64.StdEncoding.EncodeToString([]byte("harvest-sim:" + newID("", 48)))
}

// Stream event envelopes; structs rather than maps keep the keys in the
// API's order ("type" first) and make encoding cheap.
type anthEvent struct {
	Type         string        `json:"type"`
	Message      *anthOut      `json:"message,omitempty"`
	Index        *int          `json:"index,omitempty"`
	ContentBlock *anthOutBlock `json:"content_block,omitempty"`
	Delta        any           `json:"delta,omitempty"`
	Usage        *anthUsage    `json:"usage,omitempty"`
}

type anthDelta struct {
	Type        string  `json:"type"`
	Text        *string `json:"text,omitempty"`
	Thinking    *string `json:"thinking,omitempty"`
	Signature   *string `json:"signature,omitempty"`
	PartialJSON *string `json:"partial_json,omitempty"`
}

type anthStopDelta struct {
	StopReason   string `json:"stop_reason"`
	StopSequence any    `json:"stop_sequence"`
	StopDetails  any    `json:"stop_details"`
}

// anthStream writes m as the Messages API's event sequence: message_start,
// per block content_block_start / deltas / content_block_stop (a ping after
// the first start), message_delta with the stop reason and usage,
// message_stop.
func anthStream(sse *sseWriter, m *anthOut) {
	start := *m
	start.Content = []anthOutBlock{}
	start.StopReason = nil
	start.Usage.OutputTokens = min(1, m.Usage.OutputTokens)
	sse.event("message_start", anthEvent{Type: "message_start", Message: &start})
	for i, b := range m.Content {
		var first anthOutBlock
		var deltas []anthDelta
		empty := ""
		switch b.Type {
		case "thinking":
			first = anthOutBlock{Type: "thinking", Thinking: &empty, Signature: &empty}
			for _, p := range splitText(*b.Thinking) {
				deltas = append(deltas, anthDelta{Type: "thinking_delta", Thinking: &p})
			}
			deltas = append(deltas, anthDelta{Type: "signature_delta", Signature: b.Signature})
		case "text":
			first = anthOutBlock{Type: "text", Text: &empty}
			for _, p := range splitText(*b.Text) {
				deltas = append(deltas, anthDelta{Type: "text_delta", Text: &p})
			}
		case "tool_use":
			obj := json.RawMessage("{}")
			first = anthOutBlock{Type: "tool_use", ID: b.ID, Name: b.Name, Input: &obj}
			// The API opens every tool input with an empty partial_json.
			deltas = append(deltas, anthDelta{Type: "input_json_delta", PartialJSON: &empty})
			if string(*b.Input) != "{}" {
				for _, p := range splitJSON(string(*b.Input)) {
					deltas = append(deltas, anthDelta{Type: "input_json_delta", PartialJSON: &p})
				}
			}
		}
		sse.event("content_block_start", anthEvent{Type: "content_block_start", Index: &i, ContentBlock: &first})
		if i == 0 {
			sse.event("ping", anthEvent{Type: "ping"})
		}
		for _, d := range deltas {
			sse.event("content_block_delta", anthEvent{Type: "content_block_delta", Index: &i, Delta: d})
		}
		sse.event("content_block_stop", anthEvent{Type: "content_block_stop", Index: &i})
	}
	if len(m.Content) == 0 {
		sse.event("ping", anthEvent{Type: "ping"})
	}
	u := m.Usage
	u.CacheCreation, u.ServiceTier = nil, ""
	sse.event("message_delta", anthEvent{Type: "message_delta", Delta: anthStopDelta{StopReason: *m.StopReason}, Usage: &u})
	sse.event("message_stop", anthEvent{Type: "message_stop"})
}

// anthErrorTypes is the API's error type for each status.
var anthErrorTypes = map[int]string{
	400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
	403: "permission_error", 404: "not_found_error", 405: "invalid_request_error",
	413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
	504: "timeout_error", 529: "overloaded_error",
}

var anthErrorMessages = map[string]string{
	"rate_limit_error": "Number of request tokens has exceeded your per-minute rate limit",
	"overloaded_error": "Overloaded",
	"api_error":        "Internal server error",
	"timeout_error":    "Request timeout",
}

// writeAnthropicError writes {"type":"error","error":{"type","message"},
// "request_id"} with a request-id header, and retry-after when given. It
// returns the message, defaults filled in.
func writeAnthropicError(w http.ResponseWriter, status int, typ, msg string, retryAfter time.Duration, hasRetry bool) string {
	if typ == "" {
		typ = anthErrorTypes[status]
		if typ == "" {
			typ = "invalid_request_error"
			if status >= 500 {
				typ = "api_error"
			}
		}
	}
	if msg == "" {
		msg = anthErrorMessages[typ]
		if msg == "" {
			msg = http.StatusText(status)
		}
	}
	reqID := newID("req_", 24)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("request-id", reqID)
	if hasRetry {
		retryAfterHeaders(h, retryAfter)
	}
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"type":       "error",
		"error":      map[string]string{"type": typ, "message": msg},
		"request_id": reqID,
	})
	return msg
}
