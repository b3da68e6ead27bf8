package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/providers"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/sim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
	"github.com/harvest-dev/harvest/wire"
	"github.com/harvest-dev/harvest/workspace"
)

// The tests run the whole server for real: SQLite in a temporary
// directory, the real journal and session.Manager, real local sandboxes
// (their own run dir), the builtin agent against harvest sim, and the API
// over real HTTP on 127.0.0.1.

// script answers "msg ..." with "ok"; "long task" runs a bash command that
// waits for the file "go" in the workspace (the test creates it to end the
// turn), then answers "long task done".
const script = `
rules:
  - name: msg
    when: {last_user_regexp: "^msg"}
    reply: {text: "ok", usage: {input_tokens: 100, output_tokens: 10}}
  - name: released
    when: {tool_result: "released"}
    reply: {text: "long task done", usage: {input_tokens: 100, output_tokens: 10}}
  - name: long
    when: {last_user: "long task"}
    reply:
      tool_calls: [{name: bash, input: {command: "until [ -e go ]; do sleep 0.01; done; echo released", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

const testModel = "anthropic/claude-sonnet-4-5"

// waitTimeout bounds every wait of the tests.
const waitTimeout = 90 * time.Second

type apiEnv struct {
	t    testing.TB
	st   store.Store
	j    *journal.Journal
	m    *session.Manager
	srv  *server.Server
	url  string
	repo string
	// repoRoot is the server's one repository root (repo is in it).
	repoRoot string
	dataDir  string
	runDir   string
	prov     *local.Provider

	transport *http.Transport // every client's
	// smallBufs applies sndBuf and rcvBuf to new connections while set.
	smallBufs atomic.Bool

	sim      atomic.Pointer[sim.Server]
	simHits  chan struct{} // a value per model request, when asked for
	statuses *statusLog

	admin, alice, bob    string // token secrets
	aliceID, bobID       string // their ids
	adminC, aliceC, bobC *client.Client
}

type envConfig struct {
	journal   journal.Options
	keepAlive time.Duration
	sndBuf    int // the server's socket send buffer (0: the system's)
	rcvBuf    int // the clients' socket receive buffer (0: the system's)
	pool      int
	simHits   bool
}

func quietLogger() *slog.Logger {
	if os.Getenv("HARVEST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func newAPIEnv(t testing.TB, cfgs ...func(*envConfig)) *apiEnv {
	t.Helper()
	var cfg envConfig
	for _, f := range cfgs {
		f(&cfg)
	}
	// Registered first, so it runs last: no goroutine of the server or the
	// client outlives the test.
	t.Cleanup(func() { checkNoLeaks(t) })
	e := &apiEnv{t: t, statuses: &statusLog{}, transport: http.DefaultTransport.(*http.Transport).Clone()}
	e.smallBufs.Store(true)
	t.Cleanup(e.transport.CloseIdleConnections)
	if cfg.rcvBuf > 0 {
		d := &net.Dialer{}
		e.transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err == nil && e.smallBufs.Load() {
				err = c.(*net.TCPConn).SetReadBuffer(cfg.rcvBuf)
			}
			return c, err
		}
	}
	s, err := sim.ParseScript("server-test.yaml", []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	e.sim.Store(sim.New(s))
	if cfg.simHits {
		e.simHits = make(chan struct{}, 1024)
	}
	simSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e.simHits != nil && r.URL.Path == "/v1/messages" {
			e.simHits <- struct{}{}
		}
		e.sim.Load().ServeHTTP(w, r)
	}))
	t.Cleanup(simSrv.Close)

	e.runDir = testbin.TempDir(t)
	e.dataDir = testbin.TempDir(t)
	e.repoRoot = testbin.TempDir(t)
	e.repo = filepath.Join(e.repoRoot, "repo")
	if err := os.Mkdir(e.repo, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.repo, "README.md"), []byte("# a repository\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	agentBin := testbin.Agent(t)
	e.prov = local.New(local.Config{RunDir: e.runDir, AgentBinary: agentBin, PoolSize: cfg.pool})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.prov.Available(ctx); err != nil {
		e.prov.Close()
		if testbin.LocalRequired() {
			t.Fatalf("the local sandbox backend is required here: %v", err)
		}
		t.Skipf("the local sandbox backend is not available: %v", err)
	}
	// Cleanups run last first: this one, registered first, runs after the
	// server and the Manager are closed, and checks no box is left.
	t.Cleanup(func() {
		defer e.prov.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		hs, err := e.prov.List(ctx)
		if err != nil {
			t.Errorf("listing boxes: %v", err)
		}
		for _, h := range hs {
			if err := e.prov.Destroy(ctx, h); err != nil {
				t.Errorf("destroying box %s: %v", h.ID, err)
			}
		}
	})

	st, err := sqlite.Open(filepath.Join(t.TempDir(), "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.journal.Logger = quietLogger()
	e.st, e.j = st, journal.New(st, cfg.journal)
	e.m, err = session.NewManager(session.Config{
		Store: st, Journal: e.j,
		Backends: func(name string) (sandbox.Provider, error) {
			if name != local.Name {
				return nil, fmt.Errorf("unknown backend %q: these tests run local", name)
			}
			return e.prov, nil
		},
		DataDir: e.dataDir,
		Sources: e.sources(),
		Models: providers.Config{
			Endpoints: map[string]providers.Endpoint{"anthropic": {API: "anthropic", BaseURL: simSrv.URL, APIKey: "sk-test"}},
			Retry:     llm.RetryPolicy{MaxAttempts: 1},
		},
		DefaultModel: testModel,
		Logger:       quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	e.srv, err = server.New(server.Config{Manager: e.m, Store: st, Logger: quietLogger(), KeepAlive: cfg.keepAlive})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: e.statuses.wrap(e.srv), ReadHeaderTimeout: 10 * time.Second}
	if cfg.sndBuf > 0 {
		hs.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
			if e.smallBufs.Load() {
				c.(*net.TCPConn).SetWriteBuffer(cfg.sndBuf)
			}
			return ctx
		}
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		hs.Serve(ln)
	}()
	e.url = "http://" + ln.Addr().String()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		e.srv.Drain()
		if err := hs.Shutdown(ctx); err != nil {
			t.Errorf("shutting the server down: %v", err)
		}
		<-served
		if err := e.m.Close(ctx); err != nil {
			t.Errorf("closing the manager: %v", err)
		}
		if err := e.j.Close(ctx); err != nil {
			t.Errorf("closing the journal: %v", err)
		}
		st.Close()
		if bad := e.statuses.undocumented(); len(bad) > 0 {
			t.Errorf("statuses openapi.json does not document:\n  %s", strings.Join(bad, "\n  "))
		}
	})

	e.admin, _ = e.token("admin", true)
	e.alice, e.aliceID = e.token("alice", false)
	e.bob, e.bobID = e.token("bob", false)
	e.adminC, e.aliceC, e.bobC = e.client(e.admin), e.client(e.alice), e.client(e.bob)
	return e
}

func (e *apiEnv) token(name string, admin bool) (secret, id string) {
	e.t.Helper()
	secret, tok := server.NewToken(name, admin, time.Now())
	if err := e.st.CreateToken(context.Background(), tok); err != nil {
		e.t.Fatal(err)
	}
	return secret, tok.ID
}

func (e *apiEnv) client(token string) *client.Client {
	e.t.Helper()
	c, err := client.New(e.url, token, &http.Client{Transport: e.transport})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// create makes a session of c on the test repository.
func (e *apiEnv) create(c *client.Client, prompt string) *wire.View {
	e.t.Helper()
	v, err := c.CreateSession(ctxT(e.t), wire.CreateRequest{Repos: []wire.RepoSpec{{Source: e.repo}}, Prompt: prompt})
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// eventually polls cond until it holds (a deadline, no fixed sleep: it
// yields between tries).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, waitTimeout)
		}
		<-tick.C
	}
}

// until reads the stream until an event satisfies pred, returning every
// event read.
func until(t testing.TB, st *client.Stream, what string, pred func(event.Event) bool) []event.Event {
	t.Helper()
	var seen []event.Event
	for {
		ev, err := st.Next()
		if err != nil {
			t.Fatalf("waiting for %s: %v; seen:%s", what, err, describe(seen))
		}
		seen = append(seen, ev)
		if pred(ev) {
			return seen
		}
	}
}

func turnEnded(turn string) func(event.Event) bool {
	return func(ev event.Event) bool {
		switch ev.Data.(type) {
		case event.TurnFinished, event.TurnFailed, event.TurnCancelled:
			return ev.Turn == turn
		}
		return false
	}
}

func isState(s store.State) func(event.Event) bool {
	return func(ev event.Event) bool {
		p, ok := ev.Data.(event.SessionState)
		return ok && p.State == string(s)
	}
}

func describe(evs []event.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		s := fmt.Sprintf("%+v", ev.Data)
		if len(s) > 120 {
			s = s[:120] + "…"
		}
		fmt.Fprintf(&b, "\n  %d %s %s %s", ev.Seq, ev.Turn, ev.Type(), s)
	}
	return b.String()
}

// rawStream is an SSE connection read line by line, for the tests that
// check the wire itself.
type rawStream struct {
	resp *http.Response
	rd   *bufio.Reader
}

// sseEvent is one dispatched SSE event.
type sseEvent struct {
	id, typ, data string
	comments      []string
}

func (e *apiEnv) openRaw(token, id string, header http.Header, query string) *rawStream {
	e.t.Helper()
	u := e.url + "/v1/sessions/" + id + "/events"
	if query != "" {
		u += "?" + query
	}
	req, _ := http.NewRequestWithContext(ctxT(e.t), http.MethodGet, u, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.transport.RoundTrip(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e.t.Fatalf("GET %s: %s %s", u, resp.Status, b)
	}
	rs := &rawStream{resp: resp, rd: bufio.NewReader(resp.Body)}
	e.t.Cleanup(rs.close)
	return rs
}

func (r *rawStream) close() { r.resp.Body.Close() }

// next reads one event (an error at the end of the stream).
func (r *rawStream) next() (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := r.rd.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.data != "" || ev.typ != "" || len(ev.comments) > 0 {
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
			ev.comments = append(ev.comments, line)
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.typ = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.data = line[6:]
		case strings.HasPrefix(line, "retry: "):
		default:
			return ev, fmt.Errorf("unexpected SSE line %q", line)
		}
	}
}

// doRaw sends one request and returns the status and, for an error, the
// decoded envelope (failing the test when an error is not one).
func (e *apiEnv) doRaw(method, path, token, contentType string, body []byte) (int, server.ErrorInfo, http.Header) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctxT(e.t), method, e.url+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if body == nil {
		req.Body = nil
	}
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := e.transport.RoundTrip(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var eb server.ErrorBody
	if resp.StatusCode >= 400 {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" || resp.Header.Get("Content-Type") != "application/json" {
			e.t.Errorf("%s %s: %d with a body that is not the error envelope (%v): %s", method, path, resp.StatusCode, err, b)
		}
	}
	return resp.StatusCode, eb.Error, resp.Header
}

// statusLog records what each route answered, to check against the
// OpenAPI document when the test ends.
type statusLog struct {
	mu   sync.Mutex
	seen map[string]map[int]bool // "METHOD /pattern" → statuses
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (l *statusLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.seen == nil {
			l.seen = map[string]map[int]bool{}
		}
		key := r.Method + " " + r.Pattern
		if l.seen[key] == nil {
			l.seen[key] = map[int]bool{}
		}
		l.seen[key][sw.status] = true
	})
}

// undocumented lists the statuses seen that openapi.json does not list for
// their operation (405s and unknown routes are the mux's, not operations').
func (l *statusLog) undocumented() []string {
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(server.OpenAPI(), &d); err != nil {
		return []string{err.Error()}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for key, statuses := range l.seen {
		method, path, _ := strings.Cut(key, " ")
		raw, ok := d.Paths[path][strings.ToLower(method)]
		if !ok {
			continue
		}
		var op struct {
			Responses map[string]json.RawMessage `json:"responses"`
		}
		if err := json.Unmarshal(raw, &op); err != nil {
			out = append(out, key+": "+err.Error())
			continue
		}
		for st := range statuses {
			if _, ok := op.Responses[fmt.Sprint(st)]; !ok {
				out = append(out, fmt.Sprintf("%s answered %d", key, st))
			}
		}
	}
	slices.Sort(out)
	return out
}

// checkNoLeaks fails the test if goroutines running code of package server
// or client are still there once everything is closed (they get a moment
// to finish returning).
func checkNoLeaks(t testing.TB) {
	t.Helper()
	var leaks []string
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		leaks = leaks[:0]
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "checkNoLeaks") {
				continue
			}
			if strings.Contains(g, "harvest-dev/harvest/server.") || strings.Contains(g, "harvest-dev/harvest/client.") {
				leaks = append(leaks, g)
			}
		}
		if len(leaks) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d goroutines of the server or the client outlived the test:\n%s", len(leaks), strings.Join(leaks, "\n\n"))
			return
		}
		<-tick.C
	}
}

// sources is the server's source policy: user tokens copy from repoRoot.
func (e *apiEnv) sources() *workspace.Policy {
	e.t.Helper()
	p, err := workspace.NewPolicy([]string{e.repoRoot}, nil, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}
