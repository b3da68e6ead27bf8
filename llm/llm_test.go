package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/llm"
)

func TestMessageJSONRoundTrip(t *testing.T) {
	msgs := []llm.Message{
		{Role: llm.RoleUser, Content: []llm.Block{
			llm.Text{Text: "look at this"},
			llm.Image{MediaType: "image/png", Data: []byte{0x89, 'P', 'N', 'G', 0, 1, 2}},
		}},
		{Role: llm.RoleAssistant, Content: []llm.Block{
			llm.Thinking{Text: "hmm", Signature: "sig=="},
			llm.RedactedThinking{Data: "opaque"},
			llm.Text{Text: ""},
			llm.ToolUse{ID: "toolu_1", Name: "bash", Input: json.RawMessage(`{"command":"ls"}`)},
		}},
		{Role: llm.RoleUser, Content: []llm.Block{
			llm.ToolResult{ToolUseID: "toolu_1", IsError: true, Content: []llm.Block{
				llm.Text{Text: "no such file"}, llm.Image{MediaType: "image/jpeg", Data: []byte{0xff, 0xd8}},
			}},
		}},
	}
	data, err := json.Marshal(msgs)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `{"type":"tool_use","id":"toolu_1","name":"bash","input":{"command":"ls"}}`) {
		t.Errorf("unexpected encoding: %s", data)
	}
	var back []llm.Message
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, msgs) {
		t.Errorf("round trip changed the messages:\n got %#v\nwant %#v", back, msgs)
	}
	var m llm.Message
	if err := json.Unmarshal([]byte(`{"role":"user","content":[{"type":"video"}]}`), &m); err == nil || !strings.Contains(err.Error(), `"video"`) {
		t.Errorf("unknown block type: %v", err)
	}
}

func TestValidate(t *testing.T) {
	ok := llm.Request{Model: "m", Messages: []llm.Message{llm.UserText("hi")}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid request: %v", err)
	}
	user := func(b ...llm.Block) []llm.Message { return []llm.Message{{Role: llm.RoleUser, Content: b}} }
	for want, r := range map[string]llm.Request{
		"no model":                            {Messages: ok.Messages},
		"no messages":                         {Model: "m"},
		"MaxTokens is -1":                     {Model: "m", Messages: ok.Messages, MaxTokens: -1},
		"thinking budget 2000 must be below":  {Model: "m", Messages: ok.Messages, MaxTokens: 1000, Thinking: &llm.ThinkingConfig{BudgetTokens: 2000}},
		`tool "a" is defined twice`:           {Model: "m", Messages: ok.Messages, Tools: []llm.Tool{{Name: "a"}, {Name: "a"}}},
		"tool 0 has no name":                  {Model: "m", Messages: ok.Messages, Tools: []llm.Tool{{}}},
		"InputSchema is not valid JSON":       {Model: "m", Messages: ok.Messages, Tools: []llm.Tool{{Name: "a", InputSchema: json.RawMessage(`{`)}}},
		`role "system"`:                       {Model: "m", Messages: []llm.Message{{Role: "system", Content: []llm.Block{llm.Text{}}}}},
		"no content blocks":                   {Model: "m", Messages: []llm.Message{{Role: llm.RoleUser}}},
		"tool_use blocks belong in assistant": {Model: "m", Messages: user(llm.ToolUse{ID: "1", Name: "a"})},
		"thinking blocks belong in assistant": {Model: "m", Messages: user(llm.Thinking{Text: "x"})},
		"tool_result needs the ToolUseID":     {Model: "m", Messages: user(llm.ToolResult{})},
		"only text and image content":         {Model: "m", Messages: user(llm.ToolResult{ToolUseID: "1", Content: []llm.Block{llm.ToolUse{}}})},
		`image media type "image/bmp"`:        {Model: "m", Messages: user(llm.Image{MediaType: "image/bmp", Data: []byte{1}})},
		"image has no data":                   {Model: "m", Messages: user(llm.Image{MediaType: "image/png"})},
		"Input is not valid JSON": {Model: "m", Messages: []llm.Message{{Role: llm.RoleAssistant,
			Content: []llm.Block{llm.ToolUse{ID: "1", Name: "a", Input: json.RawMessage(`{"a":`)}}}}},
	} {
		err := r.Validate()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q, got %v", want, err)
		}
	}
}

