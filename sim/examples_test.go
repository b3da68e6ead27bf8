package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"regexp/syntax"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"gopkg.in/yaml.v3"

	"github.com/harvest-dev/harvest/internal/testbin"
)

// TestExamples loads every example script in the repository (sim/examples/
// *.yaml, and any other YAML file whose top level has rules:, like the demo
// model of harvest run) and plays it through a sim over real HTTP with
// the official SDK of each API: for each rule, in order and as many times as
// it may be used (twice when unlimited, alternating the APIs a rule allows),
// a request that meets its conditions, continuing the conversation of the
// rule before when it can (the reply's own tool calls answered with the
// results the rule expects). The sim must answer each with that rule and
// the client must read exactly what the rule scripts. A rule that an earlier
// rule shadows, or whose conditions no request can meet, fails the test.
func TestExamples(t *testing.T) {
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			return nil
		}
		if filepath.Dir(p) == filepath.Join(root, "sim", "examples") || looksLikeScript(p) {
			files = append(files, p)
		}
		return nil
	})
	for _, want := range []string{"chat", "coding-task", "claude-code", "opencode", "retry"} {
		if !containsSuffix(files, filepath.Join("sim", "examples", want+".yaml")) {
			t.Errorf("example %s.yaml is missing from sim/examples (found %q)", want, files)
		}
	}
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		t.Run(rel, func(t *testing.T) { playScript(t, f) })
	}
}

// looksLikeScript reports whether a YAML file is a sim script: a mapping
// with rules: at the top.
func looksLikeScript(p string) bool {
	data, err := os.ReadFile(p)
	if err != nil {
		return false
	}
	var top map[string]any
	if yaml.Unmarshal(data, &top) != nil {
		return false
	}
	_, ok := top["rules"]
	return ok
}

func containsSuffix(list []string, suffix string) bool {
	for _, s := range list {
		if strings.HasSuffix(s, suffix) {
			return true
		}
	}
	return false
}

// conversation is the request being built: raw JSON messages in the
// API's own shape.
type conversation struct {
	api    string
	model  string
	system string
	tools  []string
	msgs   []map[string]any
	turn   int
	// the last reply, to continue from
	text      string
	toolCalls []playedCall
}

type playedCall struct {
	id, name string
	input    json.RawMessage
}

// played is what a client read back.
type played struct {
	status    int
	errType   string
	errMsg    string
	thinking  string
	text      string
	calls     []playedCall
	stop      string
	in, out   int64
	cacheRead int64
	cacheMade int64
}

// maxPlayedDelay is the longest reply delay TestExamples waits for.
const maxPlayedDelay = 10 * time.Second

func playScript(t *testing.T, file string) {
	s, err := LoadScript(file)
	if err != nil {
		t.Fatal(err)
	}
	srv := New(s)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	var conv *conversation
	for _, r := range s.Rules {
		if d := max(r.Reply.Delay, s.Defaults.Delay); d > maxPlayedDelay {
			// A model that never answers (a watchdog test's): loaded and
			// checked with the script, not waited for here.
			t.Logf("rule %q (line %d): not played, its reply waits %v", r.Name, r.Line, d)
			conv = nil
			continue
		}
		uses := r.Times
		if uses == 0 {
			uses = 2
		}
		for k := range uses {
			api := r.When.API
			if api == "" {
				api = []string{APIAnthropic, APIOpenAI}[k%2]
			}
			stream := k%2 == 0
			if r.When.Stream != nil {
				stream = *r.When.Stream
			}
			next := continueConversation(t, conv, r, api)
			if next == nil {
				next = freshConversation(t, r, api)
			}
			body := next.body(r, stream)
			x, err := parseBody(api, body)
			if err != nil {
				t.Fatalf("rule %q (line %d): the request written for it is invalid: %v\n%s", r.Name, r.Line, err, body)
			}
			if fails := r.When.failures(x); len(fails) > 0 {
				t.Fatalf("rule %q (line %d): cannot write a request that meets its conditions: %s", r.Name, r.Line, strings.Join(fails, "; "))
			}
			got := send(t, hs.URL, api, body, stream)
			reqs := srv.Requests()
			last := reqs[len(reqs)-1]
			if last.Rule != r.Name {
				t.Fatalf("rule %q (line %d), use %d: the request was answered by %q (%s): an earlier rule shadows it", r.Name, r.Line, k+1, last.Rule, last.Error)
			}
			checkReply(t, s, r, api, got)
			next.remember(api, got)
			conv = next
		}
	}
}

