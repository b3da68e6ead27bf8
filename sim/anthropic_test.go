package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/harvest-dev/harvest/sim"
)

const toolScript = `
rules:
  - name: tools
    when: {api: anthropic}
    reply:
      thinking: "I should write the file, then list the directory to check it is there."
      text: "Writing the file now, then I will check that it exists in the directory listing."
      tool_calls:
        - name: Write
          id: toolu_fixed_1
          input: {file_path: /work/notes.md, content: "# Notes\n\nFirst line of the notes, long enough to stream in pieces.\n"}
        - name: Bash
          input: {command: "ls -la /work", description: "list"}
      usage: {input_tokens: 1234, output_tokens: 321, cache_read_input_tokens: 1000, cache_creation_input_tokens: 200}
`

var anthropicBody = `{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,
 "system":[{"type":"text","text":"You are a coding agent."}],
 "tools":[{"name":"Write","input_schema":{"type":"object"}},{"name":"Bash","input_schema":{"type":"object"}}],
 "messages":[{"role":"user","content":"write the notes"}]}`

// TestAnthropicStreamWire checks the stream byte for byte against the
// Messages API's event grammar: names, order, ping, deltas split into several
// pieces, message_delta usage.
func TestAnthropicStreamWire(t *testing.T) {
	_, hs := serve(t, toolScript)
	c := post(t, hs.URL+"/v1/messages?beta=true", "anthropic", anthropicBody)
	if c.status != 200 {
		t.Fatalf("%d %s", c.status, c.body)
	}
	if ct := c.header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
		t.Errorf("content-type %q", ct)
	}
	if id := c.header.Get("request-id"); !strings.HasPrefix(id, "req_") {
		t.Errorf("request-id %q", id)
	}
	events := parseSSE(t, c.body)
	var names []string
	deltas := map[int][]map[string]any{}
	for _, e := range events {
		d := decode(t, []byte(e.data))
		if d["type"] != e.name {
			t.Errorf("event %s carries type %v", e.name, d["type"])
		}
		names = append(names, e.name)
		if e.name == "content_block_delta" {
			i := int(d["index"].(float64))
			deltas[i] = append(deltas[i], d["delta"].(map[string]any))
		}
	}
	// The grammar: message_start, then per block start, deltas, stop (a
	// ping after the first start), then message_delta and message_stop.
	var compact []string
	for i, n := range names {
		if n == "content_block_delta" && i > 0 && names[i-1] == "content_block_delta" {
			continue
		}
		compact = append(compact, n)
	}
	want := "message_start content_block_start ping content_block_delta content_block_stop " +
		"content_block_start content_block_delta content_block_stop " +
		"content_block_start content_block_delta content_block_stop " +
		"content_block_start content_block_delta content_block_stop message_delta message_stop"
	if got := strings.Join(compact, " "); got != want {
		t.Errorf("events:\n got  %s\n want %s", got, want)
	}
	start := decode(t, []byte(events[0].data))
	if u := path(start, "message", "usage"); path(u, "input_tokens") != 1234.0 || path(u, "cache_read_input_tokens") != 1000.0 ||
		path(u, "cache_creation_input_tokens") != 200.0 || path(start, "message", "stop_reason") != nil || path(start, "message", "model") != "claude-sonnet-4-5" {
		t.Errorf("message_start: %s", events[0].data)
	}
	// Thinking: several thinking_delta, then the signature.
	th := deltas[0]
	if len(th) < 3 || th[len(th)-1]["type"] != "signature_delta" || th[len(th)-1]["signature"] == "" {
		t.Errorf("thinking deltas: %v", th)
	}
	var thinking, text strings.Builder
	for _, d := range th[:len(th)-1] {
		thinking.WriteString(d["thinking"].(string))
	}
	for _, d := range deltas[1] {
		if d["type"] != "text_delta" {
			t.Errorf("text block delta %v", d)
		}
		text.WriteString(d["text"].(string))
	}
	if thinking.String() != "I should write the file, then list the directory to check it is there." || len(deltas[1]) < 3 ||
		text.String() != "Writing the file now, then I will check that it exists in the directory listing." {
		t.Errorf("thinking %q / text %q in %d pieces", thinking.String(), text.String(), len(deltas[1]))
	}
	// Tool input: an empty partial_json first, then several pieces that
	// join to the arguments in script order.
	for i, want := range []string{
		`{"file_path":"/work/notes.md","content":"# Notes\n\nFirst line of the notes, long enough to stream in pieces.\n"}`,
		`{"command":"ls -la /work","description":"list"}`,
	} {
		ds := deltas[2+i]
		var in strings.Builder
		for _, d := range ds {
			if d["type"] != "input_json_delta" {
				t.Errorf("tool delta %v", d)
			}
			in.WriteString(d["partial_json"].(string))
		}
		if ds[0]["partial_json"] != "" || len(ds) < 4 || in.String() != want {
			t.Errorf("tool %d: %d deltas, first %q, joined %s", i, len(ds), ds[0]["partial_json"], in.String())
		}
	}
	var blockStart []map[string]any
	for _, e := range events {
		if e.name == "content_block_start" {
			blockStart = append(blockStart, decode(t, []byte(e.data)))
		}
	}
	if cb := blockStart[2]["content_block"]; keys(cb) != "id,input,name,type" || path(cb, "id") != "toolu_fixed_1" || path(cb, "name") != "Write" {
		t.Errorf("tool_use start: %v", cb)
	}
	if id, _ := path(blockStart[3], "content_block", "id").(string); !strings.HasPrefix(id, "toolu_01") {
		t.Errorf("generated tool id %q", id)
	}
	md := decode(t, []byte(events[len(events)-2].data))
	if path(md, "delta", "stop_reason") != "tool_use" || path(md, "usage", "output_tokens") != 321.0 || path(md, "usage", "input_tokens") != 1234.0 {
		t.Errorf("message_delta: %s", events[len(events)-2].data)
	}
}

