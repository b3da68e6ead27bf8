package builtin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/agenttest"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/providers"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sim"
)

// The tests drive the real loop against harvest sim over real HTTP, with the
// real providers, and tools acting in a real local sandbox.

type harness struct {
	t      testing.TB
	box    *sandbox.Sandbox
	host   string // the workspace's host directory
	wsName string
	sim    atomic.Pointer[sim.Server]
	url    string
	client *llm.Client
}

type harnessOpt struct {
	wsName string
	api    string // anthropic (default) or openai
	model  string
}

func newHarness(t testing.TB, script string, opts ...func(*harnessOpt)) *harness {
	t.Helper()
	o := harnessOpt{wsName: "w", api: "anthropic", model: "claude-sonnet-4-5"}
	for _, f := range opts {
		f(&o)
	}
	s, err := sim.ParseScript(t.Name()+".yaml", []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	return newHarnessScript(t, s, o)
}

func newHarnessScript(t testing.TB, s *sim.Script, o harnessOpt) *harness {
	t.Helper()
	h := &harness{t: t, wsName: o.wsName}
	h.sim.Store(sim.New(s))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.sim.Load().ServeHTTP(w, r) }))
	t.Cleanup(hs.Close)

	base := hs.URL
	if o.api == "openai" {
		base += "/v1"
	}
	cfg := providers.Config{
		Endpoints: map[string]providers.Endpoint{o.api: {API: o.api, BaseURL: base, APIKey: "sk-test"}},
		Retry:     llm.RetryPolicy{MaxAttempts: 1},
	}
	client, err := providers.Open(cfg, o.api+"/"+o.model)
	if err != nil {
		t.Fatal(err)
	}

	p := agenttest.Provider(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host := testbin.Workspace(t, 1000, 1000)
	sb, err := p.Start(ctx, sandbox.Spec{Workspaces: []sandbox.Workspace{{Name: o.wsName, HostPath: host}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("destroying the box: %v", err)
		}
	})
	h.box, h.host, h.url, h.client = sb, host, hs.URL, client
	return h
}

// reset starts the script over with a fresh sim.
func (h *harness) reset(s *sim.Script) { h.sim.Store(sim.New(s)) }

// requests is the sim's request log.
func (h *harness) requests() []sim.Request { return h.sim.Load().Requests() }

// ws is the workspace's path in the box.
func (h *harness) ws() string { return "/workspace/" + h.wsName }

// write creates a file in the workspace, through the box.
func (h *harness) write(rel, content string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := h.ws() + "/" + rel
	if i := strings.LastIndexByte(p, '/'); i > len(h.ws()) {
		if err := h.box.Mkdir(ctx, p[:i], true); err != nil {
			h.t.Fatal(err)
		}
	}
	mode := os.FileMode(0o644)
	if strings.HasSuffix(rel, ".sh") {
		mode = 0o755
	}
	if err := h.box.WriteFile(ctx, p, []byte(content), mode); err != nil {
		h.t.Fatal(err)
	}
}

// read returns a workspace file's content as the host sees it.
func (h *harness) read(rel string) string {
	h.t.Helper()
	b, err := os.ReadFile(h.host + "/" + rel)
	if err != nil {
		h.t.Fatal(err)
	}
	return string(b)
}

func (h *harness) agent(def *Definition, mod ...func(*Config)) *Agent {
	h.t.Helper()
	cfg := Config{Client: h.client, Box: h.box, Definition: def, SessionID: "s-test"}
	for _, m := range mod {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := New(ctx, cfg, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			h.t.Errorf("closing the agent: %v", err)
		}
	})
	return a
}

// recorder collects a turn's events.
type recorder struct {
	mu     sync.Mutex
	events []event.Payload
	hook   func(event.Payload)
}

func (r *recorder) emit(p event.Payload) {
	r.mu.Lock()
	r.events = append(r.events, p)
	r.mu.Unlock()
	if r.hook != nil {
		r.hook(p)
	}
}

func (r *recorder) all() []event.Payload {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// turn runs one turn with a generous deadline.
func (h *harness) turn(a *Agent, prompt string) (agent.Outcome, *recorder) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rec := &recorder{}
	out := a.Turn(ctx, prompt, rec.emit)
	checkEnvelope(h.t, rec.all(), out)
	return out, rec
}

// checkEnvelope checks what every turn must satisfy: it starts with
// turn.started, ends with its outcome, and tool calls start before they
// finish.
func checkEnvelope(t testing.TB, evs []event.Payload, out agent.Outcome) {
	t.Helper()
	if len(evs) < 2 {
		t.Fatalf("a turn emitted %d events", len(evs))
	}
	if _, ok := evs[0].(event.TurnStarted); !ok {
		t.Errorf("the first event is %T, want turn.started", evs[0])
	}
	if last := evs[len(evs)-1]; last.EventType() != out.Payload().EventType() {
		t.Errorf("the last event is %s, the outcome %s", last.EventType(), out.Payload().EventType())
	}
	started := map[string]bool{}
	for _, e := range evs {
		switch v := e.(type) {
		case event.ToolStarted:
			started[v.CallID] = true
		case event.ToolFinished:
			if !started[v.CallID] {
				t.Errorf("tool call %s finished before it started", v.CallID)
			}
		}
	}
}

func ofType[T event.Payload](evs []event.Payload) []T {
	var out []T
	for _, e := range evs {
		if v, ok := e.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func mustFinish(t testing.TB, out agent.Outcome) *event.TurnFinished {
	t.Helper()
	if out.Finished == nil {
		t.Fatalf("the turn did not finish: %+v", out.Payload())
	}
	return out.Finished
}

func mustFail(t testing.TB, out agent.Outcome, kind event.FailureKind) *event.TurnFailed {
	t.Helper()
	if out.Failed == nil {
		t.Fatalf("the turn did not fail: %+v", out.Payload())
	}
	if out.Failed.Kind != kind {
		t.Fatalf("the turn failed with kind %q (%s), want %q", out.Failed.Kind, out.Failed.Error, kind)
	}
	return out.Failed
}

// bodies returns the request bodies the sim saw, as strings.
func (h *harness) bodies() []string {
	var out []string
	for _, r := range h.requests() {
		out = append(out, string(r.Body))
	}
	return out
}

func parseDef(t testing.TB, text string) *Definition {
	t.Helper()
	d, err := ParseDefinition("test", "test.md", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return d
}
