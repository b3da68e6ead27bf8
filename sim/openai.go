package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The OpenAI Chat Completions API (and the many servers compatible with it):
// request validation, facts, replies shaped like api.openai.com's.

type oaiToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type oaiMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []oaiToolCall   `json:"tool_calls"`
	ToolCallID *string         `json:"tool_call_id"`
}

// openAIError is the body of an OpenAI error: {"error": {...}}.
type openAIError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *openAIError) Error() string { return e.Message }

func oaiInvalid(msg, param, code string) *openAIError {
	e := &openAIError{Message: msg, Type: "invalid_request_error"}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	return e
}

// parseOpenAI validates a chat completion request as the API does and
// returns its facts.
func parseOpenAI(body []byte) (*exchange, *openAIError) {
	var top struct {
		Model         *string           `json:"model"`
		Messages      []json.RawMessage `json:"messages"`
		Stream        *bool             `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		Tools []struct {
			Type     string `json:"type"`
			Function *struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
		MaxTokens           *int `json:"max_tokens"`
		MaxCompletionTokens *int `json:"max_completion_tokens"`
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(body, &probe) != nil {
		return nil, oaiInvalid("We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)", "", "")
	}
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, oaiInvalid("Invalid type in the request body: "+err.Error(), "", "invalid_type")
	}
	if top.Model == nil || *top.Model == "" {
		return nil, oaiInvalid("you must provide a model parameter", "", "")
	}
	if _, ok := probe["messages"]; !ok {
		return nil, oaiInvalid("Missing required parameter: 'messages'.", "messages", "missing_required_parameter")
	}
	if len(top.Messages) == 0 {
		return nil, oaiInvalid("Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.", "messages", "empty_array")
	}
	x := &exchange{api: APIOpenAI, model: *top.Model, inputTokens: estimateTokens(len(body)), turn: 1}
	if top.Stream != nil {
		x.stream = *top.Stream
	}
	if top.StreamOptions != nil {
		if !x.stream {
			return nil, oaiInvalid("The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options", "")
		}
		x.includeUsage = top.StreamOptions.IncludeUsage
	}
	switch {
	case top.MaxCompletionTokens != nil:
		x.maxTokens = *top.MaxCompletionTokens
	case top.MaxTokens != nil:
		x.maxTokens = *top.MaxTokens
	}
	for i, t := range top.Tools {
		if t.Function == nil {
			return nil, oaiInvalid(fmt.Sprintf("Missing required parameter: 'tools[%d].function'.", i), fmt.Sprintf("tools[%d].function", i), "missing_required_parameter")
		}
		if t.Type != "function" {
			return nil, oaiInvalid(fmt.Sprintf("Invalid value: '%s'. Supported values are: 'function' and 'custom'.", t.Type), fmt.Sprintf("tools[%d].type", i), "invalid_value")
		}
		x.tools = append(x.tools, t.Function.Name)
	}

	msgs := make([]oaiMessage, len(top.Messages))
	for i, raw := range top.Messages {
		if err := json.Unmarshal(raw, &msgs[i]); err != nil {
			return nil, oaiInvalid(fmt.Sprintf("Invalid type for 'messages[%d]': expected an object.", i), fmt.Sprintf("messages[%d]", i), "invalid_type")
		}
		switch msgs[i].Role {
		case "system", "developer", "user", "assistant", "tool", "function":
		case "":
			return nil, oaiInvalid(fmt.Sprintf("Missing required parameter: 'messages[%d].role'.", i), fmt.Sprintf("messages[%d].role", i), "missing_required_parameter")
		default:
			return nil, oaiInvalid(fmt.Sprintf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.", msgs[i].Role), fmt.Sprintf("messages[%d].role", i), "invalid_value")
		}
	}
	// Pairing: a tool message answers a call of the assistant message before
	// its run of tool messages (checked first, so a wrong id is reported as
	// such); every call is answered in that run.
	for i, m := range msgs {
		if m.Role == "assistant" {
			x.turn++
		}
		if m.Role != "tool" {
			continue
		}
		j := i - 1
		for j >= 0 && msgs[j].Role == "tool" {
			j--
		}
		if j < 0 || msgs[j].Role != "assistant" || len(msgs[j].ToolCalls) == 0 {
			return nil, oaiInvalid("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.", fmt.Sprintf("messages.[%d].role", i), "")
		}
		if m.ToolCallID == nil {
			return nil, oaiInvalid(fmt.Sprintf("Missing required parameter: 'messages[%d].tool_call_id'.", i), fmt.Sprintf("messages[%d].tool_call_id", i), "missing_required_parameter")
		}
		found := false
		for _, tc := range msgs[j].ToolCalls {
			found = found || tc.ID == *m.ToolCallID
		}
		if !found {
			return nil, oaiInvalid(fmt.Sprintf("Invalid parameter: 'tool_call_id' of '%s' not found in 'tool_calls' of previous message.", *m.ToolCallID), fmt.Sprintf("messages.[%d].tool_call_id", i), "")
		}
	}
	for i, m := range msgs {
		if m.Role != "assistant" || len(m.ToolCalls) == 0 {
			continue
		}
		answered := map[string]bool{}
		for k := i + 1; k < len(msgs) && msgs[k].Role == "tool"; k++ {
			if msgs[k].ToolCallID != nil {
				answered[*msgs[k].ToolCallID] = true
			}
		}
		var missing []string
		for _, tc := range m.ToolCalls {
			if !answered[tc.ID] {
				missing = append(missing, tc.ID)
			}
		}
		if len(missing) > 0 {
			return nil, oaiInvalid(fmt.Sprintf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", strings.Join(missing, ", ")), fmt.Sprintf("messages.[%d].role", i), "")
		}
	}
	// Facts.
	var system []string
	lastTool := -1
	for i, m := range msgs {
		switch m.Role {
		case "system", "developer":
			system = append(system, oaiText(m.Content))
		case "user":
			x.lastUser = oaiText(m.Content)
		case "tool":
			lastTool = i
		}
	}
	x.system = strings.Join(system, "\n")
	if lastTool >= 0 {
		first := lastTool
		for first > 0 && msgs[first-1].Role == "tool" {
			first--
		}
		var parts []string
		for _, m := range msgs[first : lastTool+1] {
			parts = append(parts, oaiText(m.Content))
		}
		x.toolResult, x.hasResult = strings.Join(parts, "\n"), true
	}
	return x, nil
}

// oaiText reads content that is a string or a list of parts as text.
func oaiText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	if raw[0] == '"' {
		var s string
		json.Unmarshal(raw, &s)
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	json.Unmarshal(raw, &parts)
	var out []string
	for _, p := range parts {
		if p.Type == "text" {
			out = append(out, p.Text)
		}
	}
	return strings.Join(out, "\n")
}

// openai handles POST /v1/chat/completions.
func (s *Server) openai(w http.ResponseWriter, r *http.Request, body []byte, req *Request) {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(key) == "" {
		req.Error = "no API key"
		writeOpenAIError(w, http.StatusUnauthorized, openAIError{Type: "invalid_request_error",
			Message: "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."}, 0, false)
		return
	}
	x, verr := parseOpenAI(body)
	if verr != nil {
		req.Error = verr.Message
		writeOpenAIError(w, http.StatusBadRequest, *verr, 0, false)
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
		req.Error = writeOpenAIError(w, e.Status, openAIError{Type: e.Type, Message: e.Message}, e.RetryAfter, e.hasRetry)
		return
	}
	in, out, cr, cw := s.usage(rule, x)
	usage := &oaiUsage{PromptTokens: in + cr + cw, CompletionTokens: out, TotalTokens: in + cr + cw + out}
	usage.PromptTokensDetails.CachedTokens = cr
	reply := &rule.Reply
	finish := stopReasons[reply.StopReason][1]
	if finish == "" {
		finish = "stop"
		if len(reply.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	calls := make([]oaiToolCall, len(reply.ToolCalls))
	for i, tc := range reply.ToolCalls {
		calls[i].ID = tc.ID
		if calls[i].ID == "" {
			calls[i].ID = newID("call_", 24)
		}
		calls[i].Type = "function"
		calls[i].Function.Name = tc.Name
		calls[i].Function.Arguments = string(tc.Input)
	}
	base := oaiBase{ID: newID("chatcmpl-", 29), Created: time.Now().Unix(), Model: x.model,
		ServiceTier: "default", SystemFingerprint: "fp_harvestsim"}
	h := w.Header()
	h.Set("x-request-id", newID("req_", 32))
	h.Set("openai-processing-ms", "1")
	if !x.stream {
		msg := oaiOutMessage{Role: "assistant", Annotations: []any{}, ToolCalls: calls}
		if reply.HasText || len(calls) == 0 {
			t := reply.Text
			msg.Content = &t
		}
		if reply.HasThinking {
			msg.ReasoningContent = &reply.Thinking
		}
		base.Object = "chat.completion"
		h.Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(oaiCompletion{oaiBase: base, Choices: []oaiChoice{{Message: &msg, FinishReason: &finish}}, Usage: usage})
		return
	}
	base.Object = "chat.completion.chunk"
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	sse := newSSE(r.Context(), w, chunk)
	oaiStream(sse, base, reply, calls, finish, usage, x.includeUsage)
	if sse.err != nil {
		req.Error = "the stream was cut: " + sse.err.Error()
	}
}

type oaiBase struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Created           int64  `json:"created"`
	Model             string `json:"model"`
	ServiceTier       string `json:"service_tier"`
	SystemFingerprint string `json:"system_fingerprint"`
}

type oaiCompletion struct {
	oaiBase
	Choices []oaiChoice `json:"choices"`
	Usage   *oaiUsage   `json:"usage"`
}

type oaiChunk struct {
	oaiBase
	Choices []oaiChoice `json:"choices"`
}

// oaiChunkUsage is a chunk when the client asked for usage: every chunk
// carries "usage", null until the last, as the API sends it.
type oaiChunkUsage struct {
	oaiBase
	Choices []oaiChoice `json:"choices"`
	Usage   *oaiUsage   `json:"usage"`
}

type oaiChoice struct {
	Index        int            `json:"index"`
	Message      *oaiOutMessage `json:"message,omitempty"`
	Delta        *oaiDelta      `json:"delta,omitempty"`
	Logprobs     any            `json:"logprobs"`
	FinishReason *string        `json:"finish_reason"`
}

type oaiOutMessage struct {
	Role             string        `json:"role"`
	Content          *string       `json:"content"`
	ReasoningContent *string       `json:"reasoning_content,omitempty"`
	Refusal          *string       `json:"refusal"`
	Annotations      []any         `json:"annotations"`
	ToolCalls        []oaiToolCall `json:"tool_calls,omitempty"`
}

type oaiDelta struct {
	Role             string        `json:"role,omitempty"`
	Content          *string       `json:"content,omitempty"`
	ReasoningContent *string       `json:"reasoning_content,omitempty"`
	ToolCalls        []oaiToolCall `json:"tool_calls,omitempty"`
}

type oaiUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
		AudioTokens  int `json:"audio_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens          int `json:"reasoning_tokens"`
		AudioTokens              int `json:"audio_tokens"`
		AcceptedPredictionTokens int `json:"accepted_prediction_tokens"`
		RejectedPredictionTokens int `json:"rejected_prediction_tokens"`
	} `json:"completion_tokens_details"`
}