func TestParseModel(t *testing.T) {
	for in, want := range map[string][2]string{
		"anthropic/claude-sonnet-4-5":     {"anthropic", "claude-sonnet-4-5"},
		"openai/gpt-4.1":                  {"openai", "gpt-4.1"},
		"openai/meta-llama/llama-3.3-70b": {"openai", "meta-llama/llama-3.3-70b"},
		"  ollama/qwen3-coder:30b ":       {"ollama", "qwen3-coder:30b"},
	} {
		p, m, err := llm.ParseModel(in)
		if err != nil || p != want[0] || m != want[1] {
			t.Errorf("ParseModel(%q) = %q, %q, %v; want %q", in, p, m, err, want)
		}
	}
	for in, want := range map[string]string{
		"claude-opus-4-8": "write anthropic/claude-opus-4-8",
		"o3":              "write openai/o3",
		"llama3":          "write <provider>/llama3",
		"":                "no model name",
		"openai/":         "no model id",
		"/gpt-4.1":        "empty provider",
	} {
		if _, _, err := llm.ParseModel(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseModel(%q): %v, want %q", in, err, want)
		}
	}
}

func TestPriceLookup(t *testing.T) {
	table := llm.NewPriceTable(map[string]llm.Price{
		"claude-sonnet-4-5": {Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75},
		"gpt-4.1":           {Input: 2, Output: 8, CacheRead: 0.5, CacheWrite: 2},
		"gpt-5":             {Input: 1.25, Output: 10},
		"Mixed-Case":        {Input: 1},
	})
	for model, want := range map[string]float64{
		"claude-sonnet-4-5":           3,
		"CLAUDE-SONNET-4-5":           3,
		"claude-sonnet-4-5-20250929":  3, // Anthropic snapshot
		"gpt-4.1-2025-04-14":          2, // OpenAI snapshot
		"anthropic/claude-sonnet-4-5": 3,
		"openrouter/openai/gpt-4.1":   2,
		"mixed-case":                  1,
	} {
		p, ok := table.Lookup(model)
		if !ok || p.Input != want {
			t.Errorf("Lookup(%q) = %v, %v; want input %v", model, p, ok, want)
		}
	}
	for _, model := range []string{"gpt-5-pro", "gpt-4.1-mini", "claude-sonnet-4-5-fast", "claude-sonnet-4-5-2025", "", "gpt"} {
		if p, ok := table.Lookup(model); ok {
			t.Errorf("Lookup(%q) = %v; a variant must not borrow a base model's price", model, p)
		}
		if k, ok := table.Key(model); ok || k != "" {
			t.Errorf("Key(%q) = %q, %v; want none", model, k, ok)
		}
	}
	// Key: one name per model, whatever the spelling.
	for model, want := range map[string]string{
		"CLAUDE-SONNET-4-5":           "claude-sonnet-4-5",
		"claude-sonnet-4-5-20250929":  "claude-sonnet-4-5",
		"openrouter/openai/gpt-4.1":   "gpt-4.1",
		"gpt-4.1-2025-04-14":          "gpt-4.1",
		"anthropic/claude-sonnet-4-5": "claude-sonnet-4-5",
		"Mixed-Case":                  "mixed-case",
	} {
		if k, ok := table.Key(model); !ok || k != want {
			t.Errorf("Key(%q) = %q, %v; want %q", model, k, ok, want)
		}
	}
}

func TestCost(t *testing.T) {
	u := llm.Usage{InputTokens: 1000, OutputTokens: 500, CacheReadTokens: 2000, CacheWriteTokens: 300}
	usd, ok := llm.Cost("claude-sonnet-4-5-20250929", u)
	// 1000*3 + 500*15 + 2000*0.30 + 300*3.75 = 12225 µUSD
	if !ok || math.Abs(usd-0.012225) > 1e-12 {
		t.Errorf("cost %v, %v; want 0.012225", usd, ok)
	}
	if usd, ok := llm.Cost("no-such-model", u); ok || usd != 0 {
		t.Errorf("unpriced: %v, %v", usd, ok)
	}
	// Long prompts switch every rate to the higher tier.
	p := llm.Price{Input: 1, Output: 2, LongPrompt: &llm.LongPromptPrice{Above: 1000, Input: 10, Output: 20, CacheRead: 5}}
	if got := p.Cost(llm.Usage{InputTokens: 1000, OutputTokens: 1000}); math.Abs(got-0.003) > 1e-12 {
		t.Errorf("at the threshold: %v, want 0.003", got)
	}
	if got := p.Cost(llm.Usage{InputTokens: 900, CacheReadTokens: 101, OutputTokens: 1000}); math.Abs(got-(9000+505+20000)/1e6) > 1e-12 {
		t.Errorf("above the threshold: %v", got)
	}
	if got := (llm.Usage{InputTokens: 1, OutputTokens: 2, CacheReadTokens: 3, CacheWriteTokens: 4}).Add(u); got != (llm.Usage{InputTokens: 1001, OutputTokens: 502, CacheReadTokens: 2003, CacheWriteTokens: 304}) {
		t.Errorf("Add: %+v", got)
	}
}

