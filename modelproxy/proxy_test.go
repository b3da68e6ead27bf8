package modelproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/providers"
	"github.com/harvest-dev/harvest/sim"
)

const chatScript = `
rules:
  - name: anth
    when: {api: anthropic, last_user: "hello"}
    reply:
      thinking: "The user greets me; a tool call first."
      text: "Hello from the model, through Harvest's proxy."
      tool_calls: [{name: bash, input: {command: "echo hi", timeout: 30}}]
      usage: {input_tokens: 1200, output_tokens: 345, cache_read_input_tokens: 5000, cache_creation_input_tokens: 700}
  - name: oai
    when: {api: openai, last_user: "hello"}
    reply:
      text: "Hello from the model, through Harvest's proxy."
      tool_calls: [{name: bash, input: {command: "echo hi", timeout: 30}}]
      usage: {input_tokens: 900, output_tokens: 210, cache_read_input_tokens: 3000}
  - name: big
    when: {last_user: "spend"}
    reply:
      text: "That was expensive."
      usage: {input_tokens: 200000, output_tokens: 20000}
  - name: slow
    when: {last_user: "slow"}
    reply:
      text: "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty"
      chunk_delay: 50ms
      usage: {input_tokens: 77, output_tokens: 66}
  - name: unpriced
    when: {model: "my-finetune"}
    reply: {text: "cheap", usage: {input_tokens: 10, output_tokens: 1}}
`

