package builtin

import (
	"context"
	"encoding/json"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/tools"
	"github.com/harvest-dev/harvest/base/tracing"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/llm"
)

// callOutcome is one tool call's result as the loop tracks it.
type callOutcome struct {
	call    llm.ToolUse
	res     tools.Result
	blocked string
	dur     time.Duration
	ran     bool
}

// runTools runs a step's tool calls: consecutive read-only calls in
// parallel, the others one at a time, in the model's order. Hooks run in
// order, never concurrently. It returns the tool results for the model and,
// when a hook interrupted the turn, its outcome.
func (t *turn) runTools(calls []llm.ToolUse, truncated bool) ([]llm.Block, *agent.Outcome) {
	a := t.a
	outs := make([]callOutcome, len(calls))
	var stop *agent.Outcome
	for i := 0; i < len(calls); {
		// The group: calls[i:j], all read-only, or one call that is not.
		j := i + 1
		if a.readOnly(calls[i].Name) {
			for j < len(calls) && a.readOnly(calls[j].Name) {
				j++
			}
		}
		var run []int
		for k := i; k < j; k++ {
			c := calls[k]
			outs[k].call = c
			t.emit(event.ToolStarted{CallID: c.ID, Tool: c.Name, Input: validJSON(c.Input), Summary: summarize(c.Name, c.Input)})
			if stop != nil || t.ctx.Err() != nil {
				continue
			}
			if truncated && !json.Valid(c.Input) {
				outs[k].res = tools.Result{IsError: true, Output: "This call's input was cut off at the output token limit, so it was not run. Make the call again with a smaller input (for a big file, write it in parts or use edit)."}
				outs[k].ran = true
				continue
			}
			hr, notes := t.hooks(HookInput{Event: PreToolUse, SessionID: a.session, Cwd: a.env.Workdir(), ToolName: c.Name, ToolInput: validJSON(c.Input)})
			t.logNotes(notes)
			switch hr.Decision {
			case Block:
				outs[k].blocked = hr.Reason
				outs[k].res = tools.Result{IsError: true, Denied: true, Output: "A hook blocked this call: " + hr.Reason}
				outs[k].ran = true
				continue
			case Interrupt:
				o := t.fail(event.FailInterrupted, "a hook stopped the turn before "+c.Name+": "+hr.Reason)
				stop = &o
				continue
			}
			run = append(run, k)
		}
		runStart := a.now()
		t.execute(outs, run)
		t.stats.Tools += a.now().Sub(runStart)
		for k := i; k < j; k++ {
			o := &outs[k]
			if !o.ran {
				o.res = tools.Result{IsError: true, Output: "Not run: the turn was stopped before this call."}
			} else if slices.Contains(run, k) {
				hr, notes := t.hooks(HookInput{
					Event: PostToolUse, SessionID: a.session, Cwd: a.env.Workdir(), ToolName: o.call.Name,
					ToolInput: validJSON(o.call.Input), ToolResponse: &HookToolResponse{Output: o.res.Output, IsError: o.res.IsError},
				})
				t.logNotes(notes)
				switch hr.Decision {
				case Block:
					o.res.Output += "\n\n[A hook objected to this result: " + hr.Reason + "]"
				case Interrupt:
					if stop == nil {
						out := t.fail(event.FailInterrupted, "a hook stopped the turn after "+o.call.Name+": "+hr.Reason)
						stop = &out
					}
				}
			}
			t.emit(event.ToolFinished{
				CallID: o.call.ID, Tool: o.call.Name, Output: o.res.Output, IsError: o.res.IsError,
				DurationMS: o.dur.Milliseconds(), Blocked: o.blocked,
			})
			if o.call.Name == "todo" && !o.res.IsError {
				t.emit(event.TodoUpdated{Items: todoItems(a.env.Todos())})
			}
			errText := ""
			if o.res.IsError {
				errText = o.res.Output
			}
			t.detector.call(o.call.Name, o.call.Input, errText)
		}
		i = j
	}
	blocks := make([]llm.Block, len(outs))
	for k, o := range outs {
		blocks[k] = llm.ToolResult{ToolUseID: o.call.ID, Content: []llm.Block{llm.Text{Text: nonEmpty(o.res.Output)}}, IsError: o.res.IsError}
	}
	return blocks, stop
}

// tracerScope is this package's tracing scope.
const tracerScope = "github.com/harvest-dev/harvest/agent/builtin"

// maxLiveOutput bounds the tool.output events of one call; what the model
// gets is bounded separately by the tool.
const maxLiveOutput = 1 << 20

type outputChunk struct {
	id, stream, text string
}