// oaiStream writes the chunk sequence: the role, reasoning and content
// deltas, each tool call's header then its arguments in pieces, the finish
// reason, the usage chunk (choices empty) when asked for, and [DONE].
func oaiStream(sse *sseWriter, base oaiBase, r *Reply, calls []oaiToolCall, finish string, usage *oaiUsage, includeUsage bool) {
	send := func(d oaiDelta, fin *string) {
		choices := []oaiChoice{{Delta: &d, FinishReason: fin}}
		if includeUsage {
			sse.event("", oaiChunkUsage{oaiBase: base, Choices: choices})
		} else {
			sse.event("", oaiChunk{oaiBase: base, Choices: choices})
		}
	}
	empty := ""
	first := oaiDelta{Role: "assistant", Content: &empty}
	if !r.HasText && !r.HasThinking && len(calls) > 0 {
		first.Content = nil
	}
	send(first, nil)
	if r.HasThinking {
		for _, p := range splitText(r.Thinking) {
			send(oaiDelta{ReasoningContent: &p}, nil)
		}
	}
	for _, p := range splitText(r.Text) {
		send(oaiDelta{Content: &p}, nil)
	}
	for i, c := range calls {
		head := c
		head.Index = &i
		head.Function.Arguments = ""
		send(oaiDelta{ToolCalls: []oaiToolCall{head}}, nil)
		for _, p := range splitJSON(c.Function.Arguments) {
			var part oaiToolCall
			part.Index = &i
			part.Function.Arguments = p
			send(oaiDelta{ToolCalls: []oaiToolCall{part}}, nil)
		}
	}
	send(oaiDelta{}, &finish)
	if includeUsage {
		sse.event("", oaiChunkUsage{oaiBase: base, Choices: []oaiChoice{}, Usage: usage})
	}
	sse.event("", "[DONE]")
}

