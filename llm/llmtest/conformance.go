package llmtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/sim"
)

// Tools offered in the suite's requests.
var (
	BashTool = llm.Tool{Name: "bash", Description: "Run a shell command in the workspace.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"},"timeout":{"type":"integer"}},"required":["command"]}`)}
	ReadTool = llm.Tool{Name: "read", Description: "Read a file.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"lines":{"type":"array","items":{"type":"integer"}}},"required":["path"]}`)}
)

// LongText is a reply long enough to stream in dozens of pieces.
var LongText = strings.Repeat("The quick brown fox jumps over the lazy dog while the sim streams it. ", 20)

// Run runs the conformance suite against b.
func Run(t *testing.T, b Backend) {
	t.Run("StreamText", func(t *testing.T) { testStreamText(t, b) })
	t.Run("StreamToolCalls", func(t *testing.T) { testStreamToolCalls(t, b) })
	t.Run("MultiTurnToolUse", func(t *testing.T) { testMultiTurn(t, b) })
	t.Run("Thinking", func(t *testing.T) { testThinking(t, b) })
	t.Run("Images", func(t *testing.T) { testImages(t, b) })
	t.Run("StopReasons", func(t *testing.T) { testStopReasons(t, b) })
	t.Run("RetryHonoursRetryAfter", func(t *testing.T) { testRetryAfter(t, b) })
	t.Run("RetryBackoffThenGiveUp", func(t *testing.T) { testRetryExhausted(t, b) })
	t.Run("RetryAfterTooLong", func(t *testing.T) { testRetryAfterTooLong(t, b) })
	t.Run("NoRetry", func(t *testing.T) { testNoRetry(t, b) })
	t.Run("CancelMidStream", func(t *testing.T) { testCancelMidStream(t, b) })
	t.Run("CancelDuringBackoff", func(t *testing.T) { testCancelDuringBackoff(t, b) })
	t.Run("TimeoutBeforeFirstEventRetries", func(t *testing.T) { testTimeoutRetried(t, b) })
	t.Run("TimeoutAfterEventsDoesNotRetry", func(t *testing.T) { testTimeoutNotRetried(t, b) })
	t.Run("UsageAndCost", func(t *testing.T) { testUsageAndCost(t, b) })
	t.Run("InvalidRequestNeverSent", func(t *testing.T) { testInvalid(t, b) })
	t.Run("ConcurrentComplete", func(t *testing.T) { testConcurrent(t, b) })
}

func request(text string) llm.Request {
	return llm.Request{System: "You are Harvest's test agent.", Messages: []llm.Message{llm.UserText(text)}, MaxTokens: 1024}
}

func testStreamText(t *testing.T, b Backend) {
	const text = "Hello from the sim: this reply is long enough to arrive in several pieces, one after another."
	s := StartSim(t, fmt.Sprintf(`
rules:
  - name: hello
    when: {model: %q, last_user: "say hello", system: "Harvest's test agent"}
    reply:
      text: %q
      usage: {input_tokens: 42, output_tokens: 17}
`, b.Model, text))
	c, _ := Client(t, b, s)
	var ev Events
	resp, err := c.Stream(context.Background(), request("please say hello"), ev.Add)
	if err != nil {
		t.Fatal(err)
	}
	if n := ev.Count(isText); n < 3 {
		t.Errorf("got %d text deltas, want the reply in several pieces", n)
	}
	if got := ev.Text(0); got != text {
		t.Errorf("streamed text %q, want %q", got, text)
	}
	if last, ok := ev.List[len(ev.List)-1].(llm.BlockStop); !ok || last.Index != 0 {
		t.Errorf("last event %#v, want BlockStop{0}", ev.List[len(ev.List)-1])
	}
	if n := ev.Count(func(e llm.Event) bool { return !isText(e) && !isStop(e) }); n != 0 {
		t.Errorf("%d events other than text deltas and block stops: %#v", n, ev.List)
	}
	if resp.Message.Role != llm.RoleAssistant || len(resp.Message.Content) != 1 || resp.Message.Text() != text {
		t.Errorf("message %#v, want one text block %q", resp.Message, text)
	}
	if resp.StopReason != llm.StopEndTurn {
		t.Errorf("stop reason %q, want end_turn", resp.StopReason)
	}
	if resp.Usage != (llm.Usage{InputTokens: 42, OutputTokens: 17}) {
		t.Errorf("usage %+v, want 42 in, 17 out", resp.Usage)
	}
	if resp.ID == "" || resp.Model != b.Model {
		t.Errorf("id %q model %q, want an id and model %q", resp.ID, resp.Model, b.Model)
	}
	log := s.Log()
	if len(log) != 1 || log[0].Rule != "hello" || !log[0].Stream || log[0].Model != b.Model {
		t.Errorf("sim log %+v, want one streamed request answered by rule hello", log)
	}
}