// continueConversation extends conv with its last reply and, when that
// reply called tools, their results, if the result meets r's conditions.
func continueConversation(t *testing.T, conv *conversation, r *Rule, api string) *conversation {
	if conv == nil || conv.api != api || (conv.text == "" && len(conv.toolCalls) == 0) {
		return nil
	}
	c := *conv
	c.msgs = append([]map[string]any(nil), conv.msgs...)
	c.system, c.tools = r.When.System, r.When.Tools
	if r.When.Model != "" {
		c.model = modelFor(t, r.When.Model, api)
	}
	result := r.When.ToolResult
	if result == "" {
		result = "done"
	}
	if api == APIAnthropic {
		var content []map[string]any
		if c.text != "" {
			content = append(content, map[string]any{"type": "text", "text": c.text})
		}
		var results []map[string]any
		for _, tc := range c.toolCalls {
			content = append(content, map[string]any{"type": "tool_use", "id": tc.id, "name": tc.name, "input": tc.input})
			results = append(results, map[string]any{"type": "tool_result", "tool_use_id": tc.id, "content": result})
		}
		c.msgs = append(c.msgs, map[string]any{"role": "assistant", "content": content})
		if len(results) > 0 {
			c.msgs = append(c.msgs, map[string]any{"role": "user", "content": results})
		} else {
			c.msgs = append(c.msgs, map[string]any{"role": "user", "content": userText(t, r)})
		}
	} else {
		m := map[string]any{"role": "assistant", "content": c.text}
		var calls []map[string]any
		for _, tc := range c.toolCalls {
			calls = append(calls, map[string]any{"id": tc.id, "type": "function", "function": map[string]any{"name": tc.name, "arguments": string(tc.input)}})
		}
		if len(calls) > 0 {
			m["tool_calls"] = calls
		}
		c.msgs = append(c.msgs, m)
		for _, tc := range c.toolCalls {
			c.msgs = append(c.msgs, map[string]any{"role": "tool", "tool_call_id": tc.id, "content": result})
		}
		if len(calls) == 0 {
			c.msgs = append(c.msgs, map[string]any{"role": "user", "content": userText(t, r)})
		}
	}
	c.turn++
	x, err := parseBody(api, c.body(r, true))
	if err != nil || len(r.When.failures(x)) > 0 {
		return nil
	}
	return &c
}

// freshConversation writes a conversation that meets r's conditions: turn-1
// earlier exchanges, the last of them a tool call when r wants a tool result.
func freshConversation(t *testing.T, r *Rule, api string) *conversation {
	w := r.When
	c := &conversation{api: api, model: modelFor(t, w.Model, api), system: w.System, tools: w.Tools, turn: max(1, w.Turn)}
	if w.ToolResult != "" && c.turn == 1 {
		c.turn = 2
	}
	tool := "tool"
	if len(w.Tools) > 0 {
		tool = w.Tools[0]
	}
	for i := 1; i < c.turn; i++ {
		user := fmt.Sprintf("earlier request %d", i)
		last := i == c.turn-1
		if last {
			user = userText(t, r)
		}
		c.add(map[string]any{"role": "user", "content": user})
		if last && w.ToolResult != "" {
			id := fmt.Sprintf("toolu_play_%d", i)
			if api == APIOpenAI {
				id = fmt.Sprintf("call_play_%d", i)
				c.add(map[string]any{"role": "assistant", "content": nil, "tool_calls": []map[string]any{{"id": id, "type": "function", "function": map[string]any{"name": tool, "arguments": "{}"}}}})
				c.add(map[string]any{"role": "tool", "tool_call_id": id, "content": w.ToolResult})
			} else {
				c.add(map[string]any{"role": "assistant", "content": []map[string]any{{"type": "tool_use", "id": id, "name": tool, "input": map[string]any{}}}})
				c.add(map[string]any{"role": "user", "content": []map[string]any{{"type": "tool_result", "tool_use_id": id, "content": w.ToolResult}}})
			}
			return c
		}
		c.add(map[string]any{"role": "assistant", "content": fmt.Sprintf("earlier answer %d", i)})
	}
	c.add(map[string]any{"role": "user", "content": userText(t, r)})
	return c
}

