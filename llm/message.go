package llm

import (
	"encoding/json"
)

// Role is who a Message is from. System prompts are not messages: they go in
// Request.System.
type Role string

const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// Message is one turn of a conversation.
//
// User messages hold Text, Image and ToolResult blocks; assistant messages hold
// Text, Thinking, RedactedThinking and ToolUse blocks. Request.Validate checks
// this.
type Message struct {
	Role    Role
	Content []Block
}

// UserText returns a user message with one text block.
func UserText(text string) Message {
	return Message{Role: RoleUser, Content: []Block{Text{Text: text}}}
}

// Text concatenates the message's text blocks.
func (m Message) Text() string {
	var s string
	for _, b := range m.Content {
		if t, ok := b.(Text); ok {
			s += t.Text
		}
	}
	return s
}

// ToolUses returns the message's tool calls, in order.
func (m Message) ToolUses() []ToolUse {
	var out []ToolUse
	for _, b := range m.Content {
		if t, ok := b.(ToolUse); ok {
			out = append(out, t)
		}
	}
	return out
}

// Block is one piece of a message's content: Text, Thinking, RedactedThinking,
// ToolUse, ToolResult or Image. The set is closed (the method is unexported), so
// a type switch over these six is exhaustive.
type Block interface {
	blockType() string
}

// Text is plain text, from the user or the model.
type Text struct {
	Text string `json:"text"`
}

// Thinking is the model's visible reasoning. Signature is the provider's proof
// that the text is unmodified; Anthropic requires thinking blocks to be sent
// back verbatim, signature included, when a turn continues after tool use.
// Thinking without a signature (from an OpenAI-compatible server) is shown to
// the caller but not sent back to Anthropic.
type Thinking struct {
	Text      string `json:"text"`
	Signature string `json:"signature,omitempty"`
}

// RedactedThinking is reasoning the provider encrypted. It carries nothing
// readable but must be sent back unchanged, like Thinking.
type RedactedThinking struct {
	Data string `json:"data"`
}

// ToolUse is the model calling a tool. Input is the complete JSON arguments
// object (`{}` when the model sent none).
type ToolUse struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// ToolResult answers the ToolUse with the same ID. Content holds Text and Image
// blocks. IsError tells the model the tool failed (the content says how).
type ToolResult struct {
	ToolUseID string  `json:"tool_use_id"`
	Content   []Block `json:"-"`
	IsError   bool    `json:"is_error,omitempty"`
}

// Image is an image given to the model, as raw bytes. MediaType is one of
// image/png, image/jpeg, image/gif, image/webp.
type Image struct {
	MediaType string `json:"media_type"`
	Data      []byte `json:"data"`
}

func (Text) blockType() string             { return "text" }
func (Thinking) blockType() string         { return "thinking" }
func (RedactedThinking) blockType() string { return "redacted_thinking" }
func (ToolUse) blockType() string          { return "tool_use" }
func (ToolResult) blockType() string       { return "tool_result" }
func (Image) blockType() string            { return "image" }

// Tool is a tool offered to the model. InputSchema is a JSON Schema object for
// the tool's input; it is sent verbatim.
type Tool struct {
	Name        string
	Description string
	InputSchema json.RawMessage
}

// Text concatenates the result's text blocks.
func (r ToolResult) Text() string {
	var s string
	for _, b := range r.Content {
		if t, ok := b.(Text); ok {
			s += t.Text
		}
	}
	return s
}
