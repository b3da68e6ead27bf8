package anthropic

import (
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go"

	"github.com/harvest-dev/harvest/llm"
)

// assembler turns Messages API stream events into llm events and the final
// response.
//
// Event order (https://docs.claude.com/en/api/messages-streaming):
// message_start, then per content block content_block_start, deltas,
// content_block_stop, then message_delta (stop reason, final usage) and
// message_stop. Blocks are addressed by index; deltas of different blocks may
// interleave, so every block is built in its own slot.
type assembler struct {
	emit    func(llm.Event)
	resp    llm.Response
	blocks  []*block
	out     int  // blocks in the message so far
	stopped bool // message_stop seen
}

// block is one content block being built. out is its index in the message,
// or -1 for block types Harvest does not model (server tool results), which
// are skipped.
type block struct {
	out       int
	kind      string
	text      strings.Builder
	signature strings.Builder
	data      string
	id, name  string
	input     strings.Builder
}

func (a *assembler) send(ev llm.Event) {
	if a.emit != nil {
		a.emit(ev)
	}
}

func (a *assembler) add(ev sdk.MessageStreamEventUnion) {
	switch ev.Type {
	case "message_start":
		m := ev.Message
		a.resp.ID = m.ID
		a.resp.Model = string(m.Model)
		a.resp.Usage = llm.Usage{
			InputTokens:      int(m.Usage.InputTokens),
			OutputTokens:     int(m.Usage.OutputTokens),
			CacheReadTokens:  int(m.Usage.CacheReadInputTokens),
			CacheWriteTokens: int(m.Usage.CacheCreationInputTokens),
		}
	case "content_block_start":
		a.start(int(ev.Index), ev.ContentBlock)
	case "content_block_delta":
		a.delta(int(ev.Index), ev.Delta)
	case "content_block_stop":
		if b := a.block(int(ev.Index)); b != nil {
			a.send(llm.BlockStop{Index: b.out})
		}
	case "message_delta":
		a.resp.StopReason = stopReason(ev.Delta.StopReason)
		a.resp.StopSequence = ev.Delta.StopSequence
		// message_delta's usage is cumulative: output_tokens always, the input
		// counts when the server updates them.
		u := ev.Usage
		a.resp.Usage.OutputTokens = int(u.OutputTokens)
		if u.JSON.InputTokens.Valid() {
			a.resp.Usage.InputTokens = int(u.InputTokens)
		}
		if u.JSON.CacheReadInputTokens.Valid() {
			a.resp.Usage.CacheReadTokens = int(u.CacheReadInputTokens)
		}
		if u.JSON.CacheCreationInputTokens.Valid() {
			a.resp.Usage.CacheWriteTokens = int(u.CacheCreationInputTokens)
		}
	case "message_stop":
		a.stopped = true
	}
}

func (a *assembler) start(index int, cb sdk.ContentBlockStartEventContentBlockUnion) {
	for len(a.blocks) <= index {
		a.blocks = append(a.blocks, nil)
	}
	b := &block{out: -1, kind: cb.Type}
	a.blocks[index] = b
	switch cb.Type {
	case "text", "thinking", "redacted_thinking", "tool_use":
	default:
		return
	}
	b.out = a.out
	a.out++
	switch cb.Type {
	case "text":
		if cb.Text != "" {
			b.text.WriteString(cb.Text)
			a.send(llm.TextDelta{Index: b.out, Text: cb.Text})
		}
	case "thinking":
		b.signature.WriteString(cb.Signature)
		if cb.Thinking != "" {
			b.text.WriteString(cb.Thinking)
			a.send(llm.ThinkingDelta{Index: b.out, Text: cb.Thinking})
		}
	case "redacted_thinking":
		b.data = cb.Data
	case "tool_use":
		b.id, b.name = cb.ID, cb.Name
		a.send(llm.ToolUseStart{Index: b.out, ID: cb.ID, Name: cb.Name})
	}
}

func (a *assembler) block(index int) *block {
	if index < 0 || index >= len(a.blocks) || a.blocks[index] == nil || a.blocks[index].out < 0 {
		return nil
	}
	return a.blocks[index]
}

func (a *assembler) delta(index int, d sdk.MessageStreamEventUnionDelta) {
	b := a.block(index)
	if b == nil {
		return
	}
	switch d.Type {
	case "text_delta":
		b.text.WriteString(d.Text)
		a.send(llm.TextDelta{Index: b.out, Text: d.Text})
	case "thinking_delta":
		b.text.WriteString(d.Thinking)
		a.send(llm.ThinkingDelta{Index: b.out, Text: d.Thinking})
	case "signature_delta":
		b.signature.WriteString(d.Signature)
	case "input_json_delta":
		if d.PartialJSON != "" {
			b.input.WriteString(d.PartialJSON)
			a.send(llm.ToolInputDelta{Index: b.out, PartialJSON: d.PartialJSON})
		}
	}
}

// finish builds the message. A tool input that is not valid JSON is only
// acceptable when the output was cut off (max_tokens): the call is kept with
// an empty input, and the stop reason tells the caller not to run it.
func (a *assembler) finish() error {
	a.resp.Message = llm.Message{Role: llm.RoleAssistant}
	for _, b := range a.blocks {
		if b == nil || b.out < 0 {
			continue
		}
		switch b.kind {
		case "text":
			a.resp.Message.Content = append(a.resp.Message.Content, llm.Text{Text: b.text.String()})
		case "thinking":
			a.resp.Message.Content = append(a.resp.Message.Content, llm.Thinking{Text: b.text.String(), Signature: b.signature.String()})
		case "redacted_thinking":
			a.resp.Message.Content = append(a.resp.Message.Content, llm.RedactedThinking{Data: b.data})
		case "tool_use":
			input := json.RawMessage(b.input.String())
			switch {
			case len(input) == 0:
				input = json.RawMessage(`{}`)
			case !json.Valid(input):
				if a.resp.StopReason != llm.StopMaxTokens {
					return fmt.Errorf("the API sent tool_use %s (%s) with input that is not valid JSON: %.200s", b.id, b.name, input)
				}
				input = json.RawMessage(`{}`)
			}
			a.resp.Message.Content = append(a.resp.Message.Content, llm.ToolUse{ID: b.id, Name: b.name, Input: input})
		}
	}
	return nil
}

func stopReason(r sdk.StopReason) llm.StopReason {
	switch r {
	case sdk.StopReasonModelContextWindowExceeded:
		return llm.StopMaxTokens
	default:
		// end_turn, tool_use, max_tokens, stop_sequence and refusal are ours
		// verbatim; others (pause_turn) pass through.
		return llm.StopReason(r)
	}
}