func (c *conversation) add(m map[string]any) { c.msgs = append(c.msgs, m) }

func (c *conversation) remember(api string, got played) {
	c.text, c.toolCalls = got.text, got.calls
	if got.status != 200 {
		c.text, c.toolCalls = "", nil
	}
}

// body is the request body for r.
func (c *conversation) body(r *Rule, stream bool) []byte {
	maxTokens := 1024
	if r.When.MaxTokens != 0 {
		maxTokens = r.When.MaxTokens
	}
	req := map[string]any{"model": c.model, "stream": stream}
	var tools []map[string]any
	msgs := c.msgs
	if c.api == APIAnthropic {
		req["max_tokens"] = maxTokens
		if c.system != "" {
			req["system"] = []map[string]any{{"type": "text", "text": c.system}}
		}
		for _, name := range c.tools {
			tools = append(tools, map[string]any{"name": name, "input_schema": map[string]any{"type": "object"}})
		}
	} else {
		req["max_completion_tokens"] = maxTokens
		if stream {
			req["stream_options"] = map[string]any{"include_usage": true}
		}
		if c.system != "" {
			msgs = append([]map[string]any{{"role": "system", "content": c.system}}, msgs...)
		}
		for _, name := range c.tools {
			tools = append(tools, map[string]any{"type": "function", "function": map[string]any{"name": name, "parameters": map[string]any{"type": "object"}}})
		}
	}
	if tools != nil {
		req["tools"] = tools
	}
	req["messages"] = msgs
	b, _ := json.Marshal(req)
	return b
}

func parseBody(api string, body []byte) (*exchange, error) {
	if api == APIAnthropic {
		return parseAnthropic(body, false, true)
	}
	x, err := parseOpenAI(body)
	if err != nil {
		return nil, err
	}
	return x, nil
}

// userText writes a user message that meets r's last_user conditions.
func userText(t *testing.T, r *Rule) string {
	w := r.When
	if w.LastUser == "" && w.LastUserRegexp == nil {
		return "please continue"
	}
	var g string
	if w.LastUserRegexp != nil {
		g = generate(w.LastUserRegexp)
	}
	for _, s := range []string{w.LastUser, g, w.LastUser + " " + g, g + " " + w.LastUser} {
		if strings.Contains(s, w.LastUser) && (w.LastUserRegexp == nil || w.LastUserRegexp.MatchString(s)) {
			return s
		}
	}
	t.Fatalf("rule %q (line %d): no user message found that contains %q and matches %q", r.Name, r.Line, w.LastUser, w.LastUserRegexp)
	return ""
}