var bashTool = llm.Tool{Name: "bash", Description: "run a command",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"},"timeout":{"type":"integer"}},"required":["command"]}`)}

// client opens an llm client of api ("anthropic" or "openai") on the proxy
// with token as its key, retrying at most once more.
func (h *harness) llmClient(api, model, token string) *llm.Client {
	h.t.Helper()
	base := h.url
	if api == apiOpenAI {
		base += "/v1"
	}
	c, err := providers.Open(providers.Config{
		Endpoints:  map[string]providers.Endpoint{api: {BaseURL: base, APIKey: token}},
		HTTPClient: h.client,
		Retry:      llm.RetryPolicy{MaxAttempts: 2, Sleep: func(context.Context, time.Duration) error { return nil }},
	}, api+"/"+model)
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

// The llm clients (Harvest's own, on the official SDKs) get complete
// streamed answers through the proxy, with only the session token as their
// key; the sim gets the real key (checked on every request by the
// harness); the usage recorded for the session is exactly what the sim
// reported and the client saw, priced by the price table.
func TestLLMClientsThroughProxy(t *testing.T) {
	h := newHarness(t, chatScript, nil)
	for _, tc := range []struct{ api, model, rule string }{
		{apiAnthropic, "claude-sonnet-4-5", "anth"},
		{apiOpenAI, "gpt-4.1", "oai"},
	} {
		t.Run(tc.api, func(t *testing.T) {
			var got usageLog
			tok := h.grant(Grant{Session: "s-" + tc.api, OnUsage: got.add})
			c := h.llmClient(tc.api, tc.model, tok)
			var text strings.Builder
			events := 0
			resp, err := c.Stream(context.Background(), llm.Request{
				Messages: []llm.Message{llm.UserText("hello")}, Tools: []llm.Tool{bashTool}, MaxTokens: 4096,
			}, func(ev llm.Event) {
				events++
				if d, ok := ev.(llm.TextDelta); ok {
					text.WriteString(d.Text)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			const want = "Hello from the model, through Harvest's proxy."
			if resp.Message.Text() != want || text.String() != want || events < 5 {
				t.Errorf("answer %q, streamed %q in %d events; want %q streamed in pieces", resp.Message.Text(), text.String(), events, want)
			}
			if uses := resp.Message.ToolUses(); len(uses) != 1 || uses[0].Name != "bash" || string(uses[0].Input) != `{"command":"echo hi","timeout":30}` {
				t.Errorf("tool calls %+v, want bash {command: echo hi, timeout: 30}", uses)
			}
			if resp.StopReason != llm.StopToolUse {
				t.Errorf("stop reason %q, want tool_use", resp.StopReason)
			}

			us := got.all()
			if len(us) != 1 {
				t.Fatalf("OnUsage called %d times, want 1: %+v", len(us), us)
			}
			u := us[0]
			if u.Tokens != resp.Usage {
				t.Errorf("recorded tokens %+v, the client saw %+v", u.Tokens, resp.Usage)
			}
			// The sim's numbers: Anthropic reports them as scripted; OpenAI
			// reports prompt_tokens including the cached ones, which llm
			// (and the proxy) count apart.
			wantTokens := scripted(t, parseScript(t, chatScript), tc.rule)
			if u.Tokens != wantTokens {
				t.Errorf("recorded tokens %+v, want the script's %+v", u.Tokens, wantTokens)
			}
			wantCost, _ := llm.DefaultPrices.Cost(tc.model, resp.Usage)
			if u.Session != "s-"+tc.api || u.API != tc.api || u.Model != tc.model || !u.Stream || !u.Complete ||
				!u.Priced || !near(u.CostUSD, wantCost) || wantCost == 0 || !near(u.SpentUSD, wantCost) {
				t.Errorf("usage %+v, want session s-%s, %s, model %s, streamed, complete, priced at $%.6f", u, tc.api, tc.api, tc.model, wantCost)
			}
			if spent := h.proxy.Spent("s-" + tc.api); !near(spent, wantCost) {
				t.Errorf("Spent = %v, want %v", spent, wantCost)
			}
		})
	}
}

func parseScript(t testing.TB, text string) *sim.Script {
	t.Helper()
	s, err := sim.ParseScript("script.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// Requests that are not streamed get their whole answer too, and are
// recorded; an OpenAI stream that did not ask for usage is made to (else a
// box could stream uncounted); count_tokens and models are forwarded and
// cost nothing.
func TestNonStreamingAndSideCalls(t *testing.T) {
	h := newHarness(t, chatScript, nil)
	var got usageLog
	tok := h.grant(Grant{Session: "s", OnUsage: got.add})
	script := parseScript(t, chatScript)

	status, _, body := h.post("/v1/messages", anthHeader(tok),
		`{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"hello"}]}`)
	var msg struct {
		Content []struct{ Type, Text string }
		Usage   struct {
			InputTokens int `json:"input_tokens"`
		}
	}
	if err := json.Unmarshal(body, &msg); err != nil || status != 200 || len(msg.Content) != 3 || msg.Content[1].Text != "Hello from the model, through Harvest's proxy." {
		t.Fatalf("anthropic: %d %s", status, body)
	}
	status, _, body = h.post("/v1/chat/completions", oaiHeader(tok),
		`{"model":"gpt-4.1","messages":[{"role":"user","content":"hello"}]}`)
	var cc struct {
		Choices []struct{ Message struct{ Content string } }
	}
	if err := json.Unmarshal(body, &cc); err != nil || status != 200 || len(cc.Choices) != 1 || cc.Choices[0].Message.Content != "Hello from the model, through Harvest's proxy." {
		t.Fatalf("openai: %d %s", status, body)
	}
	// Streamed without stream_options: the proxy asks for the usage chunk.
	status, hdr, body := h.post("/chat/completions", oaiHeader(tok),
		`{"model":"gpt-4.1","stream":true,"messages":[{"role":"user","content":"hello"}]}`)
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Fatalf("openai stream: %d %s", status, body)
	}
	// Free calls: forwarded, not recorded.
	if status, _, body := h.post("/v1/messages/count_tokens?beta=true", anthHeader(tok),
		`{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hello"}]}`); status != 200 || !strings.Contains(string(body), "input_tokens") {
		t.Errorf("count_tokens: %d %s", status, body)
	}
	for _, hd := range []http.Header{anthHeader(tok), oaiHeader(tok)} {
		req, _ := http.NewRequest(http.MethodGet, h.url+"/v1/models", nil)
		req.Header = hd
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"data"`) {
			t.Errorf("GET /v1/models: %d %s", resp.StatusCode, b)
		}
	}

	anth, oai := scripted(t, script, "anth"), scripted(t, script, "oai")
	us := got.all()
	want := []struct {
		api    string
		stream bool
		tokens llm.Usage
	}{{apiAnthropic, false, anth}, {apiOpenAI, false, oai}, {apiOpenAI, true, oai}}
	if len(us) != len(want) {
		t.Fatalf("recorded %d calls, want %d: %+v", len(us), len(want), us)
	}
	var total float64
	for i, w := range want {
		u := us[i]
		if u.API != w.api || u.Stream != w.stream || u.Tokens != w.tokens || !u.Complete || !u.Priced || u.CostUSD <= 0 {
			t.Errorf("call %d: %+v, want %s stream=%t tokens %+v, complete and priced", i, u, w.api, w.stream, w.tokens)
		}
		total += u.CostUSD
	}
	if spent := h.proxy.Spent("s"); !near(spent, total) {
		t.Errorf("Spent %v, want the calls' sum %v", spent, total)
	}

	reqs := h.sim.Requests()
	paths := []string{}
	for _, r := range reqs {
		paths = append(paths, r.Method+" "+r.Path+queryOf(r))
	}
	wantPaths := []string{"POST /v1/messages", "POST /v1/chat/completions", "POST /v1/chat/completions",
		"POST /v1/messages/count_tokens?beta=true", "GET /v1/models", "GET /v1/models"}
	if !slices.Equal(paths, wantPaths) {
		t.Errorf("the sim saw %q, want %q", paths, wantPaths)
	}
	var fwd struct {
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if len(reqs) > 2 {
		if json.Unmarshal(reqs[2].Body, &fwd); !fwd.StreamOptions.IncludeUsage {
			t.Errorf("the forwarded stream request did not ask for usage: %s", reqs[2].Body)
		}
	}
	if len(reqs) > 5 && (reqs[4].API != apiAnthropic || reqs[5].API != apiOpenAI) {
		t.Errorf("GET /v1/models went to %s and %s, want anthropic then openai", reqs[4].API, reqs[5].API)
	}
}

func queryOf(r sim.Request) string {
	if r.Query == "" {
		return ""
	}
	return "?" + r.Query
}

// A session that has spent its budget is refused before anything is
// forwarded, with a 402 in the API's own error shape that says the budget
// is spent and how to raise it, and that clients do not retry (the llm
// clients make one attempt; the Claude Code test shows the CLI stops).
// The usage of a stream is counted before its end reaches the client, so
// the very next request is refused. Raising the budget lets requests
// through again. A budget on an unpriced model cannot be enforced and is
// refused.
func TestBudget(t *testing.T) {
	var heard requestLog
	h := newHarness(t, chatScript, func(c *Config) { c.Observer = &heard })
	var got usageLog
	tok := h.grant(Grant{Session: "sess-1", BudgetUSD: 0.50, OnUsage: got.add})
	ctx := context.Background()
	req := llm.Request{Messages: []llm.Message{llm.UserText("spend")}, MaxTokens: 1024}

	anth := h.llmClient(apiAnthropic, "claude-sonnet-4-5", tok)
	if _, err := anth.Complete(ctx, req); err != nil {
		t.Fatal(err)
	}
	first := h.proxy.Spent("sess-1")
	if !near(first, 0.9) { // 200k input at $3/M + 20k output at $15/M
		t.Fatalf("spent %v, want 0.90", first)
	}
	for _, api := range []string{apiAnthropic, apiOpenAI} {
		model := map[string]string{apiAnthropic: "claude-sonnet-4-5", apiOpenAI: "gpt-4.1"}[api]
		_, err := h.llmClient(api, model, tok).Complete(ctx, req)
		var e *llm.Error
		if !errors.As(err, &e) || e.Status != http.StatusPaymentRequired || e.Attempts != 1 || e.Kind.Retryable() {
			t.Fatalf("%s over budget: %v (%+v), want a 402 not retried", api, err, e)
		}
		for _, w := range []string{"budget of session sess-1 is spent", "$0.9000 of $0.5000", DefaultBudgetHelp} {
			if !strings.Contains(e.Message, w) {
				t.Errorf("%s: message %q does not say %q", api, e.Message, w)
			}
		}
	}
	if n := h.forwarded.Load(); n != 1 {
		t.Errorf("%d requests reached the upstream, want only the first", n)
	}

	// The wire: each API's error shape, and no retry asked for.
	status, hdr, body := h.post("/v1/messages", anthHeader(tok), `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"spend"}]}`)
	if e := decodeError(t, body); status != 402 || e.Type != "error" || e.Error.Type != "billing_error" || hdr.Get("X-Should-Retry") != "false" {
		t.Errorf("anthropic refusal: %d %v %s", status, hdr, body)
	}
	status, hdr, body = h.post("/v1/chat/completions", oaiHeader(tok), `{"model":"gpt-4.1","messages":[{"role":"user","content":"spend"}]}`)
	if e := decodeError(t, body); status != 402 || e.Error.Type != "insufficient_quota" || e.Error.Code != "insufficient_quota" || hdr.Get("X-Should-Retry") != "false" {
		t.Errorf("openai refusal: %d %v %s", status, hdr, body)
	}

	// Raised: one more call goes through, and then it is spent again.
	if !h.proxy.SetBudget("sess-1", 1.5) {
		t.Fatal("SetBudget: the session has no live grant")
	}
	if _, err := anth.Complete(ctx, req); err != nil {
		t.Fatalf("after raising the budget: %v", err)
	}
	if _, err := anth.Complete(ctx, req); !errors.Is(err, llm.ErrAuth) {
		t.Errorf("after spending the raised budget: %v, want the 402 (billing_error)", err)
	}
	if us := got.all(); len(us) != 2 || !near(us[1].SpentUSD, 1.8) {
		t.Errorf("usage %+v, want 2 calls, spent 1.80", us)
	}

	// A budget on a model without a price: refused, not forwarded. Without
	// a budget the call goes through, unpriced.
	before := h.forwarded.Load()
	tok2 := h.grant(Grant{Session: "sess-2", BudgetUSD: 5})
	status, _, body = h.post("/v1/messages", anthHeader(tok2), `{"model":"my-finetune","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	if e := decodeError(t, body); status != 400 || !strings.Contains(e.Error.Message, `model "my-finetune" has no price`) || h.forwarded.Load() != before {
		t.Errorf("unpriced model under a budget: %d %s", status, body)
	}
	var free usageLog
	tok3 := h.grant(Grant{Session: "sess-3", OnUsage: free.add})
	if status, _, body := h.post("/v1/messages", anthHeader(tok3), `{"model":"my-finetune","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`); status != 200 {
		t.Errorf("unpriced model, no budget: %d %s", status, body)
	}
	if us := free.all(); len(us) != 1 || us[0].Priced || us[0].CostUSD != 0 || us[0].Tokens.InputTokens != 10 {
		t.Errorf("unpriced usage %+v", us)
	}
	// The observer heard every request, each once it was answered (which
	// is after the client has the answer): three went through, each with
	// its usage, and six were refused for the budget without a usage.
	testbin.WaitFor(t, 10*time.Second, "the observer hearing the 9 requests", func() bool { return len(heard.all()) == 9 })
	by := map[Result]int{}
	for _, r := range heard.all() {
		by[r.Result]++
		switch r.Result {
		case ResultOK:
			if r.Usage == nil || r.Status != 200 || r.Model == "" || r.API == "" {
				t.Errorf("a model call answered 2xx, heard as %+v", r)
			}
		case ResultRefused:
			if r.Usage != nil || (r.Status != 402 && r.Status != 400) {
				t.Errorf("a refused call heard as %+v", r)
			}
		}
	}
	if by[ResultOK] != 3 || by[ResultRefused] != 6 {
		t.Errorf("heard %v, want 3 ok and 6 refused", by)
	}
}

// requestLog records what an Observer hears.
type requestLog struct {
	mu sync.Mutex
	rs []Request
}

func (l *requestLog) ProxyRequest(r Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rs = append(l.rs, r)
}

func (l *requestLog) all() []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.rs)
}

// Without a live token nothing is forwarded: no token, a wrong one, a
// forged one with the right prefix, a revoked one, and the real key itself
// all get a 401 in the API's shape that clients do not retry. Paths the
// proxy does not serve get a 404, methods it does not serve a 405, also
// without being forwarded.
func TestUnauthorized(t *testing.T) {
	h := newHarness(t, chatScript, nil)
	revoked, revoke := h.proxy.Grant(Grant{Session: "gone"})
	revoke()
	revoke() // idempotent
	h.track(revoked)
	forged := tokenPrefix + strings.Repeat("A", 43)

	anthBody := `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hello"}]}`
	oaiBody := `{"model":"gpt-4.1","messages":[{"role":"user","content":"hello"}]}`
	for name, key := range map[string]string{"none": "", "wrong": "sk-ant-not-a-token", "forged": forged, "revoked": revoked, "real key": h.anthKey} {
		for _, api := range []string{apiAnthropic, apiOpenAI} {
			var status int
			var hdr http.Header
			var body []byte
			if api == apiAnthropic {
				hd := http.Header{"Anthropic-Version": {"2023-06-01"}}
				if key != "" {
					hd.Set("X-Api-Key", key)
				}
				status, hdr, body = h.post("/v1/messages", hd, anthBody)
			} else {
				hd := http.Header{}
				if key != "" {
					hd.Set("Authorization", "Bearer "+key)
				}
				status, hdr, body = h.post("/v1/chat/completions", hd, oaiBody)
			}
			e := decodeError(t, body)
			okShape := e.Type == "error" && e.Error.Type == "authentication_error"
			if api == apiOpenAI {
				okShape = e.Error.Code == "invalid_api_key"
			}
			if status != 401 || !okShape || hdr.Get("X-Should-Retry") != "false" || !strings.Contains(e.Error.Message, "session token") {
				t.Errorf("%s key on %s: %d %v %s", name, api, status, hdr, body)
			}
		}
	}
	_, err := h.llmClient(apiAnthropic, "claude-sonnet-4-5", revoked).Complete(context.Background(),
		llm.Request{Messages: []llm.Message{llm.UserText("hello")}})
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.ErrAuth || e.Attempts != 1 {
		t.Errorf("llm client with a revoked token: %v", err)
	}

	tok := h.grant(Grant{Session: "live"})
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{http.MethodHead, "/", 404}, // Claude Code's connectivity probe
		{http.MethodGet, "/v1/files", 404},
		{http.MethodPost, "/v1/complete", 404},
		{http.MethodGet, "/v1/messages", 405},
		{http.MethodPost, "/v1/models", 405},
	} {
		req, _ := http.NewRequest(c.method, h.url+c.path, nil)
		req.Header = anthHeader(tok)
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
	}
	if n := h.forwarded.Load(); n != 0 {
		t.Errorf("%d requests were forwarded, want none", n)
	}
}

// startSlowStream starts the scripted slow Anthropic stream with tok and
// returns the response once its first text delta has arrived, and what was
// read so far.
func (h *harness) startSlowStream(tok string) (*http.Response, []byte) {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/messages", strings.NewReader(
		`{"model":"claude-sonnet-4-5","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"slow"}]}`))
	req.Header = anthHeader(tok)
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		h.t.Fatalf("slow stream: %d %s", resp.StatusCode, b)
	}
	var seen []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(seen, []byte("text_delta")) {
		n, err := resp.Body.Read(buf)
		seen = append(seen, buf[:n]...)
		if err != nil {
			h.t.Fatalf("the stream ended before a text delta: %v\n%s", err, seen)
		}
	}
	return resp, seen
}

