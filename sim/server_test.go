package sim_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/sim"
)

// anth builds an Anthropic request body.
func anth(model string, msgs string, extra ...string) string {
	b := `{"model":"` + model + `","max_tokens":100,"messages":[` + msgs + `]`
	for _, e := range extra {
		b += "," + e
	}
	return b + "}"
}

const (
	userHi    = `{"role":"user","content":"hi there"}`
	toolCall  = `{"role":"assistant","content":[{"type":"text","text":"running"},{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]}`
	toolReply = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"main.go\ngo.mod"},{"type":"text","text":"<system-reminder>ignore</system-reminder>"}]}`
)

// TestMatching: each condition, the first matching rule with uses left,
// and the facts rules see (turn, last user text, newest tool result, tools,
// system) computed the same way for both APIs.
func TestMatching(t *testing.T) {
	srv, hs := serve(t, `
rules:
  - name: title
    when: {system: "Generate a title"}
    reply: {text: title}
  - name: once
    when: {api: anthropic, model: "claude-haiku-*", last_user: "hi"}
    times: 1
    reply: {text: once}
  - name: haiku
    when: {model: "claude-haiku-*"}
    reply: {text: haiku}
  - name: after-ls
    when: {turn: 2, tool_result: "go.mod", tools: [Bash]}
    reply: {text: after-ls}
  - name: regexp
    when: {last_user_regexp: "^fix (bug|issue) #[0-9]+$", stream: false, max_tokens: 200}
    reply: {text: regexp}
  - name: openai-turn-3
    when: {api: openai, turn: 3, tool_result: "second"}
    reply: {text: openai-turn-3}