func anthropicClient(url string, opts ...option.RequestOption) *anthropic.Client {
	c := anthropic.NewClient(append([]option.RequestOption{
		option.WithBaseURL(url), option.WithAPIKey("sk-ant-test"), option.WithMaxRetries(0),
	}, opts...)...)
	return &c
}

func toolParams() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     "claude-sonnet-4-5",
		MaxTokens: 1024,
		System:    []anthropic.TextBlockParam{{Text: "You are a coding agent."}},
		Tools: []anthropic.ToolUnionParam{
			{OfTool: &anthropic.ToolParam{Name: "Write", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{}}}},
			{OfTool: &anthropic.ToolParam{Name: "Bash", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{}}}},
		},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("write the notes"))},
	}
}

// TestAnthropicSDK: the official Go SDK reads the sim's stream (its
// accumulator checks the event order) and its plain reply to the same
// message.
func TestAnthropicSDK(t *testing.T) {
	_, hs := serve(t, toolScript)
	client := anthropicClient(hs.URL)
	ctx := context.Background()

	stream := client.Messages.NewStreaming(ctx, toolParams())
	var acc anthropic.Message
	n := 0
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	plain, err := client.Messages.New(ctx, toolParams())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*anthropic.Message{&acc, plain} {
		if len(m.Content) != 4 || m.Content[0].Type != "thinking" || m.Content[1].Type != "text" ||
			m.Content[2].Type != "tool_use" || m.Content[3].Type != "tool_use" {
			t.Fatalf("content %+v", m.Content)
		}
		if m.Content[0].Thinking == "" || m.Content[0].Signature == "" {
			t.Errorf("thinking block %+v", m.Content[0])
		}
		var in struct{ FilePath, Content string }
		json.Unmarshal(m.Content[2].Input, &in)
		if m.Content[2].Name != "Write" || m.Content[2].ID != "toolu_fixed_1" || in.Content == "" {
			t.Errorf("tool call %+v %s", m.Content[2], m.Content[2].Input)
		}
		u := m.Usage
		if m.StopReason != "tool_use" || u.InputTokens != 1234 || u.OutputTokens != 321 || u.CacheReadInputTokens != 1000 || u.CacheCreationInputTokens != 200 {
			t.Errorf("stop %s usage %+v", m.StopReason, u)
		}
		if m.Model != "claude-sonnet-4-5" || m.Role != "assistant" || !strings.HasPrefix(m.ID, "msg_01") {
			t.Errorf("message %s %s %s", m.Model, m.Role, m.ID)
		}
	}
	if acc.Content[1].Text != plain.Content[1].Text || string(acc.Content[3].Input) != string(plain.Content[3].Input) {
		t.Errorf("stream and plain reply differ:\n%s\n%s", acc.RawJSON(), plain.RawJSON())
	}
	if n < 20 {
		t.Errorf("only %d stream events", n)
	}
}