// Revoking a token ends its streams in flight at once, and its usage so
// far (message_start's input tokens) is recorded as incomplete.
func TestRevokeEndsStreamsInFlight(t *testing.T) {
	h := newHarness(t, chatScript, nil)
	var got usageLog
	tok, revoke := h.proxy.Grant(Grant{Session: "s", OnUsage: got.add})
	h.track(tok)
	resp, seen := h.startSlowStream(tok)
	start := time.Now()
	revoke()
	rest, _ := io.ReadAll(resp.Body) // an error: the stream is cut
	all := string(seen) + string(rest)
	if strings.Contains(all, "message_stop") || strings.Contains(all, "twenty") {
		t.Errorf("the stream went on after the token was revoked:\n%s", all)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the stream took %v to end after the revoke; the whole reply takes ~1.3 s", d)
	}
	h.stop() // every handler has returned: the usage is recorded
	us := got.all()
	if len(us) != 1 || us[0].Complete || us[0].Tokens.InputTokens != 77 {
		t.Errorf("usage %+v, want one incomplete call with the 77 input tokens message_start reported", us)
	}
}

// Serve returns nil once its context is done, cutting streams in flight.
func TestServeStops(t *testing.T) {
	h := newHarness(t, chatScript, nil)
	var got usageLog
	tok := h.grant(Grant{Session: "s", OnUsage: got.add})
	resp, _ := h.startSlowStream(tok)
	h.stop() // fails the test if Serve returns an error
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Errorf("the stream ended cleanly after Serve stopped")
	}
	if us := got.all(); len(us) != 1 || us[0].Complete {
		t.Errorf("usage %+v, want one incomplete call", us)
	}
	if _, err := h.client.Get(h.url + "/v1/models"); err == nil {
		t.Errorf("the proxy still answers after Serve returned")
	}
}

