package sim_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"

	"github.com/harvest-dev/harvest/sim"
)

// TestRecordReplay: a recording sim proxies real HTTP to an upstream (a
// second sim standing in for the real API, which this machine cannot reach),
// passing streams through as they come and writing each exchange to the
// cassette with keys redacted; a replaying sim then gives the same bytes
// back for the same requests.
func TestRecordReplay(t *testing.T) {
	_, upstream := serve(t, `
mode: sequence
rules:
  - reply:
      text: "Streaming through the recorder, in several pieces."
      tool_calls: [{name: Bash, input: {command: "echo hi"}}]
      usage: {input_tokens: 50, output_tokens: 12}
  - reply: {text: "plain reply", usage: {input_tokens: 5, output_tokens: 2}}
  - reply: {error: {status: 429, retry_after: 3s}}
  - reply: {text: "openai stream"}
`)
	cassette := filepath.Join(t.TempDir(), "run.json")
	u, _ := url.Parse(upstream.URL)
	recSrv := sim.New(nil, sim.WithRecord(u, cassette))
	rec := httptest.NewServer(recSrv)
	defer rec.Close()

	streamBody := anth("claude-sonnet-4-5", userHi, `"stream":true`)
	plainBody := anth("claude-sonnet-4-5", `{"role":"user","content":"plain please"}`)
	requests := []struct{ path, api, body string }{
		{"/v1/messages?beta=true", "anthropic", streamBody},
		{"/v1/messages", "anthropic", plainBody},
		{"/v1/messages", "anthropic", anth("claude-sonnet-4-5", `{"role":"user","content":"again"}`)},
		{"/v1/chat/completions", "openai", `{"model":"gpt-4.1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/messages/count_tokens", "anthropic", `{"model":"m","messages":[{"role":"user","content":"count me"}]}`},
	}
	var recorded []call
	for _, r := range requests {
		recorded = append(recorded, post(t, rec.URL+r.path, r.api, r.body))
	}
	if recorded[0].status != 200 || recorded[0].header.Get("Content-Type") != "text/event-stream; charset=utf-8" || recorded[2].status != 429 ||
		recorded[2].header.Get("retry-after") != "3" || recorded[4].status != 200 {
		t.Fatalf("through the recorder: %+v", recorded)
	}
	// The stream came through intact: the SDK's event grammar holds.
	if events := parseSSE(t, recorded[0].body); events[0].name != "message_start" || events[len(events)-1].name != "message_stop" {
		t.Errorf("recorded stream: %s", recorded[0].body)
	}

	raw, err := os.ReadFile(cassette)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("sk-ant-test")) || bytes.Contains(raw, []byte("sk-test")) || !bytes.Contains(raw, []byte(`"REDACTED"`)) {
		t.Errorf("the cassette leaks a key or redacts nothing:\n%s", raw)
	}
	c, err := sim.LoadCassette(cassette)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Interactions) != len(requests) || c.Upstream != upstream.URL {
		t.Fatalf("cassette: %d interactions, upstream %s", len(c.Interactions), c.Upstream)
	}
	for i, in := range c.Interactions {
		if in.Request.Path != requests[i].path || string(in.Request.Body) != requests[i].body || in.Response.Status != recorded[i].status ||
			!bytes.Equal(in.Response.Body, recorded[i].body) {
			t.Errorf("interaction %d: %s %s → %d (%d bytes), recorded %d (%d bytes)", i, in.Request.Method, in.Request.Path,
				in.Response.Status, len(in.Response.Body), recorded[i].status, len(recorded[i].body))
		}
	}
	if reqs := recSrv.Requests(); reqs[0].Rule != "record" || reqs[0].Model != "claude-sonnet-4-5" || !reqs[0].Stream {
		t.Errorf("recorder log %+v", reqs[0])
	}

	// Replay, in another order: bodies pick their interaction.
	replaySrv := sim.New(nil, sim.WithReplay(c))
	rep := httptest.NewServer(replaySrv)
	defer rep.Close()
	for _, i := range []int{1, 0, 3, 2, 4} {
		r := requests[i]
		got := post(t, rep.URL+r.path, r.api, r.body)
		if got.status != recorded[i].status || !bytes.Equal(got.body, recorded[i].body) ||
			got.header.Get("Content-Type") != recorded[i].header.Get("Content-Type") || got.header.Get("retry-after") != recorded[i].header.Get("retry-after") {
			t.Errorf("replay of %d: %d %q, recorded %d %q", i, got.status, got.body, recorded[i].status, recorded[i].body)
		}
	}
	// The SDK reads a replayed stream like a live one.
	replay2 := httptest.NewServer(sim.New(nil, sim.WithReplay(c)))
	defer replay2.Close()
	client := anthropicClient(replay2.URL)
	stream := client.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
		Model: "claude-sonnet-4-5", MaxTokens: 100, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("a different prompt"))},
	})
	var msg anthropic.Message
	for stream.Next() {
		if err := msg.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if stream.Err() != nil || msg.Content[0].Text != "Streaming through the recorder, in several pieces." || msg.Usage.InputTokens != 50 {
		t.Errorf("SDK on the replay: %v %+v", stream.Err(), msg)
	}
	reqs := sim.New(nil, sim.WithReplay(c)) // fresh, to check the log names
	hs := httptest.NewServer(reqs)
	defer hs.Close()
	post(t, hs.URL+requests[1].path, "anthropic", requests[1].body)
	post(t, hs.URL+requests[0].path, "anthropic", anth("claude-sonnet-4-5", `{"role":"user","content":"not recorded"}`, `"stream":true`))
	post(t, hs.URL+"/v1/messages", "anthropic", anth("claude-sonnet-4-5", `{"role":"user","content":"again"}`))
	post(t, hs.URL+"/v1/messages", "anthropic", anth("claude-sonnet-4-5", `{"role":"user","content":"one too many"}`))
	log := reqs.Requests()
	if log[0].Rule != "cassette #2 (by body)" || log[1].Rule != "cassette #1 (by order)" || log[2].Rule != "cassette #3 (by body)" ||
		log[3].Status != 400 || !strings.Contains(log[3].Error, "the cassette has no unused interaction for POST /v1/messages (5 recorded)") {
		t.Errorf("replay log: %+v", log)
	}
}

// TestRecordUpstreamDown: an unreachable upstream is a 502 in the API's
// shape, not a hang or a bare connection reset.
func TestRecordUpstreamDown(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	u, _ := url.Parse(dead.URL)
	dead.Close()
	hs := httptest.NewServer(sim.New(nil, sim.WithRecord(u, filepath.Join(t.TempDir(), "c.json"))))
	defer hs.Close()
	got := post(t, hs.URL+"/v1/messages", "anthropic", anth("m", userHi))
	b := decode(t, got.body)
	if got.status != 502 || path(b, "type") != "error" || path(b, "error", "type") != "api_error" || !strings.Contains(path(b, "error", "message").(string), "the upstream") {
		t.Errorf("%d %s", got.status, got.body)
	}
	got = post(t, hs.URL+"/v1/chat/completions", "openai", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if got.status != 502 || path(decode(t, got.body), "error", "type") != "server_error" {
		t.Errorf("%d %s", got.status, got.body)
	}
}

func TestLoadCassetteErrors(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"not json":  "{",
		"version":   `{"version":2,"interactions":[]}`,
		"no status": `{"version":1,"interactions":[{"request":{"method":"POST","path":"/v1/messages"},"response":{}}]}`,
		"bad body":  `{"version":1,"interactions":[{"request":{"method":"POST","path":"/x","body":5},"response":{"status":200}}]}`,
	} {
		p := filepath.Join(dir, "c.json")
		os.WriteFile(p, []byte(content), 0o644)
		if _, err := sim.LoadCassette(p); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Bodies that are not UTF-8 survive a round trip as base64.
	p := filepath.Join(dir, "bin.json")
	os.WriteFile(p, []byte(`{"version":1,"interactions":[{"request":{"method":"GET","path":"/x","body":{"base64":"/w=="}},"response":{"status":200,"body":"ok"}}]}`), 0o644)
	c, err := sim.LoadCassette(p)
	if err != nil || !bytes.Equal(c.Interactions[0].Request.Body, []byte{0xff}) {
		t.Errorf("%v %v", err, c)
	}
	if b, _ := sim.Bytes([]byte{0xff}).MarshalJSON(); string(b) != `{"base64":"/w=="}` {
		t.Errorf("%s", b)
	}
}