// generate writes a string the regexp matches: literals as they are, the
// first member of a class, optional parts left out, one of each repeat.
func generate(re *regexp.Regexp) string {
	tree, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return ""
	}
	var b strings.Builder
	var walk func(*syntax.Regexp)
	walk = func(n *syntax.Regexp) {
		switch n.Op {
		case syntax.OpLiteral:
			b.WriteString(string(n.Rune))
		case syntax.OpCharClass:
			for i := 0; i+1 < len(n.Rune); i += 2 {
				if n.Rune[i] >= ' ' || n.Rune[i+1] >= ' ' {
					b.WriteRune(max(n.Rune[i], ' '))
					return
				}
			}
		case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
			b.WriteByte('x')
		case syntax.OpCapture, syntax.OpPlus:
			walk(n.Sub[0])
		case syntax.OpRepeat:
			for range n.Min {
				walk(n.Sub[0])
			}
		case syntax.OpConcat:
			for _, s := range n.Sub {
				walk(s)
			}
		case syntax.OpAlternate:
			walk(n.Sub[0])
		}
	}
	walk(tree.Simplify())
	return b.String()
}

// modelFor writes a model name the glob matches.
func modelFor(t *testing.T, glob, api string) string {
	if glob == "" {
		if api == APIAnthropic {
			return "claude-sonnet-4-5"
		}
		return "gpt-4.1"
	}
	var b strings.Builder
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; c {
		case '*':
		case '?':
			b.WriteByte('x')
		case '\\':
			if i+1 < len(glob) {
				i++
				b.WriteByte(glob[i])
			}
		case '[':
			j := strings.IndexByte(glob[i:], ']')
			class := glob[i+1 : i+j]
			if strings.HasPrefix(class, "^") || strings.HasPrefix(class, "!") || class == "" {
				b.WriteByte('x')
			} else {
				b.WriteByte(class[0])
			}
			i += j
		default:
			b.WriteByte(c)
		}
	}
	m := b.String()
	if ok, _ := path.Match(glob, m); !ok {
		t.Fatalf("cannot write a model name that matches %q", glob)
	}
	return m
}

// send makes the request with the API's official SDK and returns what the
// client read.
func send(t *testing.T, url, api string, body []byte, stream bool) played {
	ctx := context.Background()
	var got played
	if api == APIAnthropic {
		c := anthropic.NewClient(aoption.WithBaseURL(url), aoption.WithAPIKey("sk-ant-play"), aoption.WithMaxRetries(0))
		opt := aoption.WithRequestBody("application/json", body)
		var m *anthropic.Message
		var err error
		if stream {
			st := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{}, opt)
			m = &anthropic.Message{}
			for st.Next() {
				if err := m.Accumulate(st.Current()); err != nil {
					t.Fatalf("accumulating the stream: %v", err)
				}
			}
			err = st.Err()
		} else {
			m, err = c.Messages.New(ctx, anthropic.MessageNewParams{}, opt)
		}
		var apiErr *anthropic.Error
		if errors.As(err, &apiErr) {
			var b struct {
				Error struct{ Message string }
			}
			json.Unmarshal([]byte(apiErr.RawJSON()), &b)
			return played{status: apiErr.StatusCode, errType: string(apiErr.Type()), errMsg: b.Error.Message}
		}
		if err != nil {
			t.Fatal(err)
		}
		got.status = 200
		for _, b := range m.Content {
			switch b.Type {
			case "thinking":
				got.thinking = b.Thinking
			case "text":
				got.text = b.Text
			case "tool_use":
				got.calls = append(got.calls, playedCall{b.ID, b.Name, b.Input})
			}
		}
		got.stop = string(m.StopReason)
		got.in, got.out, got.cacheRead, got.cacheMade = m.Usage.InputTokens, m.Usage.OutputTokens, m.Usage.CacheReadInputTokens, m.Usage.CacheCreationInputTokens
		return got
	}
	c := openai.NewClient(ooption.WithBaseURL(url+"/v1"), ooption.WithAPIKey("sk-play"), ooption.WithMaxRetries(0))
	opt := ooption.WithRequestBody("application/json", body)
	var cc *openai.ChatCompletion
	var err error
	if stream {
		st := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{}, opt)
		acc := openai.ChatCompletionAccumulator{}
		for st.Next() {
			acc.AddChunk(st.Current())
		}
		err = st.Err()
		cc = &acc.ChatCompletion
	} else {
		cc, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{}, opt)
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return played{status: apiErr.StatusCode, errType: apiErr.Type, errMsg: apiErr.Message}
	}
	if err != nil {
		t.Fatal(err)
	}
	got.status = 200
	ch := cc.Choices[0]
	got.text = ch.Message.Content
	for _, tc := range ch.Message.ToolCalls {
		got.calls = append(got.calls, playedCall{tc.ID, tc.Function.Name, json.RawMessage(tc.Function.Arguments)})
	}
	got.stop = ch.FinishReason
	got.in, got.out, got.cacheRead = cc.Usage.PromptTokens, cc.Usage.CompletionTokens, cc.Usage.PromptTokensDetails.CachedTokens
	return got
}

