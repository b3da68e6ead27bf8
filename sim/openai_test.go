package sim_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

const openaiToolScript = `
rules:
  - name: tools
    when: {api: openai, tools: [read, bash]}
    reply:
      text: "Reading the file, then running the tests to see what fails."
      tool_calls:
        - name: read
          id: call_fixed_1
          input: {filePath: /work/main.go, offset: 1, limit: 200}
        - name: bash
          input: {command: "go test ./...", description: "run the tests"}
      usage: {input_tokens: 900, output_tokens: 77, cache_read_input_tokens: 600, cache_creation_input_tokens: 0}
  - name: plain
    reply:
      thinking: "Short answer."
      text: "All done."
      stop_reason: max_tokens
`

const openaiBody = `{"model":"gpt-4.1","stream":true,"stream_options":{"include_usage":true},
 "tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}},{"type":"function","function":{"name":"bash"}}],
 "messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"fix the tests"}]}`

// TestOpenAIStreamWire checks the chunk sequence against Chat Completions'
// grammar: role first, content pieces, each tool call's header then its
// arguments in pieces, the finish reason, the usage chunk, [DONE].
func TestOpenAIStreamWire(t *testing.T) {
	_, hs := serve(t, openaiToolScript)
	c := post(t, hs.URL+"/v1/chat/completions", "openai", openaiBody)
	if c.status != 200 || c.header.Get("Content-Type") != "text/event-stream; charset=utf-8" || !strings.HasPrefix(c.header.Get("x-request-id"), "req_") {
		t.Fatalf("%d %v %s", c.status, c.header, c.body)
	}
	events := parseSSE(t, c.body)
	if last := events[len(events)-1]; last.data != "[DONE]" || last.name != "" {
		t.Fatalf("last event %+v", last)
	}
	var chunks []map[string]any
	for _, e := range events[:len(events)-1] {
		if e.name != "" {
			t.Errorf("OpenAI streams have no event names: %q", e.name)
		}
		chunks = append(chunks, decode(t, []byte(e.data)))
	}
	id := chunks[0]["id"].(string)
	for i, ch := range chunks {
		if ch["id"] != id || ch["object"] != "chat.completion.chunk" || ch["model"] != "gpt-4.1" {
			t.Errorf("chunk %d: %v", i, ch)
		}
		if _, ok := ch["usage"]; !ok {
			t.Errorf("chunk %d has no usage field (include_usage: null until the last)", i)
		}
		if i < len(chunks)-1 && ch["usage"] != nil {
			t.Errorf("chunk %d carries usage early", i)
		}
	}
	if !strings.HasPrefix(id, "chatcmpl-") {
		t.Errorf("id %q", id)
	}
	first := path(chunks[0], "choices", 0, "delta")
	if path(first, "role") != "assistant" || path(first, "content") != "" {
		t.Errorf("first delta %v", first)
	}
	var text strings.Builder
	textPieces := 0
	args := map[int]*strings.Builder{}
	heads := map[int]map[string]any{}
	argPieces := map[int]int{}
	var finish any
	for _, ch := range chunks[1 : len(chunks)-1] {
		d := path(ch, "choices", 0, "delta")
		if s, ok := path(d, "content").(string); ok {
			text.WriteString(s)
			textPieces++
		}
		if tcs, ok := path(d, "tool_calls").([]any); ok {
			tc := tcs[0].(map[string]any)
			i := int(tc["index"].(float64))
			if _, seen := heads[i]; !seen {
				heads[i] = tc
				args[i] = &strings.Builder{}
				if path(tc, "function", "arguments") != "" {
					t.Errorf("tool header carries arguments: %v", tc)
				}
				continue
			}
			if keys(tc) != "function,index" {
				t.Errorf("argument chunk %v", tc)
			}
			args[i].WriteString(path(tc, "function", "arguments").(string))
			argPieces[i]++
		}
		if f := path(ch, "choices", 0, "finish_reason"); f != nil {
			finish = f
		}
	}
	if text.String() != "Reading the file, then running the tests to see what fails." || textPieces < 3 {
		t.Errorf("text %q in %d pieces", text.String(), textPieces)
	}
	if path(heads[0], "id") != "call_fixed_1" || path(heads[0], "type") != "function" || path(heads[0], "function", "name") != "read" {
		t.Errorf("tool 0 header %v", heads[0])
	}
	if id, _ := path(heads[1], "id").(string); !strings.HasPrefix(id, "call_") || path(heads[1], "function", "name") != "bash" {
		t.Errorf("tool 1 header %v", heads[1])
	}
	if args[0].String() != `{"filePath":"/work/main.go","offset":1,"limit":200}` || argPieces[0] < 3 ||
		args[1].String() != `{"command":"go test ./...","description":"run the tests"}` {
		t.Errorf("arguments %q (%d pieces), %q", args[0], argPieces[0], args[1])
	}
	if finish != "tool_calls" {
		t.Errorf("finish_reason %v", finish)
	}
	last := chunks[len(chunks)-1]
	if c, _ := last["choices"].([]any); c == nil || len(c) != 0 {
		t.Errorf("usage chunk choices %v", last["choices"])
	}
	u := last["usage"]
	if path(u, "prompt_tokens") != 1500.0 || path(u, "completion_tokens") != 77.0 || path(u, "total_tokens") != 1577.0 ||
		path(u, "prompt_tokens_details", "cached_tokens") != 600.0 {
		t.Errorf("usage %v", u)
	}

	// Without include_usage there is no usage anywhere.
	c = post(t, hs.URL+"/v1/chat/completions", "openai", strings.Replace(openaiBody, `"stream_options":{"include_usage":true},`, "", 1))
	if strings.Contains(string(c.body), `"usage"`) {
		t.Errorf("usage without include_usage:\n%s", c.body)
	}
}