func testStreamToolCalls(t *testing.T, b Backend) {
	s := StartSim(t, `
rules:
  - name: calls
    when: {tools: [bash, read]}
    reply:
      text: "Let me look around."
      tool_calls:
        - {name: bash, id: call_bash_1, input: {command: "ls -la /workspace && echo 'done: ✓ — \"quoted\"'", timeout: 30}}
        - {name: read, id: call_read_2, input: {path: "/workspace/README.md", lines: [1, 40]}}
`)
	c, _ := Client(t, b, s)
	req := request("look around")
	req.Tools = []llm.Tool{BashTool, ReadTool}
	var ev Events
	resp, err := c.Stream(context.Background(), req, ev.Add)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StopReason != llm.StopToolUse {
		t.Errorf("stop reason %q, want tool_use", resp.StopReason)
	}
	want := []llm.ToolUse{
		{ID: "call_bash_1", Name: "bash", Input: json.RawMessage(`{"command":"ls -la /workspace && echo 'done: ✓ — \"quoted\"'","timeout":30}`)},
		{ID: "call_read_2", Name: "read", Input: json.RawMessage(`{"path":"/workspace/README.md","lines":[1,40]}`)},
	}
	if len(resp.Message.Content) != 3 || resp.Message.Text() != "Let me look around." {
		t.Fatalf("content %#v, want text then two tool calls", resp.Message.Content)
	}
	uses := resp.Message.ToolUses()
	if len(uses) != 2 {
		t.Fatalf("tool uses %#v, want 2", uses)
	}
	for i, u := range uses {
		w := want[i]
		if u.ID != w.ID || u.Name != w.Name || !JSONEqual(t, u.Input, w.Input) {
			t.Errorf("tool use %d = %s %s %s, want %s %s %s", i, u.ID, u.Name, u.Input, w.ID, w.Name, w.Input)
		}
		index := i + 1
		// The streamed pieces, joined, are exactly the final input; one piece
		// alone is not JSON.
		var pieces []string
		started, stopped := false, false
		for _, e := range ev.List {
			switch e := e.(type) {
			case llm.ToolUseStart:
				if e.Index == index {
					started = true
					if e.ID != w.ID || e.Name != w.Name {
						t.Errorf("ToolUseStart %+v, want id %s name %s", e, w.ID, w.Name)
					}
				}
			case llm.ToolInputDelta:
				if e.Index == index {
					if !started || stopped {
						t.Errorf("input delta for block %d outside its start and stop", index)
					}
					pieces = append(pieces, e.PartialJSON)
				}
			case llm.BlockStop:
				if e.Index == index {
					stopped = true
				}
			}
		}
		if !started || !stopped {
			t.Errorf("block %d: started %v stopped %v", index, started, stopped)
		}
		if got := strings.Join(pieces, ""); got != string(u.Input) {
			t.Errorf("block %d: joined deltas %s, final input %s", index, got, u.Input)
		}
		if i == 0 && len(pieces) < 3 {
			t.Errorf("bash input arrived in %d pieces, want several partial-JSON chunks", len(pieces))
		}
	}
	for i := 0; i < 3; i++ {
		if n := ev.Count(func(e llm.Event) bool { s, ok := e.(llm.BlockStop); return ok && s.Index == i }); n != 1 {
			t.Errorf("block %d stopped %d times", i, n)
		}
	}
}