`)
	msgURL, chatURL := hs.URL+"/v1/messages", hs.URL+"/v1/chat/completions"
	bashTool := `"tools":[{"name":"Bash","input_schema":{"type":"object"}}]`
	for _, c := range []struct {
		name, url, api, body, rule string
	}{
		{"system", msgURL, "anthropic", anth("claude-opus-4-8", userHi, `"system":[{"type":"text","text":"Generate a title for this"}]`), "title"},
		{"system message mid-conversation", msgURL + "?beta=true", "anthropic", anth("claude-opus-4-8", userHi+`,{"role":"system","content":"Generate a title please"}`), "title"},
		{"times 1, first use", msgURL, "anthropic", anth("claude-haiku-4-5", userHi), "once"},
		{"times 1, used up", msgURL, "anthropic", anth("claude-haiku-4-5", userHi), "haiku"},
		// The last user text is the newest message the user typed, not the
		// text next to tool results, and the newest tool result is found.
		{"tool result", msgURL, "anthropic", anth("claude-sonnet-4-5", userHi+","+toolCall+","+toolReply, bashTool), "after-ls"},
		{"regexp", msgURL, "anthropic", anth("m", `{"role":"user","content":[{"type":"text","text":"fix bug #12"}]}`), "regexp"},
		{"openai system", chatURL, "openai", `{"model":"gpt-4.1","messages":[{"role":"system","content":"Generate a title now"},{"role":"user","content":"x"}]}`, "title"},
		{"openai turn and results", chatURL, "openai", `{"model":"gpt-4.1","messages":[{"role":"user","content":"x"},{"role":"assistant","content":"a"},
			{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"f","arguments":"{}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"first"},{"role":"tool","tool_call_id":"c2","content":"second"}]}`, "openai-turn-3"},
	} {
		got := post(t, c.url, c.api, c.body, "anthropic-beta", "mid-conversation-system-2026-04-07")
		if got.status != 200 || !strings.Contains(string(got.body), `"`+c.rule+`"`) {
			t.Errorf("%s: %d %s, want rule %s", c.name, got.status, got.body, c.rule)
		}
	}
	reqs := srv.Requests()
	if r := reqs[4]; r.Turn != 2 || r.Rule != "after-ls" || r.Model != "claude-sonnet-4-5" {
		t.Errorf("log entry %+v", r)
	}

	// No rule: the error names the request and the closest rule, its line
	// and the conditions that failed.
	got := post(t, msgURL, "anthropic", anth("claude-sonnet-4-5", userHi+","+toolCall+`,{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"README.md"}]}`, bashTool))
	msg, _ := path(decode(t, got.body), "error", "message").(string)
	for _, want := range []string{
		"harvest sim: test.yaml: no rule matches anthropic request #9",
		`model "claude-sonnet-4-5", turn 2, last user "hi there", newest tool result "README.md", tools [Bash]`,
		`the closest rule is "after-ls" (test.yaml:13): tool_result "go.mod" is not in the newest tool result (line 14)`,
	} {
		if got.status != 400 || !strings.Contains(msg, want) {
			t.Errorf("unmatched: %d %q\n  want it to contain %q", got.status, msg, want)
		}
	}
	if r := srv.Requests()[8]; r.Status != 400 || r.Rule != "" || r.Error != msg {
		t.Errorf("unmatched request logged as %+v", r)
	}
	got = post(t, chatURL, "openai", `{"model":"gpt-4.1","stream":true,"messages":[{"role":"user","content":"fix bug #1"}]}`)
	msg, _ = path(decode(t, got.body), "error", "message").(string)
	if want := `no rule matches openai request #10 (model "gpt-4.1", turn 1, last user "fix bug #1", no tool result, no tools); the closest rule is "regexp" (test.yaml:16): stream is false, the request's is true (line 17)`; !strings.Contains(msg, want) {
		t.Errorf("unmatched openai: %q\n  want %q", msg, want)
	}
}

// TestSequence: rules in order, each used its times; a request the next rule
// does not match is refused with that rule named; the end is said plainly.
func TestSequence(t *testing.T) {
	_, hs := serve(t, `
mode: sequence
rules:
  - name: one
    times: 2
    reply: {text: one}
  - name: two
    when: {turn: 2}
    reply: {text: two}
`)
	body := anth("m", userHi)
	for i, want := range []string{"one", "one"} {
		if got := post(t, hs.URL+"/v1/messages", "anthropic", body); !strings.Contains(string(got.body), want) {
			t.Errorf("request %d: %s", i, got.body)
		}
	}
	got := post(t, hs.URL+"/v1/messages", "anthropic", body)
	if !strings.Contains(string(got.body), `the next rule in the sequence, \"two\" (test.yaml:7), does not match anthropic request #3`) ||
		!strings.Contains(string(got.body), "turn is 2, the request is turn 1 (line 8)") {
		t.Errorf("mismatch: %s", got.body)
	}
	two := anth("m", userHi+`,{"role":"assistant","content":"ok"},`+userHi)
	if got := post(t, hs.URL+"/v1/messages", "anthropic", two); !strings.Contains(string(got.body), `"two"`) {
		t.Errorf("after the mismatch, rule two still answers: %s", got.body)
	}
	if got := post(t, hs.URL+"/v1/messages", "anthropic", two); !strings.Contains(string(got.body), "the sequence is over (all 2 rules used)") {
		t.Errorf("end: %s", got.body)
	}
}

// TestRequestLog: every request, with what rules matched on and what tests
// assert, in process and over HTTP; one log line each.
func TestRequestLog(t *testing.T) {
	var logs bytes.Buffer
	srv, hs := serve(t, "models: [claude-sonnet-4-5]\nrules:\n  - when: {model: gpt-4.1}\n    reply: {text: ok}\n  - name: claude\n    when: {model: claude-opus-4-8}\n    reply: {text: ok}\n",
		sim.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	post(t, hs.URL+"/v1/messages?beta=true", "anthropic", anth("claude-opus-4-8", userHi, `"stream":true`), "x-api-key", "sk-ant-api03-secret-value-1234")
	post(t, hs.URL+"/v1/chat/completions", "openai", "not json")
	post(t, hs.URL+"/v2/unknown", "anthropic", "{}")
	resp, err := http.Get(hs.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Object string `json:"object"`
		Data   []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if models.Object != "list" || len(models.Data) != 3 || models.Data[0].ID != "claude-sonnet-4-5" || models.Data[1].ID != "gpt-4.1" {
		t.Errorf("models %+v", models)
	}
	req, _ := http.NewRequest(http.MethodGet, hs.URL+"/v1/models", nil)
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, _ = http.DefaultClient.Do(req)
	var anthModels map[string]any
	json.NewDecoder(resp.Body).Decode(&anthModels)
	resp.Body.Close()
	if keys(anthModels) != "data,first_id,has_more,last_id" || path(anthModels, "data", 0, "type") != "model" {
		t.Errorf("anthropic models %v", anthModels)
	}

	reqs := srv.Requests()
	if len(reqs) != 5 {
		t.Fatalf("%d requests logged", len(reqs))
	}
	r := reqs[0]
	if r.Seq != 1 || r.API != "anthropic" || r.Method != "POST" || r.Path != "/v1/messages" || r.Query != "beta=true" || r.Model != "claude-opus-4-8" ||
		!r.Stream || r.Turn != 1 || r.Rule != "claude" || r.Status != 200 || r.Time.IsZero() || r.Header.Get("x-api-key") != "sk-ant-api03-secret-value-1234" {
		t.Errorf("entry 1: %+v", r)
	}
	if m := decode(t, r.Body); path(m, "messages", 0, "content") != "hi there" {
		t.Errorf("body %s", r.Body)
	}
	if r := reqs[1]; r.API != "openai" || r.Status != 400 || string(r.Body) != `"not json"` || !strings.Contains(r.Error, "could not parse the JSON body") {
		t.Errorf("entry 2: %+v %s", r, r.Body)
	}
	if r := reqs[2]; r.Status != 404 || r.API != "anthropic" || r.Error != "Not Found" {
		t.Errorf("entry 3: %+v", r)
	}

	// Over HTTP, as a test in another process reads it.
	resp, err = http.Get(hs.URL + "/_sim/requests")
	if err != nil {
		t.Fatal(err)
	}
	var overHTTP []sim.Request
	if err := json.NewDecoder(resp.Body).Decode(&overHTTP); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(overHTTP) != 5 || overHTTP[0].Rule != "claude" || overHTTP[0].Header.Get("x-api-key") != "sk-ant-api03-secret-value-1234" || string(overHTTP[1].Body) != `"not json"` {
		t.Errorf("over HTTP: %+v", overHTTP)
	}
	// The log line shows which key came, not the key.
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 5 || !strings.Contains(lines[0], `key="sk-ant…1234 (30 chars)"`) || strings.Contains(logs.String(), "secret-value") {
		t.Errorf("log lines:\n%s", logs.String())
	}
}
