package llm

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// The JSON form of a Message, for storing conversations:
//
//	{"role":"assistant","content":[{"type":"text","text":"..."},
//	  {"type":"tool_use","id":"toolu_1","name":"bash","input":{"command":"ls"}}]}
//
// Block types are named as in the Anthropic API; image bytes are base64 in
// "data". It is Harvest's own storage format, not a provider's wire format.

type wireMessage struct {
	Role    Role        `json:"role"`
	Content []wireBlock `json:"content"`
}

type wireBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Signature string          `json:"signature,omitempty"`
	Data      string          `json:"data,omitempty"`
	MediaType string          `json:"media_type,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   []wireBlock     `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

// MarshalJSON encodes the message with a "type" tag per block.
func (m Message) MarshalJSON() ([]byte, error) {
	content, err := toWire(m.Content)
	if err != nil {
		return nil, err
	}
	return json.Marshal(wireMessage{Role: m.Role, Content: content})
}

// UnmarshalJSON decodes what MarshalJSON wrote.
func (m *Message) UnmarshalJSON(data []byte) error {
	var w wireMessage
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	content, err := fromWire(w.Content)
	if err != nil {
		return err
	}
	*m = Message{Role: w.Role, Content: content}
	return nil
}

func toWire(blocks []Block) ([]wireBlock, error) {
	out := make([]wireBlock, 0, len(blocks))
	for _, b := range blocks {
		w := wireBlock{Type: b.blockType()}
		switch b := b.(type) {
		case Text:
			w.Text = b.Text
		case Thinking:
			w.Text, w.Signature = b.Text, b.Signature
		case RedactedThinking:
			w.Data = b.Data
		case ToolUse:
			w.ID, w.Name, w.Input = b.ID, b.Name, b.Input
		case ToolResult:
			content, err := toWire(b.Content)
			if err != nil {
				return nil, err
			}
			w.ToolUseID, w.Content, w.IsError = b.ToolUseID, content, b.IsError
		case Image:
			w.MediaType, w.Data = b.MediaType, base64.StdEncoding.EncodeToString(b.Data)
		default:
			return nil, fmt.Errorf("llm: cannot encode block of type %T", b)
		}
		out = append(out, w)
	}
	return out, nil
}

func fromWire(ws []wireBlock) ([]Block, error) {
	out := make([]Block, 0, len(ws))
	for _, w := range ws {
		switch w.Type {
		case "text":
			out = append(out, Text{Text: w.Text})
		case "thinking":
			out = append(out, Thinking{Text: w.Text, Signature: w.Signature})
		case "redacted_thinking":
			out = append(out, RedactedThinking{Data: w.Data})
		case "tool_use":
			out = append(out, ToolUse{ID: w.ID, Name: w.Name, Input: w.Input})
		case "tool_result":
			content, err := fromWire(w.Content)
			if err != nil {
				return nil, err
			}
			out = append(out, ToolResult{ToolUseID: w.ToolUseID, Content: content, IsError: w.IsError})
		case "image":
			data, err := base64.StdEncoding.DecodeString(w.Data)
			if err != nil {
				return nil, fmt.Errorf("llm: image block: %w", err)
			}
			out = append(out, Image{MediaType: w.MediaType, Data: data})
		default:
			return nil, fmt.Errorf("llm: unknown content block type %q", w.Type)
		}
	}
	return out, nil
}
