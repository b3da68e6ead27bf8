package providers_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/llmtest"
	"github.com/harvest-dev/harvest/llm/providers"
)

// BenchmarkStream measures what a provider adds over a raw HTTP call to the
// sim for the same streamed reply of about 1,000 tokens (4,000 bytes of text,
// ~300 SSE events): "raw" posts a fixed body and reads the response to the end
// without parsing it; "provider" is llm.Client.Stream with a callback, i.e.
// request building, the SDK, SSE and JSON decoding, and assembly. The
// difference per op is the overhead.
//
//	go test -run '^$' -bench Stream -benchmem ./llm/providers/
func BenchmarkStream(b *testing.B) {
	text := strings.Repeat("Harvest streams this reply from the sim in small pieces. ", 80)[:4000]
	s := llmtest.StartSim(b, fmt.Sprintf("rules:\n  - {name: long, reply: {text: %q}}\n", text))
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	b.Cleanup(hc.CloseIdleConnections)
	cfg := providers.Config{HTTPClient: hc, Endpoints: map[string]providers.Endpoint{
		"anthropic": {APIKey: "sk-ant-bench", BaseURL: s.URL},
		"openai":    {APIKey: "sk-bench", BaseURL: s.URL + "/v1"},
	}}
	raw := map[string]struct {
		path, body string
		header     http.Header
	}{
		"anthropic": {"/v1/messages",
			`{"max_tokens":1024,"messages":[{"content":[{"text":"write a long answer","type":"text"}],"role":"user"}],"model":"claude-sonnet-4-5","stream":true}`,
			http.Header{"X-Api-Key": {"sk-ant-bench"}, "Anthropic-Version": {"2023-06-01"}, "Content-Type": {"application/json"}}},
		"openai": {"/v1/chat/completions",
			`{"messages":[{"content":"write a long answer","role":"user"}],"model":"gpt-4.1","max_tokens":1024,"stream_options":{"include_usage":true},"stream":true}`,
			http.Header{"Authorization": {"Bearer sk-bench"}, "Content-Type": {"application/json"}}},
	}
	for _, api := range []string{"anthropic", "openai"} {
		b.Run(api+"/raw", func(b *testing.B) {
			r := raw[api]
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, s.URL+r.path, bytes.NewReader([]byte(r.body)))
				req.Header = r.header.Clone()
				resp, err := hc.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || n < int64(len(text)) {
					b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
				}
			}
		})
		b.Run(api+"/provider", func(b *testing.B) {
			model := map[string]string{"anthropic": "anthropic/claude-sonnet-4-5", "openai": "openai/gpt-4.1"}[api]
			c, err := providers.Open(cfg, model)
			if err != nil {
				b.Fatal(err)
			}
			req := llm.Request{MaxTokens: 1024, Messages: []llm.Message{llm.UserText("write a long answer")}}
			b.ReportAllocs()
			for b.Loop() {
				events := 0
				resp, err := c.Stream(context.Background(), req, func(llm.Event) { events++ })
				if err != nil {
					b.Fatal(err)
				}
				if resp.Message.Text() != text || events < 100 {
					b.Fatalf("%d events, text %d bytes", events, len(resp.Message.Text()))
				}
			}
		})
	}
}