func testMultiTurn(t *testing.T, b Backend) {
	s := StartSim(t, `
mode: sequence
rules:
  - name: call
    when: {turn: 1, last_user: "list the files", tools: [bash]}
    reply:
      tool_calls: [{name: bash, input: {command: "ls"}}]
  - name: answer
    when: {turn: 2, tool_result: "README.md"}
    reply:
      text: "There is a README and a go.mod."
`)
	c, _ := Client(t, b, s)
	req := request("list the files")
	req.Tools = []llm.Tool{BashTool}
	r1, err := c.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	uses := r1.Message.ToolUses()
	if r1.StopReason != llm.StopToolUse || len(uses) != 1 || uses[0].Name != "bash" || uses[0].ID == "" {
		t.Fatalf("turn 1: %s %#v, want one bash call", r1.StopReason, r1.Message)
	}
	call := uses[0]
	req.Messages = append(req.Messages, r1.Message, llm.Message{Role: llm.RoleUser, Content: []llm.Block{
		llm.ToolResult{ToolUseID: call.ID, Content: []llm.Block{llm.Text{Text: "README.md\ngo.mod"}}},
	}})
	r2, err := c.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Message.Text() != "There is a README and a go.mod." || r2.StopReason != llm.StopEndTurn {
		t.Errorf("turn 2: %s %q", r2.StopReason, r2.Message.Text())
	}

	log := s.Log()
	if len(log) != 2 || log[1].Rule != "answer" || log[1].Turn != 2 {
		t.Fatalf("sim log %+v, want turn 2 answered by rule answer", log)
	}
	body := Body(t, log[1])
	msgs, _ := body["messages"].([]any)
	switch b.API {
	case sim.APIAnthropic:
		if len(msgs) != 3 {
			t.Fatalf("sent %d messages, want 3: %s", len(msgs), log[1].Body)
		}
		use := block(msgs[1], 0)
		result := block(msgs[2], 0)
		input, _ := json.Marshal(use["input"])
		if use["type"] != "tool_use" || use["id"] != call.ID || use["name"] != "bash" || string(input) != `{"command":"ls"}` {
			t.Errorf("assistant turn sent as %v", use)
		}
		content, _ := json.Marshal(result["content"])
		if result["type"] != "tool_result" || result["tool_use_id"] != call.ID || !strings.Contains(string(content), `README.md\ngo.mod`) {
			t.Errorf("tool result sent as %v", result)
		}
	case sim.APIOpenAI:
		// system, user, assistant with tool_calls, tool
		if len(msgs) != 4 {
			t.Fatalf("sent %d messages, want 4: %s", len(msgs), log[1].Body)
		}
		a, _ := msgs[2].(map[string]any)
		calls, _ := a["tool_calls"].([]any)
		tc, _ := first(calls).(map[string]any)
		fn, _ := tc["function"].(map[string]any)
		args, _ := fn["arguments"].(string)
		if a["role"] != "assistant" || tc["id"] != call.ID || fn["name"] != "bash" || !JSONEqual(t, []byte(args), []byte(`{"command":"ls"}`)) {
			t.Errorf("assistant turn sent as %v", a)
		}
		tool, _ := msgs[3].(map[string]any)
		if tool["role"] != "tool" || tool["tool_call_id"] != call.ID || tool["content"] != "README.md\ngo.mod" {
			t.Errorf("tool result sent as %v", tool)
		}
	}
}

func testThinking(t *testing.T, b Backend) {
	s := StartSim(t, `
mode: sequence
rules:
  - name: think
    reply:
      thinking: "The user wants a number. Forty-two is the traditional answer to everything."
      text: "42"
  - name: again
    when: {turn: 2}
    reply: {text: "Still 42."}
`)
	c, _ := Client(t, b, s)
	req := request("pick a number")
	req.MaxTokens = 4096
	req.Thinking = &llm.ThinkingConfig{BudgetTokens: 1024}
	var ev Events
	r1, err := c.Stream(context.Background(), req, ev.Add)
	if err != nil {
		t.Fatal(err)
	}
	var thought string
	for _, e := range ev.List {
		if d, ok := e.(llm.ThinkingDelta); ok {
			if d.Index != 0 {
				t.Errorf("thinking delta for block %d, want 0", d.Index)
			}
			thought += d.Text
		}
	}
	const want = "The user wants a number. Forty-two is the traditional answer to everything."
	if thought != want {
		t.Errorf("streamed thinking %q", thought)
	}
	if len(r1.Message.Content) != 2 {
		t.Fatalf("content %#v, want thinking then text", r1.Message.Content)
	}
	th, ok := r1.Message.Content[0].(llm.Thinking)
	if !ok || th.Text != want || r1.Message.Text() != "42" || ev.Text(1) != "42" {
		t.Fatalf("content %#v", r1.Message.Content)
	}
	if b.API == sim.APIAnthropic && th.Signature == "" {
		t.Errorf("anthropic thinking block has no signature")
	}

	req.Messages = append(req.Messages, r1.Message, llm.UserText("again?"))
	if _, err := c.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	log := s.Log()
	msgs, _ := Body(t, log[1])["messages"].([]any)
	switch b.API {
	case sim.APIAnthropic:
		// Thinking goes back verbatim, signature included.
		tb := block(msgs[1], 0)
		if tb["type"] != "thinking" || tb["thinking"] != want || tb["signature"] != th.Signature {
			t.Errorf("thinking sent back as %v", tb)
		}
	case sim.APIOpenAI:
		a, _ := msgs[2].(map[string]any)
		if a["role"] != "assistant" || a["content"] != "42" {
			t.Errorf("assistant turn sent as %v, want its text only", a)
		}
	}
}