// checkReply compares what the client read with what the rule scripts.
func checkReply(t *testing.T, s *Script, r *Rule, api string, got played) {
	t.Helper()
	where := fmt.Sprintf("rule %q (line %d) over %s", r.Name, r.Line, api)
	if e := r.Reply.Error; e != nil {
		if got.status != e.Status || (e.Message != "" && got.errMsg != e.Message) || (e.Type != "" && got.errType != e.Type) {
			t.Errorf("%s: got %d %s %q, want the scripted error %+v", where, got.status, got.errType, got.errMsg, *e)
		}
		return
	}
	if got.status != 200 {
		t.Fatalf("%s: status %d %s", where, got.status, got.errMsg)
	}
	rep := r.Reply
	if got.text != rep.Text || (api == APIAnthropic && got.thinking != rep.Thinking) {
		t.Errorf("%s: text %q thinking %q, want %q / %q", where, got.text, got.thinking, rep.Text, rep.Thinking)
	}
	if len(got.calls) != len(rep.ToolCalls) {
		t.Fatalf("%s: %d tool calls, want %d", where, len(got.calls), len(rep.ToolCalls))
	}
	for i, tc := range rep.ToolCalls {
		var a, b any
		json.Unmarshal(got.calls[i].input, &a)
		json.Unmarshal(tc.Input, &b)
		if got.calls[i].name != tc.Name || !reflect.DeepEqual(a, b) || (tc.ID != "" && got.calls[i].id != tc.ID) {
			t.Errorf("%s: tool call %d = %s %s, want %s %s", where, i, got.calls[i].name, got.calls[i].input, tc.Name, tc.Input)
		}
	}
	wantStop := stopReasons[rep.StopReason]
	if rep.StopReason == "" {
		wantStop = stopReasons["end_turn"]
		if len(rep.ToolCalls) > 0 {
			wantStop = stopReasons["tool_use"]
		}
	}
	if i := map[string]int{APIAnthropic: 0, APIOpenAI: 1}[api]; got.stop != wantStop[i] {
		t.Errorf("%s: stop %q, want %q", where, got.stop, wantStop[i])
	}
	u := rep.Usage.merge(s.Defaults.Usage)
	cr, cw := int64(intOr(u.CacheReadInputTokens, 0)), int64(intOr(u.CacheCreationInputTokens, 0))
	in := got.in
	if api == APIOpenAI {
		in -= cr + cw // prompt_tokens counts the cached tokens too
	}
	if (u.InputTokens != nil && in != int64(*u.InputTokens)) || (u.OutputTokens != nil && got.out != int64(*u.OutputTokens)) ||
		got.cacheRead != cr || (api == APIAnthropic && got.cacheMade != cw) || in <= 0 || got.out <= 0 {
		t.Errorf("%s: usage in %d out %d cache read %d written %d, want the scripted %s", where, got.in, got.out, got.cacheRead, got.cacheMade, usageString(u))
	}
}

func usageString(u Usage) string {
	f := func(p *int) string {
		if p == nil {
			return "estimated"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("in %s out %s cache read %s written %s", f(u.InputTokens), f(u.OutputTokens), f(u.CacheReadInputTokens), f(u.CacheCreationInputTokens))
}