func TestBuiltinPricesCoverCurrentModels(t *testing.T) {
	for _, m := range []string{"claude-opus-4-8", "claude-sonnet-4-6", "claude-sonnet-4-5", "claude-haiku-4-5-20251001",
		"claude-opus-5", "claude-sonnet-5-5", "gpt-5.5", "gpt-5.4-mini", "gpt-4.1", "gpt-6-sol", "o4-mini"} {
		p, ok := llm.DefaultPrices.Lookup(m)
		if !ok || p.Input <= 0 || p.Output <= p.Input || p.CacheRead <= 0 || p.CacheRead >= p.Input || p.CacheWrite < p.Input {
			t.Errorf("%s: %+v, %v", m, p, ok)
		}
	}
}

func TestLoadPrices(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	table := llm.NewPriceTable(map[string]llm.Price{"gpt-4.1": {Input: 2, Output: 8}})
	if err := table.Load(write("p.yaml", `
# USD per million tokens
my-finetune: {input: 1.5, output: 6}
gpt-4.1: {input: 1, output: 4, cache_read: 0.25, cache_write: 1}
haiku-tiered:
  input: 0.1
  output: 0.5
  long_prompt: {above: 100000, input: 0.5, output: 2.5}
`)); err != nil {
		t.Fatal(err)
	}
	if err := table.Load(write("p.json", `{"json-model": {"input": 7, "output": 9}}`)); err != nil {
		t.Fatal(err)
	}
	if err := table.Load(write("empty.yml", "")); err != nil {
		t.Errorf("an empty file: %v", err)
	}
	for model, want := range map[string]float64{"my-finetune": 1.5, "gpt-4.1": 1, "json-model": 7} {
		if p, ok := table.Lookup(model); !ok || p.Input != want {
			t.Errorf("%s: %v %v, want input %v", model, p, ok, want)
		}
	}
	if p, _ := table.Lookup("haiku-tiered"); p.LongPrompt == nil || p.LongPrompt.Above != 100000 || p.LongPrompt.Output != 2.5 {
		t.Errorf("long_prompt not loaded: %+v", p)
	}
	table.Set("set-model", llm.Price{Input: 4})
	if p, ok := table.Lookup("SET-MODEL"); !ok || p.Input != 4 {
		t.Errorf("Set: %v %v", p, ok)
	}
	for name, data := range map[string]string{
		"unknown.yaml":  "m: {input: 1, ouput: 2}",
		"negative.json": `{"m": {"input": -1}}`,
		"tier.yaml":     "m: {input: 1, long_prompt: {input: 2}}",
		"prices.toml":   "",
		"broken.json":   "{",
	} {
		err := table.Load(write(name, data))
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming the file", name, err)
		}
	}
	if _, ok := table.Lookup("m"); ok {
		t.Errorf("a failed load added entries")
	}
	if err := table.Load(filepath.Join(dir, "missing.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for h, want := range map[[2]string]time.Duration{
		{"Retry-After-Ms", "1500"}: 1500 * time.Millisecond,
		{"Retry-After", "7"}:       7 * time.Second,
		{"Retry-After", "0.5"}:     500 * time.Millisecond,
		{"Retry-After", now.Add(90 * time.Second).Format(http.TimeFormat)}: 90 * time.Second,
		{"Retry-After", now.Add(-time.Hour).Format(http.TimeFormat)}:       0,
		{"Retry-After", "soon"}: 0,
		{"Retry-After", "-3"}:   0,
		{"X-Other", "5"}:        0,
	} {
		hdr := http.Header{}
		hdr.Set(h[0], h[1])
		if got := llm.ParseRetryAfter(hdr, now); got != want {
			t.Errorf("%s: %s = %s, want %s", h[0], h[1], got, want)
		}
	}
	// retry-after-ms wins over retry-after (which is rounded up to seconds).
	hdr := http.Header{"Retry-After": {"2"}, "Retry-After-Ms": {"1500"}}
	if got := llm.ParseRetryAfter(hdr, now); got != 1500*time.Millisecond {
		t.Errorf("both headers: %s", got)
	}
}

