package llm

import (
	"encoding/json"
	"fmt"
	"time"
)

// DefaultMaxTokens is the output limit used when Request.MaxTokens is 0 and
// the API requires one (Anthropic does; OpenAI-compatible servers get no limit
// and apply their own).
const DefaultMaxTokens = 8192

// Request is one call to a model.
type Request struct {
	// Model is the provider's model id ("claude-sonnet-4-5", "gpt-4.1"), without
	// the "provider/" prefix. Client fills it in when empty.
	Model string
	// System is the system prompt; empty for none.
	System   string
	Messages []Message
	Tools    []Tool
	// MaxTokens limits the output; 0 means DefaultMaxTokens where the API
	// requires a limit, else the server's default.
	MaxTokens int
	// Temperature is sent when set; nil leaves the provider's default.
	Temperature   *float64
	StopSequences []string
	// Thinking enables extended thinking / reasoning; nil leaves it off (or the
	// model's default).
	Thinking *ThinkingConfig
	// Cache marks prompt-caching breakpoints: Anthropic gets cache_control on the
	// system prompt, the last tool and the last message, so that each step of an
	// agent loop reads the previous step's prefix from the cache. OpenAI caches
	// prompt prefixes automatically and ignores it.
	Cache bool
	// Timeout bounds each attempt, from sending the request to the end of the
	// streamed reply; 0 means no per-attempt limit (the context still applies).
	// An attempt that times out before any event reached the caller is retried.
	Timeout time.Duration
}

// ThinkingConfig configures the model's reasoning.
type ThinkingConfig struct {
	// BudgetTokens > 0 asks Anthropic for extended thinking with that budget
	// (it must be below MaxTokens); 0 asks for adaptive thinking, which newer
	// Claude models require. OpenAI-compatible servers ignore it.
	BudgetTokens int
	// Effort is "low", "medium", "high" (and, where supported, "minimal",
	// "xhigh", "max"): OpenAI's reasoning_effort, Anthropic's output effort.
	// Empty leaves the default.
	Effort string
}

// Validate checks what every provider needs, so that a malformed request fails
// before anything is sent (as ErrBadRequest, which is never retried).
func (r *Request) Validate() error {
	if r.Model == "" {
		return fmt.Errorf("no model: set Request.Model or open the client with a model name")
	}
	if len(r.Messages) == 0 {
		return fmt.Errorf("no messages: a request needs at least one user message")
	}
	if r.MaxTokens < 0 {
		return fmt.Errorf("MaxTokens is %d; use 0 for the default or a positive limit", r.MaxTokens)
	}
	if r.Thinking != nil && r.Thinking.BudgetTokens > 0 && r.MaxTokens > 0 && r.Thinking.BudgetTokens >= r.MaxTokens {
		return fmt.Errorf("thinking budget %d must be below MaxTokens %d", r.Thinking.BudgetTokens, r.MaxTokens)
	}
	tools := make(map[string]bool, len(r.Tools))
	for i, t := range r.Tools {
		if t.Name == "" {
			return fmt.Errorf("tool %d has no name", i)
		}
		if tools[t.Name] {
			return fmt.Errorf("tool %q is defined twice", t.Name)
		}
		tools[t.Name] = true
		if len(t.InputSchema) > 0 && !json.Valid(t.InputSchema) {
			return fmt.Errorf("tool %q: InputSchema is not valid JSON", t.Name)
		}
	}
	for i, m := range r.Messages {
		if err := m.validate(); err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
	}
	return nil
}

func (m Message) validate() error {
	if m.Role != RoleUser && m.Role != RoleAssistant {
		return fmt.Errorf("role %q; want %q or %q", m.Role, RoleUser, RoleAssistant)
	}
	if len(m.Content) == 0 {
		return fmt.Errorf("no content blocks")
	}
	for j, b := range m.Content {
		var err error
		switch b := b.(type) {
		case Text, Thinking, RedactedThinking:
			_, isText := b.(Text)
			if !isText && m.Role != RoleAssistant {
				err = fmt.Errorf("%s blocks belong in assistant messages", b.blockType())
			}
		case ToolUse:
			switch {
			case m.Role != RoleAssistant:
				err = fmt.Errorf("tool_use blocks belong in assistant messages")
			case b.ID == "" || b.Name == "":
				err = fmt.Errorf("tool_use needs an ID and a Name")
			case len(b.Input) > 0 && !json.Valid(b.Input):
				err = fmt.Errorf("tool_use %s: Input is not valid JSON", b.ID)
			}
		case ToolResult:
			switch {
			case m.Role != RoleUser:
				err = fmt.Errorf("tool_result blocks belong in user messages")
			case b.ToolUseID == "":
				err = fmt.Errorf("tool_result needs the ToolUseID it answers")
			}
			for _, c := range b.Content {
				switch c := c.(type) {
				case Text:
				case Image:
					if err == nil {
						err = c.validate()
					}
				default:
					err = fmt.Errorf("tool_result %s: only text and image content, not %s", b.ToolUseID, c.blockType())
				}
			}
		case Image:
			if m.Role != RoleUser {
				err = fmt.Errorf("image blocks belong in user messages")
			} else {
				err = b.validate()
			}
		case nil:
			err = fmt.Errorf("nil block")
		}
		if err != nil {
			return fmt.Errorf("block %d: %w", j, err)
		}
	}
	return nil
}

func (im Image) validate() error {
	switch im.MediaType {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
	default:
		return fmt.Errorf("image media type %q; want image/png, image/jpeg, image/gif or image/webp", im.MediaType)
	}
	if len(im.Data) == 0 {
		return fmt.Errorf("image has no data")
	}
	return nil
}
