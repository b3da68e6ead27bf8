package builtin

import (
	"context"
	"fmt"
	"strings"

	"github.com/harvest-dev/harvest/llm"
)

// Compaction keeps a long turn inside the model's context window.
//
// Before each model call the loop measures the conversation: the larger of
// the provider's last reported context (input, cache and output tokens of the
// previous step) and an estimate of the messages (4 bytes a token). Above
// threshold × window (default 0.85) it compacts, in two stages:
//
//  1. prune: tool outputs older than the most recent protect_tokens are
//     replaced by a one-line stub. Tool calls and their results stay paired,
//     so the conversation remains valid. Often enough on its own: tool output
//     is most of an agent's context.
//  2. summarise: if still above, the messages before the most recent
//     protect_tokens are sent to the model to summarise, and replaced by one
//     user message carrying the original task (verbatim) and the summary. The
//     cut is placed before an assistant message, so the kept tail never
//     starts with an orphaned tool result.
//
// A compaction event records the tokens before and after.

// Compaction defaults.
const (
	DefaultCompactThreshold = 0.85
	DefaultProtectTokens    = 40000
	prunedStub              = "[output pruned by Harvest to save context: %d bytes]"
)

// estimateTokens guesses a conversation's size: 4 bytes a token, plus a little
// per block for framing.
func estimateTokens(system string, msgs []llm.Message) int {
	n := len(system) / 4
	for _, m := range msgs {
		n += messageTokens(m)
	}
	return n
}

func messageTokens(m llm.Message) int {
	n := 4
	for _, b := range m.Content {
		n += blockTokens(b)
	}
	return n
}

func blockTokens(b llm.Block) int {
	switch v := b.(type) {
	case llm.Text:
		return 3 + len(v.Text)/4
	case llm.Thinking:
		return 3 + len(v.Text)/4
	case llm.ToolUse:
		return 8 + (len(v.Name)+len(v.Input))/4
	case llm.ToolResult:
		n := 8
		for _, c := range v.Content {
			n += blockTokens(c)
		}
		return n
	case llm.Image:
		return 1600
	}
	return 4
}

type compactor struct {
	window    int
	threshold float64
	protect   int
	disabled  bool
}

func newCompactor(window int, cfg CompactionConfig) *compactor {
	c := &compactor{window: window, threshold: cfg.Threshold, protect: cfg.ProtectTokens, disabled: cfg.Disabled}
	if c.threshold == 0 {
		c.threshold = DefaultCompactThreshold
	}
	if c.protect == 0 {
		c.protect = DefaultProtectTokens
	}
	// The tail kept verbatim must leave room below the threshold.
	if limit := int(float64(window) * c.threshold / 2); c.protect > limit {
		c.protect = limit
	}
	return c
}

func (c *compactor) limit() int { return int(float64(c.window) * c.threshold) }

// needed reports whether a conversation of this measured size must shrink.
func (c *compactor) needed(tokens int) bool {
	return !c.disabled && c.window > 0 && tokens > c.limit()
}

// protectedStart returns the index of the first message of the tail that fits
// in protect tokens (at least the last message).
func (c *compactor) protectedStart(msgs []llm.Message) int {
	total := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		total += messageTokens(msgs[i])
		if total > c.protect {
			return min(i+1, len(msgs)-1)
		}
	}
	return 0
}

// prune stubs out tool results before the protected tail. It returns the new
// messages (the input is not modified) and how many outputs it pruned.
func (c *compactor) prune(msgs []llm.Message) ([]llm.Message, int) {
	start := c.protectedStart(msgs)
	out := make([]llm.Message, len(msgs))
	copy(out, msgs)
	pruned := 0
	for i := 0; i < start; i++ {
		m := out[i]
		var blocks []llm.Block
		changed := false
		for _, b := range m.Content {
			tr, ok := b.(llm.ToolResult)
			if !ok || isStub(tr) {
				blocks = append(blocks, b)
				continue
			}
			size := 0
			for _, cb := range tr.Content {
				size += blockTokens(cb) * 4
			}
			if size < 200 {
				blocks = append(blocks, b)
				continue
			}
			tr.Content = []llm.Block{llm.Text{Text: fmt.Sprintf(prunedStub, size)}}
			blocks = append(blocks, tr)
			changed = true
			pruned++
		}
		if changed {
			out[i] = llm.Message{Role: m.Role, Content: blocks}
		}
	}
	return out, pruned
}