// TestAnthropicValidation: requests the real API refuses get its 400 (or
// 401) with its error body.
func TestAnthropicValidation(t *testing.T) {
	srv, hs := serve(t, "rules:\n  - reply: {text: ok}\n")
	msgs := func(m string) string {
		return `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":` + m + `}`
	}
	toolTurn := `{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_a","name":"Bash","input":{}}]}`
	cases := []struct {
		name, body string
		headers    []string
		status     int
		typ, want  string
	}{
		{"not JSON", `{"model":`, nil, 400, "invalid_request_error", "There was an issue with your request body"},
		{"no model", `{"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "model: Field required"},
		{"no max_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "max_tokens: Field required"},
		{"max_tokens 0", `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "max_tokens: Input should be greater than or equal to 1"},
		{"max_tokens text", `{"model":"m","max_tokens":"many","messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "max_tokens: Input should be a valid integer"},
		{"no messages", `{"model":"m","max_tokens":10}`, nil, 400, "invalid_request_error", "messages: Field required"},
		{"empty messages", msgs(`[]`), nil, 400, "invalid_request_error", "messages: at least one message is required"},
		{"bad role", msgs(`[{"role":"robot","content":"hi"}]`), nil, 400, "invalid_request_error", "messages.0.role: Input should be 'user' or 'assistant'"},
		{"system role without beta", msgs(`[{"role":"user","content":"hi"},{"role":"system","content":"x"}]`), nil, 400, "invalid_request_error", "messages.1.role: Input should be 'user' or 'assistant'"},
		{"no content", msgs(`[{"role":"user"}]`), nil, 400, "invalid_request_error", "messages.0.content: Field required"},
		{"empty content", msgs(`[{"role":"user","content":""}]`), nil, 400, "invalid_request_error", "messages.0: all messages must have non-empty content"},
		{"block without type", msgs(`[{"role":"user","content":[{"text":"hi"}]}]`), nil, 400, "invalid_request_error", "messages.0.content.0.type: Field required"},
		{"orphan tool_result", msgs(`[{"role":"user","content":"hi"},{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_x","content":"done"}]}]`),
			nil, 400, "invalid_request_error", "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_x. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."},
		{"wrong tool_use_id", msgs(`[` + toolTurn + `,{"role":"user","content":[{"type":"text","text":"x"},{"type":"tool_result","tool_use_id":"toolu_b","content":"done"}]}]`),
			nil, 400, "invalid_request_error", "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_b"},
		{"unanswered tool_use", msgs(`[` + toolTurn + `,{"role":"user","content":"and?"}]`),
			nil, 400, "invalid_request_error", "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_a"},
		{"tool_result from assistant", msgs(`[{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"x","content":"a"}]}]`), nil, 400, "invalid_request_error", "tool_result blocks can only be in user messages"},
		{"thinking budget too small", `{"model":"m","max_tokens":4000,"thinking":{"type":"enabled","budget_tokens":500},"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"},
		{"thinking budget over max_tokens", `{"model":"m","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":2000},"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "`max_tokens` must be greater than `thinking.budget_tokens`"},
		{"tool without schema", `{"model":"m","max_tokens":10,"tools":[{"name":"Bash"}],"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "tools.0.custom.input_schema: Field required"},
		{"no key", msgs(`[{"role":"user","content":"hi"}]`), []string{"x-api-key", ""}, 401, "authentication_error", "x-api-key header is required"},
		{"no version", msgs(`[{"role":"user","content":"hi"}]`), []string{"anthropic-version", ""}, 400, "invalid_request_error", "anthropic-version: header is required"},
	}
	for _, c := range cases {
		got := post(t, hs.URL+"/v1/messages", "anthropic", c.body, c.headers...)
		if got.status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, got.status, c.status, got.body)
			continue
		}
		b := decode(t, got.body)
		if keys(b) != "error,request_id,type" || b["type"] != "error" || keys(b["error"]) != "message,type" ||
			path(b, "error", "type") != c.typ || !strings.Contains(path(b, "error", "message").(string), c.want) {
			t.Errorf("%s: body %s\n  want type %s, message containing %q", c.name, got.body, c.typ, c.want)
		}
		if got.header.Get("request-id") != b["request_id"] || got.header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: headers %v", c.name, got.header)
		}
	}
	// Valid variants the real API and its clients use.
	for name, c := range map[string]call{
		"bearer auth":       post(t, hs.URL+"/v1/messages", "anthropic", msgs(`[{"role":"user","content":"hi"}]`), "x-api-key", "", "Authorization", "Bearer oauth-token"),
		"mid-conv system":   post(t, hs.URL+"/v1/messages?beta=true", "anthropic", msgs(`[{"role":"user","content":"hi"},{"role":"system","content":"note"}]`), "anthropic-beta", "claude-code-20250219,mid-conversation-system-2026-04-07"),
		"prefill":           post(t, hs.URL+"/v1/messages", "anthropic", msgs(`[{"role":"user","content":"hi"},{"role":"assistant","content":""}]`)),
		"answered tool":     post(t, hs.URL+"/v1/messages", "anthropic", msgs(`[`+toolTurn+`,{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_a","content":[{"type":"text","text":"ok"}]}]}]`)),
		"thinking":          post(t, hs.URL+"/v1/messages", "anthropic", `{"model":"m","max_tokens":32000,"thinking":{"type":"enabled","budget_tokens":31999},"messages":[{"role":"user","content":"hi"}]}`),
		"adaptive thinking": post(t, hs.URL+"/v1/messages", "anthropic", `{"model":"m","max_tokens":100,"thinking":{"type":"adaptive"},"messages":[{"role":"user","content":"hi"}]}`),
		"server tool type":  post(t, hs.URL+"/v1/messages", "anthropic", `{"model":"m","max_tokens":10,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"hi"}]}`),
	} {
		if c.status != 200 {
			t.Errorf("%s: %d %s", name, c.status, c.body)
		}
	}
	// Every refused request is in the log, with its status and why.
	var refused int
	for _, r := range srv.Requests() {
		if r.Status >= 400 {
			refused++
			if r.Error == "" || r.Rule != "" {
				t.Errorf("refused request #%d logged without its error: %+v", r.Seq, r)
			}
		}
	}
	if refused != len(cases) {
		t.Errorf("%d refused requests logged, want %d", refused, len(cases))
	}
}

// TestAnthropicErrors: injected errors carry the API's type, message,
// request-id and retry-after; the SDK sees them as typed API errors, and
// with retries on gets past them to the answer.
func TestAnthropicErrors(t *testing.T) {
	script := `
mode: sequence
rules:
  - reply: {error: {status: 429, retry_after: 2s}}
  - reply: {error: {status: 529, retry_after: 250ms}}
  - reply: {error: {status: 500}}
  - reply: {error: {status: 400, message: "prompt is too long: 300000 tokens > 200000 maximum"}}
  - reply: {error: {status: 403, type: permission_error, message: "no access"}}
`
	_, hs := serve(t, script)
	body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	for _, want := range []struct {
		status         int
		typ, msg       string
		retry, retryMS string
	}{
		{429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit", "2", "2000"},
		{529, "overloaded_error", "Overloaded", "1", "250"},
		{500, "api_error", "Internal server error", "", ""},
		{400, "invalid_request_error", "prompt is too long: 300000 tokens > 200000 maximum", "", ""},
		{403, "permission_error", "no access", "", ""},
	} {
		c := post(t, hs.URL+"/v1/messages", "anthropic", body)
		b := decode(t, c.body)
		if c.status != want.status || path(b, "error", "type") != want.typ || path(b, "error", "message") != want.msg ||
			c.header.Get("retry-after") != want.retry || c.header.Get("retry-after-ms") != want.retryMS || !strings.HasPrefix(c.header.Get("request-id"), "req_") {
			t.Errorf("got %d %v %s, want %+v", c.status, c.header, c.body, want)
		}
	}

	// The SDK: typed errors, and retries that honour retry-after.
	_, hs = serve(t, `
mode: sequence
rules:
  - reply: {error: {status: 529, retry_after: 10ms}}
  - reply: {error: {status: 429, retry_after: 10ms}}
  - reply: {text: "finally"}
  - reply: {error: {status: 529}}
`)
	ctx := context.Background()
	params := anthropic.MessageNewParams{Model: "m", MaxTokens: 10, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
	m, err := anthropicClient(hs.URL, option.WithMaxRetries(2)).Messages.New(ctx, params)
	if err != nil || m.Content[0].Text != "finally" {
		t.Fatalf("after two retried errors: %v %+v", err, m)
	}
	_, err = anthropicClient(hs.URL).Messages.New(ctx, params)
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 529 || apiErr.Type() != "overloaded_error" || !strings.HasPrefix(apiErr.RequestID, "req_") {
		t.Errorf("SDK error: %v", err)
	}
}

// TestAnthropicCountTokens: count_tokens validates like messages (without
// max_tokens) and answers an estimate; it uses no rule.
func TestAnthropicCountTokens(t *testing.T) {
	srv, hs := serve(t, "rules:\n  - times: 1\n    reply: {text: ok}\n")
	n, err := anthropicClient(hs.URL).Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{
		Model:    "claude-sonnet-4-5",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(strings.Repeat("word ", 400)))},
	})
	if err != nil || n.InputTokens < 400 || n.InputTokens > 700 {
		t.Fatalf("count_tokens: %v %+v", err, n)
	}
	c := post(t, hs.URL+"/v1/messages/count_tokens?beta=true", "anthropic", `{"model":"m","messages":[]}`)
	if c.status != 400 || !strings.Contains(string(c.body), "messages: at least one message is required") {
		t.Errorf("bad count_tokens: %d %s", c.status, c.body)
	}
	// The rule (times: 1) is still there for a message.
	if c := post(t, hs.URL+"/v1/messages", "anthropic", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`); c.status != 200 {
		t.Errorf("count_tokens used up the rule: %d %s", c.status, c.body)
	}
	if r := srv.Requests()[0]; r.Rule != "count_tokens" || r.Path != "/v1/messages/count_tokens" || r.API != "anthropic" {
		t.Errorf("log: %+v", r)
	}
}

// TestAnthropicCancel: a client that goes away mid-stream, or while the
// reply is delayed, ends the handler's wait at once. httptest's Close waits
// for every handler, so a handler stuck in its hour-long delay would hang the
// test.
func TestAnthropicCancel(t *testing.T) {
	s, err := sim.ParseScript("cancel.yaml", []byte(`
mode: sequence
rules:
  - reply: {text: "one two three four five six seven", chunk_delay: 1h}
  - reply: {text: late, delay: 1h}
`))
	if err != nil {
		t.Fatal(err)
	}
	srv := sim.New(s)
	arrived := make(chan struct{}, 2)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		srv.ServeHTTP(w, r)
	}))
	params := anthropic.MessageNewParams{Model: "m", MaxTokens: 10, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}

	ctx, cancel := context.WithCancel(context.Background())
	stream := anthropicClient(hs.URL).Messages.NewStreaming(ctx, params)
	if !stream.Next() || stream.Current().Type != "message_start" {
		t.Fatalf("first event: %v", stream.Err())
	}
	<-arrived
	cancel()
	for stream.Next() {
	}
	if !errors.Is(stream.Err(), context.Canceled) {
		t.Errorf("stream error %v", stream.Err())
	}
	stream.Close()

	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := anthropicClient(hs.URL).Messages.New(ctx, params)
		done <- err
	}()
	<-arrived
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("delayed reply: %v", err)
	}
	hs.Close()
	reqs := srv.Requests()
	if len(reqs) != 2 || reqs[0].Status != 200 || !strings.Contains(reqs[0].Error, "the stream was cut: context canceled") ||
		reqs[1].Rule != "rule 2" || reqs[1].Status != 499 {
		t.Errorf("log after cancel: %+v", reqs)
	}
}

// TestAnthropicLastUserBesideResults: text a client sends in the same
// message as tool results (its next prompt after a cancelled turn, a note)
// is what the user last said; a message of only results is not.
func TestAnthropicLastUserBesideResults(t *testing.T) {
	_, hs := serve(t, `
rules:
  - when: {last_user: "are you there"}
    reply: {text: "yes"}
  - when: {last_user: "start"}
    reply: {text: "still the first prompt"}
`)
	turn := `{"role":"user","content":"start"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_a","name":"Bash","input":{}}]}`
	body := func(last string) string {
		return `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[` + turn + `,{"role":"user","content":[` + last + `]}]}`
	}
	result := `{"type":"tool_result","tool_use_id":"toolu_a","content":"cancelled"}`
	for _, c := range []struct{ last, want string }{
		{result + `,{"type":"text","text":"are you there?"}`, "yes"},
		{result, "still the first prompt"},
	} {
		got := post(t, hs.URL+"/v1/messages", "anthropic", body(c.last))
		if got.status != 200 || !strings.Contains(string(got.body), c.want) {
			t.Errorf("%s: %d %s", c.last, got.status, got.body)
		}
	}
}
