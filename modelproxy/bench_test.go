package modelproxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkProxyOverhead measures what the proxy adds to one model call
// that is not streamed (a ~1 KB answer): "direct" posts it to the sim
// with the real key, "proxy" to the proxy with a session token, which
// checks the token and budget, forwards, scrubs, meters, prices and
// records. Both go over loopback HTTP with keep-alive; the difference per
// op is the overhead.
//
//	go test -run '^$' -bench ProxyOverhead -benchmem ./modelproxy/
func BenchmarkProxyOverhead(b *testing.B) {
	text := strings.Repeat("The proxy passes this answer on. ", 32)
	h := newHarness(b, "rules:\n  - {name: answer, reply: {text: \""+text+"\", usage: {input_tokens: 50, output_tokens: 250}}}\n", nil)
	tok := h.grant(Grant{Session: "bench", OnUsage: func(Usage) {}})
	body := `{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"answer"}]}`
	for _, c := range []struct{ name, url, key string }{
		{"direct", h.upstreamURL, h.anthKey},
		{"proxy", h.url, tok},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, c.url+"/v1/messages", strings.NewReader(body))
				req.Header = anthHeader(c.key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := h.client.Do(req)
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
	}
}
