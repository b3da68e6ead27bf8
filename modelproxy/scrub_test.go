package modelproxy

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/sim"
)

// echoAPI is a model API that leaks: it answers with the headers it got —
// in a response header, a cookie, an error body (gzipped when asked) and a
// stream that splits each key across flushes — so every way a key could
// come back to the box is exercised. It also sets hop-by-hop headers.
func echoAPI() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-Api-Key")
		if key == "" {
			key = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		}
		got, _ := json.Marshal(r.Header)
		h := w.Header()
		h.Set("X-Echo-Key", "your key is "+key)
		h.Set("Set-Cookie", "session="+key)
		h.Set("Connection", "X-Up-Hop")
		h.Set("X-Up-Hop", "1")
		h.Set("Keep-Alive", "timeout=5")
		switch r.URL.Query().Get("case") {
		case "error": // an error body that echoes the request headers, gzipped
			body, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{
				"type": "invalid_request_error", "message": "bad request; you sent " + string(got)}})
			h.Set("Content-Type", "application/json")
			if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
				h.Set("Content-Encoding", "gzip")
				w.WriteHeader(400)
				zw := gzip.NewWriter(w)
				zw.Write(body)
				zw.Close()
				return
			}
			w.WriteHeader(400)
			w.Write(body)
		case "stream": // the key inside events, cut across flushes
			h.Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			rc := http.NewResponseController(w)
			send := func(s string) {
				io.WriteString(w, s)
				rc.Flush()
			}
			send("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n")
			for _, cut := range []int{1, 7, len(key) / 2, len(key) - 1} {
				send(`event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"key=` + key[:cut])
				send(key[cut:] + `"}}` + "\n\n")
			}
			send("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + key[:10] + "\"}}\n\n")
			send("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}\n\n")
			send("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		case "brotli":
			h.Set("Content-Encoding", "br")
			h.Set("Content-Type", "application/json")
			w.Write([]byte("not really brotli " + key))
		default:
			h.Set("Content-Type", "application/json")
			w.Write(got)
		}
	})
}

// No real key reaches the box, however the API echoes it: header values
// are scrubbed, cookies dropped, bodies (gzip decoded first) and streams
// (a key cut across reads) scrubbed; the stream still ends and is metered.
// The API gets the real key and none of the box's credentials, cookies or
// hop-by-hop headers; the box gets none of the API's hop-by-hop headers.
func TestKeysAreScrubbed(t *testing.T) {
	h := newHarnessFor(t, echoAPI(), nil)
	var got usageLog
	tok := h.grant(Grant{Session: "s", OnUsage: got.add})
	const red = "[REDACTED by Harvest]"

	hd := anthHeader(tok)
	hd.Set("Authorization", "Bearer "+tok)
	hd.Set("Cookie", "box=1")
	hd.Set("Proxy-Authorization", "Basic Ym94OmJveA==")
	hd.Set("Connection", "X-Box-Hop")
	hd.Set("X-Box-Hop", "1")
	hd.Set("Anthropic-Beta", "interleaved-thinking-2025-05-14")
	status, rh, body := h.post("/v1/messages", hd, `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[]}`)
	if status != 200 {
		t.Fatalf("echo: %d %s", status, body)
	}
	var sent http.Header
	if err := json.Unmarshal(body, &sent); err != nil {
		t.Fatalf("echo body: %v: %s", err, body)
	}
	// What the API got: the real key (scrubbed on the way back), and the
	// box's other headers but none of its credentials or hop-by-hop ones.
	if sent.Get("X-Api-Key") != red || sent.Get("Anthropic-Beta") != "interleaved-thinking-2025-05-14" {
		t.Errorf("the API got x-api-key %q (shown scrubbed), anthropic-beta %q", sent.Get("X-Api-Key"), sent.Get("Anthropic-Beta"))
	}
	for _, k := range []string{"Authorization", "Cookie", "Proxy-Authorization", "X-Box-Hop", "Connection"} {
		if v := sent.Get(k); v != "" {
			t.Errorf("the API got %s: %q", k, v)
		}
	}
	// What the box got back.
	if rh.Get("X-Echo-Key") != "your key is "+red || rh.Get("Set-Cookie") != "" || rh.Get("X-Up-Hop") != "" || rh.Get("Keep-Alive") != "" {
		t.Errorf("response headers %v: want the key scrubbed, no cookie, no hop-by-hop headers", rh)
	}

	status, _, body = h.post("/v1/messages?case=error", anthHeader(tok), `{}`)
	if e := decodeError(t, body); status != 400 || !strings.Contains(e.Error.Message, red) {
		t.Errorf("gzipped error body: %d %s", status, body)
	}
	status, _, body = h.post("/v1/chat/completions?case=error", oaiHeader(tok), `{}`)
	if status != 400 || !strings.Contains(string(body), red) {
		t.Errorf("openai error body: %d %s", status, body)
	}

	status, _, body = h.post("/v1/messages?case=stream", anthHeader(tok), `{"model":"claude-sonnet-4-5","stream":true}`)
	if n := strings.Count(string(body), "key="+red); status != 200 || n != 4 || !strings.HasSuffix(string(body), "data: {\"type\":\"message_stop\"}\n\n") {
		t.Errorf("stream: %d, %d keys scrubbed (want 4):\n%s", status, n, body)
	}
	if !strings.Contains(string(body), `"text":"`+h.anthKey[:10]+`"`) {
		t.Errorf("a key's first bytes alone were not passed on: %s", body)
	}
	// The echo (a 200 without usage) and the stream are the calls recorded.
	if us := got.all(); len(us) != 2 || !us[1].Complete || us[1].Tokens.InputTokens != 5 || us[1].Tokens.OutputTokens != 9 {
		t.Errorf("stream usage %+v", us)
	}

	status, _, body = h.post("/v1/messages?case=brotli", anthHeader(tok), `{}`)
	if e := decodeError(t, body); status != 502 || !strings.Contains(e.Error.Message, `Content-Encoding "br"`) {
		t.Errorf("an encoding the proxy cannot read: %d %s", status, body)
	}
}