// png is a 1x1 PNG.
var png = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")

func testImages(t *testing.T, b Backend) {
	s := StartSim(t, `
mode: sequence
rules:
  - name: look
    when: {last_user: "what is in this picture"}
    reply:
      tool_calls: [{name: bash, input: {command: "screenshot"}}]
  - name: seen
    when: {turn: 2}
    reply: {text: "A single pixel."}
`)
	c, _ := Client(t, b, s)
	req := request("")
	req.Tools = []llm.Tool{BashTool}
	req.Messages = []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{
		llm.Text{Text: "what is in this picture?"},
		llm.Image{MediaType: "image/png", Data: png},
	}}}
	r1, err := c.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	call := r1.Message.ToolUses()[0]
	req.Messages = append(req.Messages, r1.Message, llm.Message{Role: llm.RoleUser, Content: []llm.Block{
		llm.ToolResult{ToolUseID: call.ID, Content: []llm.Block{llm.Text{Text: "screenshot taken"}, llm.Image{MediaType: "image/png", Data: png}}},
	}})
	if _, err := c.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	log := s.Log()
	first := string(log[0].Body)
	second := string(log[1].Body)
	encoded := "iVBORw0KGgo" // base64 of the PNG signature
	switch b.API {
	case sim.APIAnthropic:
		img := block(firstMessage(t, log[0]), 1)
		src, _ := img["source"].(map[string]any)
		if img["type"] != "image" || src["type"] != "base64" || src["media_type"] != "image/png" || !strings.HasPrefix(fmt.Sprint(src["data"]), encoded) {
			t.Errorf("image sent as %v", img)
		}
		if !strings.Contains(second, `"type":"tool_result"`) || strings.Count(second, encoded) != 2 {
			t.Errorf("tool result image not sent: %s", second)
		}
	case sim.APIOpenAI:
		if !strings.Contains(first, `"image_url":{"url":"data:image/png;base64,`+encoded) {
			t.Errorf("image not sent as a data URL: %s", first)
		}
		msgs, _ := Body(t, log[1])["messages"].([]any)
		// system, user, assistant, tool, user (the tool's image)
		if len(msgs) != 5 {
			t.Fatalf("sent %d messages, want 5: %s", len(msgs), second)
		}
		tool, _ := msgs[3].(map[string]any)
		img, _ := json.Marshal(msgs[4])
		if tool["role"] != "tool" || !strings.Contains(fmt.Sprint(tool["content"]), "screenshot taken") ||
			!strings.Contains(string(img), call.ID) || !strings.Contains(string(img), "data:image/png;base64,"+encoded) {
			t.Errorf("tool result with image sent as %v then %s", tool, img)
		}
	}
}