func TestRetryDelay(t *testing.T) {
	p := llm.RetryPolicy{BaseDelay: time.Second, MaxDelay: 10 * time.Second, Jitter: -1}
	var got []time.Duration
	for attempt := 1; attempt <= 6; attempt++ {
		d, ok := p.Delay(attempt, 0)
		if !ok {
			t.Fatal("not retried")
		}
		got = append(got, d)
	}
	if fmt.Sprint(got) != "[1s 2s 4s 8s 10s 10s]" {
		t.Errorf("backoff %v", got)
	}
	if d, _ := p.Delay(100, 0); d != 10*time.Second {
		t.Errorf("attempt 100: %s (overflow?)", d)
	}
	// Jitter takes up to the fraction off, never adds.
	for _, r := range []float64{0, 0.5, 0.999} {
		p := llm.RetryPolicy{BaseDelay: time.Second, Jitter: 0.2, Rand: func() float64 { return r }}
		d, _ := p.Delay(3, 0)
		want := 4*time.Second - time.Duration(float64(4*time.Second)*0.2*r)
		if d != want {
			t.Errorf("jitter %v: %s, want %s", r, d, want)
		}
	}
	// Retry-after: waited in full when longer than the backoff, refused beyond the cap.
	if d, ok := p.Delay(1, 3*time.Second); !ok || d != 3*time.Second {
		t.Errorf("retry-after 3s: %s %v", d, ok)
	}
	if d, ok := p.Delay(4, 3*time.Second); !ok || d != 8*time.Second {
		t.Errorf("backoff longer than retry-after: %s %v", d, ok)
	}
	if _, ok := p.Delay(1, 61*time.Second); ok {
		t.Errorf("retry-after beyond the default 60s cap retried")
	}
	def := llm.DefaultRetryPolicy()
	if def.MaxAttempts != 5 || def.BaseDelay != time.Second || def.MaxDelay != 30*time.Second || def.MaxRetryAfter != time.Minute || def.Jitter != 0.2 {
		t.Errorf("defaults %+v", def)
	}
}

func TestErrors(t *testing.T) {
	e := &llm.Error{Kind: llm.ErrOverloaded, Provider: "anthropic", Status: 529, Type: "overloaded_error",
		Message: "Overloaded", RequestID: "req_1", Attempts: 5, RetryAfter: 2 * time.Second}
	const want = "anthropic: overloaded (HTTP 529 overloaded_error): Overloaded [request req_1]; gave up after 5 attempts; the API asked to wait 2s; the provider is at capacity; retry later or use another model"
	if e.Error() != want {
		t.Errorf("Error() =\n%s\nwant\n%s", e, want)
	}
	var err error = fmt.Errorf("step 3: %w", e)
	if !errors.Is(err, llm.ErrOverloaded) || errors.Is(err, llm.ErrRateLimited) {
		t.Errorf("errors.Is by kind is wrong")
	}
	c := &llm.Error{Kind: llm.ErrCanceled, Provider: "openai", Err: context.Canceled}
	if !errors.Is(c, context.Canceled) || !errors.Is(c, llm.ErrCanceled) || c.Kind.Retryable() {
		t.Errorf("a canceled error must unwrap to context.Canceled and not be retryable")
	}
	for status, want := range map[int]llm.Kind{400: llm.ErrBadRequest, 401: llm.ErrAuth, 403: llm.ErrAuth, 404: llm.ErrBadRequest,
		408: llm.ErrTimeout, 409: llm.ErrServer, 413: llm.ErrContextTooLong, 422: llm.ErrBadRequest, 429: llm.ErrRateLimited,
		500: llm.ErrServer, 502: llm.ErrServer, 503: llm.ErrServer, 529: llm.ErrOverloaded} {
		if got := llm.KindForStatus(status); got != want {
			t.Errorf("KindForStatus(%d) = %v, want %v", status, got, want)
		}
	}
	for k, retry := range map[llm.Kind]bool{llm.ErrRateLimited: true, llm.ErrOverloaded: true, llm.ErrServer: true, llm.ErrNetwork: true,
		llm.ErrTimeout: true, llm.ErrCanceled: false, llm.ErrContextTooLong: false, llm.ErrAuth: false, llm.ErrBadRequest: false} {
		if k.Retryable() != retry {
			t.Errorf("%v retryable = %v", k, !retry)
		}
	}
}