func openaiClient(url string, opts ...option.RequestOption) *openai.Client {
	c := openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(url + "/v1"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0),
	}, opts...)...)
	return &c
}

func openaiParams() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model: "gpt-4.1",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are a coding agent."),
			openai.UserMessage("fix the tests"),
		},
		Tools: []openai.ChatCompletionToolUnionParam{
			openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "read"}),
			openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "bash"}),
		},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
}

// TestOpenAISDK: openai-go's accumulator rebuilds from the stream the same
// completion the plain request returns; a tool result must answer a call.
func TestOpenAISDK(t *testing.T) {
	srv, hs := serve(t, openaiToolScript)
	client := openaiClient(hs.URL)
	ctx := context.Background()
	stream := client.Chat.Completions.NewStreaming(ctx, openaiParams())
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	p := openaiParams()
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
	plain, err := client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*openai.ChatCompletion{&acc.ChatCompletion, plain} {
		ch := c.Choices[0]
		if ch.FinishReason != "tool_calls" || ch.Message.Content != "Reading the file, then running the tests to see what fails." || len(ch.Message.ToolCalls) != 2 {
			t.Fatalf("choice %+v", ch)
		}
		tc := ch.Message.ToolCalls[0]
		if tc.ID != "call_fixed_1" || tc.Function.Name != "read" || tc.Function.Arguments != `{"filePath":"/work/main.go","offset":1,"limit":200}` {
			t.Errorf("tool call %+v", tc)
		}
		if c.Usage.PromptTokens != 1500 || c.Usage.CompletionTokens != 77 || c.Usage.PromptTokensDetails.CachedTokens != 600 {
			t.Errorf("usage %+v", c.Usage)
		}
	}

	// The next turn: the assistant's calls and their results.
	next := openaiParams()
	next.Messages = append(next.Messages, plain.Choices[0].Message.ToParam(),
		openai.ToolMessage("package main", plain.Choices[0].Message.ToolCalls[0].ID),
		openai.ToolMessage("ok  \tmain\t0.1s", plain.Choices[0].Message.ToolCalls[1].ID))
	next.Tools = nil
	next.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
	got, err := client.Chat.Completions.New(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	// stop_reason max_tokens is OpenAI's length; thinking is reasoning_content.
	if ch := got.Choices[0]; ch.FinishReason != "length" || ch.Message.Content != "All done." || !strings.Contains(ch.Message.RawJSON(), `"reasoning_content":"Short answer."`) {
		t.Errorf("second turn %s", got.RawJSON())
	}
	if r := srv.Requests()[2]; r.Turn != 2 || r.Rule != "plain" || r.API != "openai" || r.Model != "gpt-4.1" || r.Stream {
		t.Errorf("log entry %+v", r)
	}
}

// TestOpenAIValidation: requests the real API refuses get its 400 or 401
// with its error body.
func TestOpenAIValidation(t *testing.T) {
	_, hs := serve(t, "rules:\n  - reply: {text: ok}\n")
	call := `{"role":"assistant","content":null,"tool_calls":[{"id":"call_a","type":"function","function":{"name":"bash","arguments":"{}"}}]}`
	msgs := func(m string) string { return `{"model":"gpt-4.1","messages":` + m + `}` }
	cases := []struct {
		name, body  string
		headers     []string
		status      int
		param, want string
	}{
		{"not JSON", `{"model":`, nil, 400, "", "We could not parse the JSON body of your request."},
		{"no model", `{"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "", "you must provide a model parameter"},
		{"no messages", `{"model":"gpt-4.1"}`, nil, 400, "messages", "Missing required parameter: 'messages'."},
		{"empty messages", msgs(`[]`), nil, 400, "messages", "Invalid 'messages': empty array."},
		{"bad role", msgs(`[{"role":"robot","content":"hi"}]`), nil, 400, "messages[0].role", "Invalid value: 'robot'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'."},
		{"orphan tool", msgs(`[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"call_x","content":"done"}]`), nil, 400, "messages.[1].role",
			"Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."},
		{"wrong tool_call_id", msgs(`[{"role":"user","content":"hi"},` + call + `,{"role":"tool","tool_call_id":"call_b","content":"x"}]`), nil, 400, "messages.[2].tool_call_id",
			"Invalid parameter: 'tool_call_id' of 'call_b' not found in 'tool_calls' of previous message."},
		{"unanswered call", msgs(`[{"role":"user","content":"hi"},` + call + `,{"role":"user","content":"and?"}]`), nil, 400, "messages.[1].role",
			"An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: call_a"},
		{"stream_options without stream", `{"model":"m","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled."},
		{"tool without function", `{"model":"m","tools":[{"type":"function"}],"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "tools[0].function", "Missing required parameter: 'tools[0].function'."},
		{"no key", msgs(`[{"role":"user","content":"hi"}]`), []string{"Authorization", ""}, 401, "", "You didn't provide an API key."},
		{"empty bearer", msgs(`[{"role":"user","content":"hi"}]`), []string{"Authorization", "Bearer "}, 401, "", "You didn't provide an API key."},
	}
	for _, c := range cases {
		got := post(t, hs.URL+"/v1/chat/completions", "openai", c.body, c.headers...)
		if got.status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, got.status, c.status, got.body)
			continue
		}
		b := decode(t, got.body)
		e := b["error"]
		param, _ := path(e, "param").(string)
		if keys(b) != "error" || keys(e) != "code,message,param,type" || path(e, "type") != "invalid_request_error" ||
			param != c.param || !strings.Contains(path(e, "message").(string), c.want) {
			t.Errorf("%s: body %s\n  want param %q, message containing %q", c.name, got.body, c.param, c.want)
		}
		if !strings.HasPrefix(got.header.Get("x-request-id"), "req_") {
			t.Errorf("%s: no x-request-id", c.name)
		}
	}
	// Parallel calls answered by consecutive tool messages are fine, and so
	// are content parts and developer messages.
	ok := post(t, hs.URL+"/v1/chat/completions", "openai", msgs(`[{"role":"developer","content":[{"type":"text","text":"be brief"}]},{"role":"user","content":[{"type":"text","text":"hi"}]},`+
		`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"a","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"b","arguments":"{}"}}]},`+
		`{"role":"tool","tool_call_id":"c2","content":"two"},{"role":"tool","tool_call_id":"c1","content":"one"}]`))
	if ok.status != 200 {
		t.Errorf("valid conversation: %d %s", ok.status, ok.body)
	}
}

// TestOpenAIErrors: injected errors in OpenAI's shape, typed by the SDK,
// retried past with retry-after.
func TestOpenAIErrors(t *testing.T) {
	_, hs := serve(t, `
mode: sequence
rules:
  - reply: {error: {status: 429, retry_after: 1500ms}}
  - reply: {error: {status: 500}}
  - reply: {error: {status: 503, message: "slow down"}}
  - reply: {error: {status: 429, retry_after: 10ms}}
  - reply: {text: recovered}
`)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	for _, want := range []struct {
		status                int
		typ, code, msg, retry string
	}{
		{429, "requests", "rate_limit_exceeded", "Rate limit reached for requests", "2"},
		{500, "server_error", "", "The server had an error while processing your request. Sorry about that!", ""},
		{503, "server_error", "", "slow down", ""},
	} {
		c := post(t, hs.URL+"/v1/chat/completions", "openai", body)
		e := decode(t, c.body)["error"]
		code, _ := path(e, "code").(string)
		if c.status != want.status || path(e, "type") != want.typ || code != want.code || path(e, "message") != want.msg || c.header.Get("retry-after") != want.retry {
			t.Errorf("got %d %v %s, want %+v", c.status, c.header, c.body, want)
		}
	}
	got, err := openaiClient(hs.URL, option.WithMaxRetries(1)).Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	if err != nil || got.Choices[0].Message.Content != "recovered" {
		t.Fatalf("retry: %v", err)
	}
	_, err = openaiClient(hs.URL).Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Type != "invalid_request_error" || !strings.Contains(apiErr.Message, "the sequence is over") {
		t.Errorf("after the script: %v", err)
	}
}