func testStopReasons(t *testing.T, b Backend) {
	s := StartSim(t, `
rules:
  - {name: long, when: {last_user: "long"}, reply: {text: "cut o", stop_reason: max_tokens}}
  - {name: refuse, when: {last_user: "refuse"}, reply: {text: "I can't help with that.", stop_reason: refusal}}
  - {name: seq, when: {last_user: "sequence"}, reply: {text: "one two", stop_reason: stop_sequence}}
`)
	c, _ := Client(t, b, s)
	seq := llm.StopSequence
	if b.API == sim.APIOpenAI {
		seq = llm.StopEndTurn // Chat Completions reports a stop sequence as "stop"
	}
	for prompt, want := range map[string]llm.StopReason{"long": llm.StopMaxTokens, "refuse": llm.StopRefusal, "sequence": seq} {
		req := request(prompt)
		req.StopSequences = []string{"three"}
		resp, err := c.Complete(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StopReason != want {
			t.Errorf("%s: stop reason %q, want %q", prompt, resp.StopReason, want)
		}
	}
}

func testUsageAndCost(t *testing.T, b Backend) {
	s := StartSim(t, `
rules:
  - name: cached
    reply:
      text: "cached answer"
      usage: {input_tokens: 1000, output_tokens: 500, cache_read_input_tokens: 2000, cache_creation_input_tokens: 300}
`)
	c, _ := Client(t, b, s)
	var calls Calls
	c.Observer = &calls
	req := request("hi")
	req.Cache = true
	resp, err := c.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := llm.Usage{InputTokens: 1000, OutputTokens: 500, CacheReadTokens: 2000, CacheWriteTokens: 300}
	if b.API == sim.APIOpenAI {
		// prompt_tokens 3300 of which cached_tokens 2000; Chat Completions does
		// not report cache writes separately, so they count as input.
		want = llm.Usage{InputTokens: 1300, OutputTokens: 500, CacheReadTokens: 2000}
	}
	if resp.Usage != want {
		t.Errorf("usage %+v, want %+v", resp.Usage, want)
	}
	if resp.Usage.PromptTokens() != 3300 {
		t.Errorf("prompt tokens %d, want 3300", resp.Usage.PromptTokens())
	}
	p, ok := llm.DefaultPrices.Lookup(b.Model)
	if !ok {
		t.Fatalf("%s is not in the price table", b.Model)
	}
	wantUSD := (float64(want.InputTokens)*p.Input + float64(want.OutputTokens)*p.Output +
		float64(want.CacheReadTokens)*p.CacheRead + float64(want.CacheWriteTokens)*p.CacheWrite) / 1e6
	usd, ok := c.Cost(resp)
	if !ok || math.Abs(usd-wantUSD) > 1e-12 || usd <= 0 {
		t.Errorf("cost %v (priced %v), want %v", usd, ok, wantUSD)
	}
	if call := calls.Only(t); call.Usage != want || !call.Priced || call.CostUSD != usd || call.Attempts != 1 || call.Err != nil {
		t.Errorf("the observer heard %+v: want usage %+v costing %v, one attempt", call, want, usd)
	}
	unpriced := *c
	unpriced.Model = "no-such-model"
	resp.Model = "no-such-model-either"
	if usd, ok := unpriced.Cost(resp); ok || usd != 0 {
		t.Errorf("unpriced model cost %v, %v", usd, ok)
	}
}

func testInvalid(t *testing.T, b Backend) {
	s := StartSim(t, "rules:\n  - {name: any, reply: {text: hi}}\n")
	c, _ := Client(t, b, s)
	req := request("hi")
	req.Messages = append(req.Messages, llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{llm.ToolResult{ToolUseID: "x"}}})
	_, err := c.Complete(context.Background(), req)
	if !errors.Is(err, llm.ErrBadRequest) || !strings.Contains(err.Error(), "tool_result blocks belong in user messages") {
		t.Errorf("err %v, want ErrBadRequest saying what is wrong", err)
	}
	if n := len(s.Log()); n != 0 {
		t.Errorf("an invalid request reached the API (%d requests)", n)
	}
}

func testConcurrent(t *testing.T, b Backend) {
	s := StartSim(t, `
rules:
  - {name: echo, reply: {text: "the same answer for everyone, in a few pieces"}}
`)
	c, _ := Client(t, b, s)
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ev Events
			resp, err := c.Stream(context.Background(), request(fmt.Sprintf("caller %d", i)), ev.Add)
			if err != nil {
				t.Error(err)
				return
			}
			if resp.Message.Text() != "the same answer for everyone, in a few pieces" || ev.Text(0) != resp.Message.Text() {
				t.Errorf("caller %d got %q", i, resp.Message.Text())
			}
		}()
	}
	wg.Wait()
	if got := len(s.Log()); got != n {
		t.Errorf("sim saw %d requests, want %d", got, n)
	}
}

func isText(e llm.Event) bool { _, ok := e.(llm.TextDelta); return ok }
func isStop(e llm.Event) bool { _, ok := e.(llm.BlockStop); return ok }

// block returns content block i of a decoded Anthropic message.
func block(msg any, i int) map[string]any {
	m, _ := msg.(map[string]any)
	content, _ := m["content"].([]any)
	if i >= len(content) {
		return nil
	}
	b, _ := content[i].(map[string]any)
	return b
}

func first(xs []any) any {
	if len(xs) == 0 {
		return nil
	}
	return xs[0]
}

func firstMessage(t testing.TB, r sim.Request) any {
	msgs, _ := Body(t, r)["messages"].([]any)
	return first(msgs)
}
