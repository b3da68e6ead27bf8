package openai

import (
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/openai/openai-go/v3"

	"github.com/harvest-dev/harvest/llm"
)

// assembler turns chat.completion.chunk events into llm events and the final
// response.
//
// Chat Completions has no block boundaries: a chunk's delta carries content
// text, tool-call pieces (addressed by tool_calls[].index, with id and name in
// the first piece) or reasoning. A block is opened when the kind of delta
// changes or a new tool call starts, and closed (BlockStop) when the next one
// opens or the stream ends. Only choice 0 is read; Harvest never asks for n > 1.
type assembler struct {
	emit     func(llm.Event)
	resp     llm.Response
	blocks   []*block
	open     int           // index of the block deltas go to, -1 for none
	tools    map[int64]int // tool_calls[].index -> block index
	reason   string        // finish_reason
	refusal  bool
	finished bool // a finish_reason arrived
}

type block struct {
	kind     string // "text", "thinking", "tool_use"
	text     strings.Builder
	id, name string
	input    strings.Builder
	stopped  bool
}

func (a *assembler) send(ev llm.Event) {
	if a.emit != nil {
		a.emit(ev)
	}
}

func (a *assembler) add(c sdk.ChatCompletionChunk) {
	if a.resp.ID == "" {
		a.resp.ID = c.ID
	}
	if c.Model != "" {
		a.resp.Model = c.Model
	}
	if c.JSON.Usage.Valid() {
		a.usage(c.Usage)
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		a.delta(ch.Delta)
		if ch.FinishReason != "" {
			a.reason = ch.FinishReason
			a.finished = true
		}
	}
}

func (a *assembler) usage(u sdk.CompletionUsage) {
	cached := int(u.PromptTokensDetails.CachedTokens)
	written := int(u.PromptTokensDetails.CacheWriteTokens)
	a.resp.Usage = llm.Usage{
		InputTokens:      max(int(u.PromptTokens)-cached-written, 0),
		OutputTokens:     int(u.CompletionTokens),
		CacheReadTokens:  cached,
		CacheWriteTokens: written,
	}
}

func (a *assembler) delta(d sdk.ChatCompletionChunkChoiceDelta) {
	if r := reasoning(d); r != "" {
		b := a.current("thinking")
		b.text.WriteString(r)
		a.send(llm.ThinkingDelta{Index: a.open, Text: r})
	}
	if d.Content != "" {
		a.text(d.Content)
	}
	if d.Refusal != "" {
		// A refusal is shown as text; the stop reason says what it is.
		a.refusal = true
		a.text(d.Refusal)
	}
	for _, tc := range d.ToolCalls {
		i, ok := a.tools[tc.Index]
		if !ok {
			a.stop()
			i = len(a.blocks)
			b := &block{kind: "tool_use", id: tc.ID, name: tc.Function.Name}
			if b.id == "" {
				// Some OpenAI-compatible servers send no id; results are paired
				// with calls by id, so make one up.
				b.id = fmt.Sprintf("call_%d", i)
			}
			a.blocks = append(a.blocks, b)
			a.open = i
			if a.tools == nil {
				a.tools = map[int64]int{}
			}
			a.tools[tc.Index] = i
			a.send(llm.ToolUseStart{Index: i, ID: b.id, Name: b.name})
		}
		b := a.blocks[i]
		if b.name == "" {
			b.name = tc.Function.Name
		}
		if args := tc.Function.Arguments; args != "" {
			b.input.WriteString(args)
			a.send(llm.ToolInputDelta{Index: i, PartialJSON: args})
		}
	}
}

func (a *assembler) text(t string) {
	a.current("text").text.WriteString(t)
	a.send(llm.TextDelta{Index: a.open, Text: t})
}

// reasoning returns the delta's reasoning text, which OpenAI-compatible
// servers send in a field the SDK does not model.
func reasoning(d sdk.ChatCompletionChunkChoiceDelta) string {
	for _, key := range []string{"reasoning_content", "reasoning"} {
		// The SDK marks fields it does not model as not Valid; read them raw.
		if f, ok := d.JSON.ExtraFields[key]; ok {
			var s string
			if json.Unmarshal([]byte(f.Raw()), &s) == nil && s != "" {
				return s
			}
		}
	}
	return ""
}

// current returns the open block if it is of kind, else opens a new one.
func (a *assembler) current(kind string) *block {
	if a.open >= 0 && a.open < len(a.blocks) && a.blocks[a.open].kind == kind && !a.blocks[a.open].stopped {
		return a.blocks[a.open]
	}
	a.stop()
	b := &block{kind: kind}
	a.blocks = append(a.blocks, b)
	a.open = len(a.blocks) - 1
	return b
}

// stop closes the open block.
func (a *assembler) stop() {
	if a.open >= 0 && a.open < len(a.blocks) && !a.blocks[a.open].stopped {
		a.blocks[a.open].stopped = true
		a.send(llm.BlockStop{Index: a.open})
	}
	a.open = -1
}

// finish closes what is open and builds the message.
func (a *assembler) finish() error {
	a.stop()
	for i, b := range a.blocks {
		if !b.stopped {
			b.stopped = true
			a.send(llm.BlockStop{Index: i})
		}
	}
	a.resp.StopReason = stopReason(a.reason)
	if a.refusal {
		a.resp.StopReason = llm.StopRefusal
	}
	a.resp.Message = llm.Message{Role: llm.RoleAssistant}
	for _, b := range a.blocks {
		switch b.kind {
		case "text":
			a.resp.Message.Content = append(a.resp.Message.Content, llm.Text{Text: b.text.String()})
		case "thinking":
			a.resp.Message.Content = append(a.resp.Message.Content, llm.Thinking{Text: b.text.String()})
		case "tool_use":
			input := json.RawMessage(b.input.String())
			switch {
			case len(input) == 0:
				input = json.RawMessage(`{}`)
			case !json.Valid(input):
				if a.resp.StopReason != llm.StopMaxTokens {
					return fmt.Errorf("the server sent tool call %s (%s) with arguments that are not valid JSON: %.200s", b.id, b.name, input)
				}
				input = json.RawMessage(`{}`)
			}
			a.resp.Message.Content = append(a.resp.Message.Content, llm.ToolUse{ID: b.id, Name: b.name, Input: input})
			// Some servers end a tool-calling turn with "stop".
			if a.resp.StopReason == llm.StopEndTurn {
				a.resp.StopReason = llm.StopToolUse
			}
		}
	}
	return nil
}

func stopReason(r string) llm.StopReason {
	switch r {
	case "stop":
		return llm.StopEndTurn
	case "tool_calls", "function_call":
		return llm.StopToolUse
	case "length":
		return llm.StopMaxTokens
	case "content_filter":
		return llm.StopRefusal
	}
	return llm.StopReason(r)
}