// execute runs the calls outs[k] for k in run, at once, each on its own
// goroutine, and emits their live output (tool.output) from the turn's
// goroutine while they run. It returns when all have returned.
func (t *turn) execute(outs []callOutcome, run []int) {
	if len(run) == 0 {
		return
	}
	ch := make(chan outputChunk, 64)
	var wg sync.WaitGroup
	for _, k := range run {
		o := &outs[k]
		ctx := tools.WithOutput(t.ctx, liveOutput(t.ctx, o.call.ID, ch))
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := t.a.now()
			// A span of the turn's trace, when it is traced.
			ctx, span := tracing.Start(ctx, tracerScope, "tool "+o.call.Name, trace.WithAttributes(
				attribute.String("harvest.tool", o.call.Name), attribute.String("harvest.call", o.call.ID)))
			o.res = t.a.reg.Run(ctx, t.a.env, o.call.Name, o.call.Input)
			o.dur = t.a.now().Sub(start)
			o.ran = true
			if o.res.IsError && span.IsRecording() {
				span.SetStatus(codes.Error, "the tool answered an error")
			}
			span.End()
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	for {
		select {
		case c := <-ch:
			t.emit(event.ToolOutput{CallID: c.id, Stream: c.stream, Text: c.text})
		case <-done:
			for {
				select {
				case c := <-ch:
					t.emit(event.ToolOutput{CallID: c.id, Stream: c.stream, Text: c.text})
				default:
					return
				}
			}
		}
	}
}

// liveOutput is the tools.OutputFunc of one call: it cuts the output at
// whole UTF-8 characters and hands it to the turn's goroutine, up to
// maxLiveOutput bytes.
func liveOutput(ctx context.Context, id string, ch chan<- outputChunk) tools.OutputFunc {
	var mu sync.Mutex
	sent := 0
	partial := map[string][]byte{}
	return func(stream string, p []byte) {
		mu.Lock()
		if sent >= maxLiveOutput {
			mu.Unlock()
			return
		}
		b := append(partial[stream], p...)
		cut := len(b)
		for i := 1; i <= 3 && i <= len(b); i++ { // an incomplete rune at the end waits for the rest
			if r := b[len(b)-i]; r >= 0xC0 {
				if need := utf8Len(r); need > i {
					cut = len(b) - i
				}
				break
			} else if r < 0x80 {
				break
			}
		}
		partial[stream] = append([]byte(nil), b[cut:]...)
		text := string(b[:cut])
		sent += len(text)
		mu.Unlock()
		if text == "" {
			return
		}
		select {
		case ch <- outputChunk{id, stream, text}:
		case <-ctx.Done():
		}
	}
}

// utf8Len is the length of the UTF-8 sequence a leading byte starts.
func utf8Len(b byte) int {
	switch {
	case b >= 0xF0:
		return 4
	case b >= 0xE0:
		return 3
	default:
		return 2
	}
}

func (a *Agent) readOnly(name string) bool {
	tool, ok := a.reg.Lookup(name)
	return ok && tool.ReadOnly()
}

// nonEmpty gives an empty output a visible form: APIs reject empty text.
func nonEmpty(s string) string {
	if s == "" {
		return "(no output)"
	}
	return s
}

func validJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || !json.Valid(raw) {
		b, _ := json.Marshal(string(raw))
		return b
	}
	return raw
}

// summarize is a tool call in one line, for people: "bash: go test ./...".
func summarize(name string, input json.RawMessage) string {
	var in map[string]any
	_ = json.Unmarshal(input, &in)
	for _, key := range []string{"command", "path", "pattern", "id", "ref"} {
		if v, ok := in[key].(string); ok && v != "" {
			v = strings.Join(strings.Fields(v), " ")
			if len(v) > 100 {
				v = v[:97] + "..."
			}
			if key == "path" {
				v = path.Clean(v)
			}
			return name + ": " + v
		}
	}
	return name
}

func todoItems(items []tools.TodoItem) []event.TodoItem {
	out := make([]event.TodoItem, len(items))
	for i, it := range items {
		out[i] = event.TodoItem{Content: it.Content, Status: string(it.Status)}
	}
	return out
}

func eventUsage(u llm.Usage) event.Usage {
	return event.Usage{
		InputTokens: int64(u.InputTokens), OutputTokens: int64(u.OutputTokens),
		CacheReadTokens: int64(u.CacheReadTokens), CacheWriteTokens: int64(u.CacheWriteTokens),
	}
}

// appendUser adds blocks to the conversation as the user: to the last
// message when it is already the user's (tool results, then a note or the
// next prompt, in one message as the APIs want), else as a new message.
func appendUser(msgs []llm.Message, blocks ...llm.Block) []llm.Message {
	if n := len(msgs); n > 0 && msgs[n-1].Role == llm.RoleUser {
		last := msgs[n-1]
		content := append(append([]llm.Block(nil), last.Content...), blocks...)
		msgs = append(msgs[:n-1:n-1], llm.Message{Role: llm.RoleUser, Content: content})
		return msgs
	}
	return append(msgs, llm.Message{Role: llm.RoleUser, Content: blocks})
}

// closeDangling answers every tool call of a final assistant message that has
// no result yet (a turn cancelled mid-step, a crash), so the conversation is
// valid to send again.
func closeDangling(msgs []llm.Message, why string) []llm.Message {
	n := len(msgs)
	if n == 0 || msgs[n-1].Role != llm.RoleAssistant {
		return msgs
	}
	var blocks []llm.Block
	for _, c := range msgs[n-1].ToolUses() {
		blocks = append(blocks, llm.ToolResult{ToolUseID: c.ID, Content: []llm.Block{llm.Text{Text: why}}, IsError: true})
	}
	if len(blocks) == 0 {
		return msgs
	}
	return append(msgs, llm.Message{Role: llm.RoleUser, Content: blocks})
}
