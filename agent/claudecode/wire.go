package claudecode

import (
	"encoding/json"
	"strings"

	"github.com/harvest-dev/harvest/event"
)

// The stream-json wire types of Claude Code 2.1.197, only the fields Harvest
// reads. They stay in this file: the rest of the package works with event
// payloads.

// line is one stdout line of `claude -p --output-format stream-json`.
type line struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	SessionID string `json:"session_id"`
	// UUID names a conversation line; the transcript entry has the same.
	UUID string `json:"uuid"`
	// ParentToolUseID is set on the messages of a subagent (the Task tool).
	ParentToolUseID *string `json:"parent_tool_use_id"`

	// assistant and user
	Message *message `json:"message"`
	// stream_event (with --include-partial-messages)
	Event *streamEvent `json:"event"`

	// system/init
	Model string `json:"model"`
	// system/compact_boundary
	CompactMetadata *struct {
		Trigger    string `json:"trigger"`
		PreTokens  int    `json:"pre_tokens"`
		PostTokens int    `json:"post_tokens"`
	} `json:"compact_metadata"`

	// result
	IsError        bool     `json:"is_error"`
	APIErrorStatus *int     `json:"api_error_status"`
	NumTurns       int      `json:"num_turns"`
	Result         string   `json:"result"`
	StopReason     string   `json:"stop_reason"`
	TotalCostUSD   float64  `json:"total_cost_usd"`
	Usage          *usage   `json:"usage"`
	Errors         []string `json:"errors"`

	// control_request (from the CLI) and control_response
	RequestID string           `json:"request_id"`
	Request   *json.RawMessage `json:"request"`
	Response  *struct {
		Subtype   string `json:"subtype"`
		RequestID string `json:"request_id"`
		Error     string `json:"error"`
	} `json:"response"`
}

// subagent reports a line of a subagent's conversation.
func (l *line) subagent() bool { return l.ParentToolUseID != nil && *l.ParentToolUseID != "" }

// message is an Anthropic message as Claude Code prints it.
type message struct {
	ID         string          `json:"id"`
	Model      string          `json:"model"`
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"` // a string or blocks
	StopReason string          `json:"stop_reason"`
	Usage      *usage          `json:"usage"`
}

// blocks returns the message's content blocks (none when it is a string).
func (m *message) blocks() []block {
	var bs []block
	if len(m.Content) == 0 || m.Content[0] != '[' {
		return nil
	}
	_ = json.Unmarshal(m.Content, &bs)
	return bs
}

type block struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	Thinking string          `json:"thinking"`
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input"`
	// tool_result
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"` // a string or blocks
	IsError   bool            `json:"is_error"`
}

// resultText is a tool_result's content as text: the string, or its text
// blocks joined (other blocks, like images, named).
func (b *block) resultText() string {
	if len(b.Content) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(b.Content, &s) == nil {
		return s
	}
	var parts []block
	if json.Unmarshal(b.Content, &parts) != nil {
		return string(b.Content)
	}
	var out []string
	for _, p := range parts {
		if p.Type == "text" {
			out = append(out, p.Text)
		} else {
			out = append(out, "["+p.Type+"]")
		}
	}
	return strings.Join(out, "\n")
}

// streamEvent is a raw Messages API stream event (--include-partial-messages).
type streamEvent struct {
	Type    string   `json:"type"`
	Index   int      `json:"index"`
	Message *message `json:"message"` // message_start
	Delta   *struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		Thinking    string `json:"thinking"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Usage *usage `json:"usage"` // message_delta: the message's final usage
}

type usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
}

func (u *usage) event() event.Usage {
	if u == nil {
		return event.Usage{}
	}
	return event.Usage{
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheCreationInputTokens,
	}
}

// userMessage is what Harvest writes on the CLI's stdin for a prompt.
type userMessage struct {
	Type    string `json:"type"` // "user"
	Message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"message"`
}

func newUserMessage(text string) []byte {
	var m userMessage
	m.Type = "user"
	m.Message.Role = "user"
	m.Message.Content = text
	b, _ := json.Marshal(m)
	return append(b, '\n')
}

// controlRequest is a control request Harvest sends (interrupt, and the
// read-only mcp_status as a liveness check).
func controlRequest(id, subtype string) []byte {
	b, _ := json.Marshal(map[string]any{
		"type": "control_request", "request_id": id,
		"request": map[string]string{"subtype": subtype},
	})
	return append(b, '\n')
}

// controlError answers a control request of the CLI's (a permission prompt,
// a hook callback) that Harvest does not serve, so the CLI does not wait.
func controlError(id, msg string) []byte {
	b, _ := json.Marshal(map[string]any{
		"type": "control_response",
		"response": map[string]string{
			"subtype": "error", "request_id": id, "error": msg,
		},
	})
	return append(b, '\n')
}
