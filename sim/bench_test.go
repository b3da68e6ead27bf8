package sim_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/sim"
)

// A reply of about 1,000 tokens (the sim counts four bytes a token): prose
// and a code block, streamed in pieces of one to five words as the APIs do
// (about 400 deltas).
var benchReply = func() string {
	var b strings.Builder
	for i := 0; b.Len() < 4000; i++ {
		fmt.Fprintf(&b, "Step %d: the function reads the configuration, checks every field, and returns a clear error naming the file and line. ", i)
		if i%4 == 3 {
			b.WriteString("\n\n```go\nif err := cfg.Validate(); err != nil {\n\treturn fmt.Errorf(\"loading %s: %w\", path, err)\n}\n```\n\n")
		}
	}
	return b.String()
}()

func benchServer(b *testing.B) *httptest.Server {
	s, err := sim.ParseScript("bench.yaml", []byte(fmt.Sprintf(`
rules:
  - reply:
      text: %q
      usage: {input_tokens: 2000, output_tokens: 1000}
`, benchReply)))
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(sim.New(s))
	b.Cleanup(hs.Close)
	return hs
}

// benchRequest streams one reply over loopback HTTP and reads it to the end.
func benchRequest(b *testing.B, client *http.Client, url, api string) int {
	var body, path string
	if api == "anthropic" {
		path = "/v1/messages"
		body = `{"model":"claude-sonnet-4-5","max_tokens":2000,"stream":true,"messages":[{"role":"user","content":"explain the loader"}]}`
	} else {
		path = "/v1/chat/completions"
		body = `{"model":"gpt-4.1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"explain the loader"}]}`
	}
	req, _ := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", "sk-bench")
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("Authorization", "Bearer sk-bench")
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, resp.Body); err != nil || resp.StatusCode != 200 {
		b.Fatalf("%d %v %s", resp.StatusCode, err, buf.Bytes())
	}
	return bytes.Count(buf.Bytes(), []byte("\n\n"))
}

// BenchmarkStream1kTokens measures sim throughput: requests per second for a
// streamed ~1k-token reply over real HTTP on loopback, one client at a time
// (serial) and as many as GOMAXPROCS at once (parallel).
//
//	go test -run '^$' -bench Stream1kTokens -benchtime 3s ./sim/
func BenchmarkStream1kTokens(b *testing.B) {
	for _, api := range []string{"anthropic", "openai"} {
		hs := benchServer(b)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		b.Run(api+"/serial", func(b *testing.B) {
			events := 0
			for b.Loop() {
				events = benchRequest(b, client, hs.URL, api)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
			b.ReportMetric(float64(events), "events/reply")
		})
		b.Run(api+"/parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					benchRequest(b, client, hs.URL, api)
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}