var oaiDefaultErrors = map[int]openAIError{
	400: {Type: "invalid_request_error", Message: "Bad request"},
	401: {Type: "invalid_request_error", Message: "Incorrect API key provided."},
	403: {Type: "invalid_request_error", Message: "You are not allowed to sample from this model"},
	404: {Type: "invalid_request_error", Message: "The model does not exist or you do not have access to it."},
	429: {Type: "requests", Message: "Rate limit reached for requests"},
	500: {Type: "server_error", Message: "The server had an error while processing your request. Sorry about that!"},
	503: {Type: "server_error", Message: "The engine is currently overloaded, please try again later"},
	529: {Type: "server_error", Message: "Overloaded"},
}

var oaiDefaultCodes = map[int]string{401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}

// writeOpenAIError writes {"error": {message, type, param, code}} with an
// x-request-id header, and retry-after when given. It returns the message,
// defaults filled in.
func writeOpenAIError(w http.ResponseWriter, status int, e openAIError, retryAfter time.Duration, hasRetry bool) string {
	def, known := oaiDefaultErrors[status]
	if !known {
		def = openAIError{Type: "invalid_request_error", Message: http.StatusText(status)}
		if status >= 500 {
			def.Type = "server_error"
		}
	}
	if e.Type == "" {
		e.Type = def.Type
		if c, ok := oaiDefaultCodes[status]; ok && e.Code == nil {
			e.Code = &c
		}
	}
	if e.Message == "" {
		e.Message = def.Message
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("x-request-id", newID("req_", 32))
	if hasRetry {
		retryAfterHeaders(h, retryAfter)
	}
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]openAIError{"error": e})
	return e.Message
}
