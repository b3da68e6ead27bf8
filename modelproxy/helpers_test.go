package modelproxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/sim"
)

// The tests run the real thing on loopback: harvest sim as the model API,
// behind a check that every request arrives with the real (canary) key and
// nothing of the box's; the proxy served by Serve on a port-0 listener that
// records every byte it sends to clients; the llm clients, raw HTTP, and
// the real Claude Code CLI as the box's clients. Each harness checks at the
// end that no canary key was sent to a client or written to the log, and
// that no token was logged.

// canary returns a key that looks real and is unique to the test: if it is
// ever found where the box can see it, it came from the proxy.
func canary(prefix string) string {
	var b [24]byte
	rand.Read(b[:])
	return prefix + "CANARY" + hex.EncodeToString(b[:])
}

// canaryParts are the pieces of key searched for: the whole key, and its
// random core and halves (a client that keeps a key's tail, as Claude Code
// does in its config, must not find that either).
func canaryParts(key string) []string {
	_, core, _ := strings.Cut(key, "CANARY")
	return []string{key, core, core[:len(core)/2], core[len(core)/2:]}
}

// harness is a sim behind the key check, and a proxy in front of it.
type harness struct {
	t               testing.TB
	sim             *sim.Server  // nil with newHarnessFor
	next            http.Handler // the model API behind the key check
	upstreamURL     string
	anthKey, oaiKey string
	forwarded       atomic.Int64 // requests that reached the upstream
	mu              sync.Mutex
	violations      []string
	proxy           *Proxy
	url             string         // http://127.0.0.1:PORT, the proxy
	sent            testbin.Buffer // every byte the proxy sent to a client, on any listener
	logs            *testbin.Buffer
	tokens          []string
	client          *http.Client // the box's client
	serveCtx        context.Context
	stopServe       context.CancelFunc
	served          chan error
	stopOnce        sync.Once
}

// newHarness serves script as both APIs' upstream and a proxy in front of
// it; mod may change the proxy's config before New.
func newHarness(t testing.TB, script string, mod func(*Config)) *harness {
	t.Helper()
	s, err := sim.ParseScript(t.Name()+".yaml", []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	srv := sim.New(s)
	h := newHarnessFor(t, srv, mod)
	h.sim = srv
	return h
}

// newHarnessFor is newHarness with another model API than the sim.
func newHarnessFor(t testing.TB, api http.Handler, mod func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, next: api, anthKey: canary("sk-ant-api03-"), oaiKey: canary("sk-proj-"), logs: &testbin.Buffer{}}
	up := httptest.NewServer(http.HandlerFunc(h.upstream))
	t.Cleanup(up.Close)
	h.upstreamURL = up.URL
	cfg := Config{
		Anthropic: &Upstream{BaseURL: up.URL, APIKey: h.anthKey},
		OpenAI:    &Upstream{BaseURL: up.URL + "/v1", APIKey: h.oaiKey},
		Logger:    slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(&cfg)
	}
	h.start(cfg)
	return h
}

// start runs a proxy for cfg on a loopback listener, and registers the
// end-of-test checks.
func (h *harness) start(cfg Config) {
	t := h.t
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.proxy = p
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.url = "http://" + ln.Addr().String()
	h.serveCtx, h.stopServe = context.WithCancel(context.Background())
	h.served = make(chan error, 1)
	go func() { h.served <- p.Serve(h.serveCtx, &tapListener{Listener: ln, buf: &h.sent}) }()
	h.client = &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		h.client.CloseIdleConnections()
		h.stop()
		h.checkLeaks()
	})
}

// stop ends Serve and checks it returned nil.
func (h *harness) stop() {
	h.stopOnce.Do(func() {
		h.stopServe()
		if err := <-h.served; err != nil {
			h.t.Errorf("Serve: %v", err)
		}
	})
}