// The body of a request is bounded: a larger one is refused with 413 in
// the API's shape and not forwarded.
func TestBodyLimit(t *testing.T) {
	h := newHarness(t, chatScript, func(c *Config) { c.MaxBodyBytes = 4096 })
	tok := h.grant(Grant{Session: "s"})
	big := fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hello %s"}]}`, strings.Repeat("x", 5000))
	status, _, body := h.post("/v1/messages", anthHeader(tok), big)
	if e := decodeError(t, body); status != 413 || e.Error.Type != "request_too_large" || !strings.Contains(e.Error.Message, "4096 bytes") {
		t.Errorf("a 5 KB body: %d %s", status, body)
	}
	if n := h.forwarded.Load(); n != 0 {
		t.Errorf("%d requests forwarded, want none", n)
	}
	if status, _, body := h.post("/v1/messages", anthHeader(tok), `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hello"}]}`); status != 200 {
		t.Errorf("a small body: %d %s", status, body)
	}
}

// Sessions used at once keep their own accounts: concurrent calls of many
// sessions each add exactly their own cost.
func TestConcurrentSessions(t *testing.T) {
	h := newHarness(t, chatScript, nil)
	const sessions, calls = 6, 4
	logs := make([]usageLog, sessions)
	var clients []*llm.Client
	for i := range sessions {
		tok := h.grant(Grant{Session: fmt.Sprint("s", i), OnUsage: logs[i].add})
		api, model := apiAnthropic, "claude-sonnet-4-5"
		if i%2 == 1 {
			api, model = apiOpenAI, "gpt-4.1"
		}
		clients = append(clients, h.llmClient(api, model, tok))
	}
	var wg sync.WaitGroup
	for i := range sessions {
		for range calls {
			wg.Go(func() {
				if _, err := clients[i].Complete(context.Background(), llm.Request{Messages: []llm.Message{llm.UserText("hello")}, Tools: []llm.Tool{bashTool}}); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	for i := range sessions {
		var sum float64
		us := logs[i].all()
		for _, u := range us {
			sum += u.CostUSD
		}
		if len(us) != calls || !near(h.proxy.Spent(fmt.Sprint("s", i)), sum) || sum == 0 {
			t.Errorf("session %d: %d calls recorded, spent %v, their sum %v", i, len(us), h.proxy.Spent(fmt.Sprint("s", i)), sum)
		}
	}
}

// A call's usage is counted before the client gets the end of its answer
// (the last SSE event, or any of a whole body): when OnUsage runs, nothing
// of the end has been written to the client's connection yet. So a client
// that sends its next request the moment a stream ends is checked against
// an up-to-date budget.
func TestUsageCountedBeforeTheEnd(t *testing.T) {
	h := newHarness(t, chatScript, nil)
	var mu sync.Mutex
	var sentAtUsage []string
	tok := h.grant(Grant{Session: "s", OnUsage: func(Usage) {
		mu.Lock()
		defer mu.Unlock()
		sentAtUsage = append(sentAtUsage, h.sent.String())
	}})
	calls := []struct{ path, body, end string }{
		{"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hello"}]}`, "message_stop"},
		{"/v1/chat/completions", `{"model":"gpt-4.1","stream":true,"messages":[{"role":"user","content":"hello"}]}`, "[DONE]"},
		{"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`, `"type":"message"`},
	}
	for i, c := range calls {
		hd := anthHeader(tok)
		if strings.Contains(c.path, "chat") {
			hd = oaiHeader(tok)
		}
		before := strings.Count(h.sent.String(), c.end)
		status, _, body := h.post(c.path, hd, c.body)
		if status != 200 || !strings.Contains(string(body), c.end) {
			t.Fatalf("call %d: %d %s", i, status, body)
		}
		mu.Lock()
		sent := slices.Clone(sentAtUsage)
		mu.Unlock()
		if len(sent) != i+1 {
			t.Fatalf("call %d: OnUsage called %d times in all", i, len(sent))
		}
		if n := strings.Count(sent[i], c.end); n != before {
			t.Errorf("call %d: the client had been sent %q when its usage was counted", i, c.end)
		}
	}
}

// Grants of one session share its account: what it spent before (after a
// restart) counts from the first grant, a later grant sets the budget, and
// the account goes with the last grant. Tokens are distinct and long.
func TestGrants(t *testing.T) {
	h := newHarness(t, chatScript, nil)
	tokA, revokeA := h.proxy.Grant(Grant{Session: "s", BudgetUSD: 1, SpentUSD: 1.25})
	tokB, revokeB := h.proxy.Grant(Grant{Session: "s", BudgetUSD: 2, SpentUSD: 99})
	h.track(tokA)
	h.track(tokB)
	if tokA == tokB || !strings.HasPrefix(tokA, tokenPrefix) || len(tokA) != len(tokenPrefix)+43 {
		t.Errorf("tokens %q and %q", tokA, tokB)
	}
	if s := h.proxy.Spent("s"); s != 1.25 {
		t.Errorf("Spent %v, want 1.25 carried over (the second grant's is ignored)", s)
	}
	// The budget is the second grant's: $2, not yet spent.
	if status, _, body := h.post("/v1/messages", anthHeader(tokA), `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hello"}]}`); status != 200 {
		t.Errorf("under the newest budget: %d %s", status, body)
	}
	revokeA()
	if status, _, _ := h.post("/v1/messages", anthHeader(tokA), `{}`); status != 401 {
		t.Errorf("a revoked token: %d", status)
	}
	if s := h.proxy.Spent("s"); s <= 1.25 || !h.proxy.SetBudget("s", 1) {
		t.Errorf("with a grant left: Spent %v, SetBudget false", s)
	}
	if status, _, _ := h.post("/v1/messages", anthHeader(tokB), `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hello"}]}`); status != 402 {
		t.Errorf("after SetBudget below the spending: %d, want 402", status)
	}
	revokeB()
	if s := h.proxy.Spent("s"); s != 0 || h.proxy.SetBudget("s", 5) {
		t.Errorf("after the last revoke: Spent %v, or SetBudget found the session", s)
	}
}

// New says what is wrong with a config.
func TestNewErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "no upstream"},
		{Config{Anthropic: &Upstream{BaseURL: "api.anthropic.com"}}, "want an http or https URL"},
		{Config{OpenAI: &Upstream{BaseURL: "https://user:pw@example.com/v1"}}, "put the key in APIKey"},
	} {
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): %v, want %q", c.cfg, err, c.want)
		}
	}
}

// A placeholder key (a local server's "ollama") is not scrubbed: model
// output that names it comes through whole.
func TestShortKeysAreNotScrubbed(t *testing.T) {
	up := httptest.NewServer(sim.New(parseScript(t, `rules: [{reply: {text: "I run on ollama, key ollama."}}]`)))
	defer up.Close()
	p, err := New(Config{OpenAI: &Upstream{BaseURL: up.URL + "/v1", APIKey: "ollama"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	defer srv.Close()
	tok, revoke := p.Grant(Grant{Session: "s"})
	defer revoke()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"qwen3","messages":[{"role":"user","content":"hi"}]}`))
	req.Header = oaiHeader(tok)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "I run on ollama, key ollama.") {
		t.Errorf("%d %s", resp.StatusCode, b)
	}
}