// The scrubber catches a key however the stream is cut, passes everything
// else on unchanged, and holds nothing back at a newline.
func TestScrubberCuts(t *testing.T) {
	key := "sk-ant-api03-SECRETsecret0123456789"
	other := "sk-proj-OTHER-9876543210"
	in := "a " + key + " b sk-ant-api03-SEC x" + key + key + "\n" + other + " sk"
	want := "a [R] b sk-ant-api03-SEC x[R][R]\n[R] sk"
	want = strings.ReplaceAll(want, "[R]", string(redacted))
	for cut1 := 0; cut1 <= len(in); cut1++ {
		for cut2 := cut1; cut2 <= len(in); cut2++ {
			s := &scrubber{secrets: [][]byte{[]byte(key), []byte(other)}}
			var out []byte
			for _, part := range []string{in[:cut1], in[cut1:cut2], in[cut2:]} {
				out = append(out, s.write([]byte(part))...)
			}
			out = append(out, s.flush()...)
			if string(out) != want {
				t.Fatalf("cut at %d and %d: %q, want %q", cut1, cut2, out, want)
			}
		}
	}
	s := &scrubber{secrets: [][]byte{[]byte(key)}}
	if out := s.write([]byte("data: {\"text\":\"sk\"}\n\n")); string(out) != "data: {\"text\":\"sk\"}\n\n" {
		t.Errorf("an event ending in a newline was held back: %q", out)
	}
	if out := s.write([]byte("ends in sk-ant")); string(out) != "ends in " {
		t.Errorf("a possible key start was passed on: %q", out)
	}
}

// The meter reads the same usage however the stream is cut (down to one
// byte at a time, CRLF line ends) for streams the sim writes as the APIs
// do.
func TestMeterCuts(t *testing.T) {
	s, err := sim.ParseScript("m.yaml", []byte(`
rules:
  - reply:
      thinking: "hmm"
      text: "some text for the meter"
      tool_calls: [{name: bash, input: {command: "ls -la"}}]
      usage: {input_tokens: 11, output_tokens: 22, cache_read_input_tokens: 33, cache_creation_input_tokens: 44}
`))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.New(s))
	defer srv.Close()
	for api, req := range map[string]struct{ path, body string }{
		apiAnthropic: {"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"x"}]}`},
		apiOpenAI:    {"/v1/chat/completions", `{"model":"gpt-4.1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`},
	} {
		r, _ := http.NewRequest(http.MethodPost, srv.URL+req.path, strings.NewReader(req.body))
		r.Header = http.Header{"X-Api-Key": {"k"}, "Authorization": {"Bearer k"}, "Anthropic-Version": {"2023-06-01"}}
		if api == apiOpenAI {
			r.Header.Del("X-Api-Key")
			r.Header.Del("Anthropic-Version")
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		stream, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		whole := &meter{api: api}
		if !whole.feed(stream) || !whole.reported {
			t.Fatalf("%s: the meter saw no end or no usage in\n%s", api, stream)
		}
		wantIn, wantWrite := 11, 44
		if api == apiOpenAI { // the sim reports no cache writes to OpenAI clients: they are in prompt_tokens
			wantIn, wantWrite = 55, 0
		}
		if u := whole.tokens; u.InputTokens != wantIn || u.OutputTokens != 22 || u.CacheReadTokens != 33 || u.CacheWriteTokens != wantWrite {
			t.Errorf("%s: tokens %+v", api, u)
		}
		for name, in := range map[string][]byte{"lf": stream, "crlf": bytes.ReplaceAll(stream, []byte("\n"), []byte("\r\n"))} {
			m := &meter{api: api}
			for i := range in {
				m.feed(in[i : i+1])
			}
			if m.tokens != whole.tokens || m.model != whole.model || !m.complete {
				t.Errorf("%s %s byte by byte: %+v %q %t, want %+v %q", api, name, m.tokens, m.model, m.complete, whole.tokens, whole.model)
			}
		}
	}
}