func isStub(tr llm.ToolResult) bool {
	if len(tr.Content) != 1 {
		return false
	}
	t, ok := tr.Content[0].(llm.Text)
	return ok && strings.HasPrefix(t.Text, "[output pruned by Harvest")
}

// summaryCut returns where the kept tail starts: the first assistant message
// at or after the protected start (0 if nothing can be summarised).
func (c *compactor) summaryCut(msgs []llm.Message) int {
	for i := c.protectedStart(msgs); i < len(msgs); i++ {
		if msgs[i].Role == llm.RoleAssistant && i >= 2 {
			return i
		}
	}
	// The tail is one long run without a usable boundary: keep the last
	// assistant message and what follows.
	for i := len(msgs) - 1; i >= 2; i-- {
		if msgs[i].Role == llm.RoleAssistant {
			return i
		}
	}
	return 0
}

const summaryPrompt = `You are compacting the history of a coding agent's session so it can keep working within its context window.
Write a summary the agent will continue from. Include, concretely:
- the task and any constraints the user stated;
- what has been done so far: files read, created or changed (with paths), commands run and their results;
- what was learned (errors, causes, decisions);
- what remains to be done, and the next step.
Do not invent anything. Be specific and brief.`

// summarise asks the model for a summary of msgs[:cut] and returns the
// compacted conversation.
func (c *compactor) summarise(ctx context.Context, client *llm.Client, task string, msgs []llm.Message, cut int) ([]llm.Message, error) {
	var b strings.Builder
	for _, m := range msgs[:cut] {
		renderMessage(&b, m)
	}
	maxOut := min(4096, max(256, c.protect/2))
	resp, err := client.Complete(ctx, llm.Request{
		System:    summaryPrompt,
		Messages:  []llm.Message{llm.UserText("Here is the history to summarise:\n\n" + b.String())},
		MaxTokens: maxOut,
	})
	if err != nil {
		return nil, fmt.Errorf("summarising for compaction: %w", err)
	}
	summary := strings.TrimSpace(resp.Message.Text())
	if summary == "" {
		return nil, fmt.Errorf("summarising for compaction: the model returned no text")
	}
	head := llm.UserText("[Harvest compacted this conversation to fit the model's context window.]\n\n" +
		"The task you were given:\n" + task + "\n\nSummary of the work so far:\n" + summary + "\n\n[The conversation continues from here.]")
	out := append([]llm.Message{head}, msgs[cut:]...)
	return out, nil
}

func renderMessage(b *strings.Builder, m llm.Message) {
	for _, blk := range m.Content {
		switch v := blk.(type) {
		case llm.Text:
			fmt.Fprintf(b, "%s: %s\n\n", strings.ToUpper(string(m.Role)), v.Text)
		case llm.ToolUse:
			fmt.Fprintf(b, "TOOL CALL %s %s\n\n", v.Name, clipString(string(v.Input), 1000))
		case llm.ToolResult:
			var out strings.Builder
			for _, cb := range v.Content {
				if t, ok := cb.(llm.Text); ok {
					out.WriteString(t.Text)
				}
			}
			label := "TOOL RESULT"
			if v.IsError {
				label = "TOOL ERROR"
			}
			fmt.Fprintf(b, "%s: %s\n\n", label, clipString(out.String(), 2000))
		}
	}
}

func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n/2] + "\n[...]\n" + s[len(s)-n/2:]
}

// contextTokens is the measured size of the conversation: the larger of what
// the provider last reported and the estimate.
func contextTokens(last *llm.Usage, system string, msgs []llm.Message) int {
	est := estimateTokens(system, msgs)
	if last == nil {
		return est
	}
	reported := last.PromptTokens() + last.OutputTokens
	return max(reported, est)
}