// checkLeaks: no canary in any byte sent to a client or in the log; no
// token in the log; every upstream request had exactly the real key.
func (h *harness) checkLeaks() {
	t := h.t
	sent, logs := []byte(h.sent.String()), h.logs.String()
	for _, key := range []string{h.anthKey, h.oaiKey} {
		for _, part := range canaryParts(key) {
			if bytes.Contains(sent, []byte(part)) {
				t.Errorf("a real key (%q of it) was sent to a client", part)
			}
			if strings.Contains(logs, part) {
				t.Errorf("a real key (%q of it) is in the proxy's log", part)
			}
		}
	}
	for _, tok := range h.grantedTokens() {
		if strings.Contains(logs, tok) {
			t.Errorf("a session token is in the proxy's log")
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, v := range h.violations {
		t.Errorf("upstream: %s", v)
	}
	if t.Failed() {
		t.Logf("proxy log:\n%s", logs)
	}
}

// upstream is the model API: the sim, behind a check of the credentials
// that arrive.
func (h *harness) upstream(w http.ResponseWriter, r *http.Request) {
	h.forwarded.Add(1)
	var bad []string
	anthropic := strings.HasPrefix(r.URL.Path, "/v1/messages") || r.Header.Get("Anthropic-Version") != ""
	if anthropic {
		if got := r.Header.Get("X-Api-Key"); got != h.anthKey {
			bad = append(bad, fmt.Sprintf("x-api-key %q, want the real Anthropic key", got))
		}
		if got := r.Header.Get("Authorization"); got != "" {
			bad = append(bad, fmt.Sprintf("Authorization %q, want none", got))
		}
	} else {
		if got := r.Header.Get("Authorization"); got != "Bearer "+h.oaiKey {
			bad = append(bad, fmt.Sprintf("Authorization %q, want the real OpenAI key", got))
		}
		if got := r.Header.Get("X-Api-Key"); got != "" {
			bad = append(bad, fmt.Sprintf("x-api-key %q, want none", got))
		}
	}
	for _, tok := range h.grantedTokens() {
		for name, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, tok) {
					bad = append(bad, fmt.Sprintf("header %s carries a session token", name))
				}
			}
		}
	}
	if len(bad) > 0 {
		h.mu.Lock()
		h.violations = append(h.violations, fmt.Sprintf("%s %s: %s", r.Method, r.URL.Path, strings.Join(bad, "; ")))
		h.mu.Unlock()
		http.Error(w, "upstream: bad credentials: "+strings.Join(bad, "; "), http.StatusUnauthorized)
		return
	}
	h.next.ServeHTTP(w, r)
}

func (h *harness) grantedTokens() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.tokens...)
}

// grant registers g and revokes it when the test ends.
func (h *harness) grant(g Grant) string {
	tok, revoke := h.proxy.Grant(g)
	h.t.Cleanup(revoke)
	h.track(tok)
	return tok
}

// track adds a token the log must not show.
func (h *harness) track(tok string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tokens = append(h.tokens, tok)
}

// usageLog collects what OnUsage reports.
type usageLog struct {
	mu sync.Mutex
	u  []Usage
}

func (l *usageLog) add(u Usage) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.u = append(l.u, u)
}

func (l *usageLog) all() []Usage {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Usage(nil), l.u...)
}

// post sends a request as a client in the box would, and returns the
// status, headers and whole body.
func (h *harness) post(path string, header http.Header, body string) (int, http.Header, []byte) {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header = header.Clone()
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("reading the response to %s: %v", path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// anthHeader and oaiHeader are a client's headers with key as its API key.
func anthHeader(key string) http.Header {
	return http.Header{"X-Api-Key": {key}, "Anthropic-Version": {"2023-06-01"}}
}

func oaiHeader(key string) http.Header {
	return http.Header{"Authorization": {"Bearer " + key}}
}

// apiError is either API's error body.
type apiError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Code    any    `json:"code"`
	} `json:"error"`
}

func decodeError(t testing.TB, b []byte) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not an API error body: %s", b)
	}
	return e
}

// scripted returns a rule's usage in llm's terms, as Anthropic reports it.
func scripted(t testing.TB, s *sim.Script, name string) llm.Usage {
	t.Helper()
	for _, r := range s.Rules {
		if r.Name == name {
			v := func(p *int) int {
				if p == nil {
					return 0
				}
				return *p
			}
			u := r.Reply.Usage
			return llm.Usage{InputTokens: v(u.InputTokens), OutputTokens: v(u.OutputTokens),
				CacheReadTokens: v(u.CacheReadInputTokens), CacheWriteTokens: v(u.CacheCreationInputTokens)}
		}
	}
	t.Fatalf("no rule %q", name)
	return llm.Usage{}
}

// serveOn serves the proxy on another listener (a box's) too, recording
// what it sends, until the test ends.
func (h *harness) serveOn(l net.Listener) {
	ctx, cancel := context.WithCancel(h.serveCtx)
	done := make(chan error, 1)
	go func() { done <- h.proxy.Serve(ctx, &tapListener{Listener: l, buf: &h.sent}) }()
	h.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("Serve on %s: %v", l.Addr(), err)
		}
	})
}

// tapListener records every byte the server writes to its clients.
type tapListener struct {
	net.Listener
	buf *testbin.Buffer
}

func (l *tapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &tapConn{Conn: c, buf: l.buf}, nil
}

type tapConn struct {
	net.Conn
	buf *testbin.Buffer
}

func (c *tapConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.buf.Write(b[:n])
	return n, err
}
