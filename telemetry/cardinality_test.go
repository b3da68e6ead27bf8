package telemetry_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/agent/agents"
	"github.com/harvest-dev/harvest/egress"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/ghbot"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/modelproxy"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/backends"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/telemetry"
)

// labelSets are the values each label of a harvest_ family may take,
// built from the packages' own lists (not from package telemetry's): the
// fixed sets the issue asks labels to come from. "model" is checked
// apart (a name of the price table, or other).
var labelSets = func() map[string][]string {
	strs := func(xs ...any) []string {
		var out []string
		for _, x := range xs {
			v := reflect.ValueOf(x)
			for i := range v.Len() {
				out = append(out, v.Index(i).String())
			}
		}
		return out
	}
	var storeOps []string
	st := reflect.TypeFor[store.Store]()
	for i := range st.NumMethod() {
		storeOps = append(storeOps, st.Method(i).Name)
	}
	var states []string
	for _, s := range []store.State{store.StatePending, store.StateProvisioning, store.StateIdle, store.StateWorking,
		store.StateWaiting, store.StateCancelling, store.StateSuspended, store.StateStopped, store.StateFailed} {
		states = append(states, string(s))
	}
	var llmKinds []string
	for k := llm.ErrRateLimited; k <= llm.ErrBadRequest; k++ {
		llmKinds = append(llmKinds, strings.ReplaceAll(k.String(), " ", "_"))
	}
	return map[string][]string{
		"state":   states,
		"agent":   append(agents.Names(), "other"),
		"backend": append(backends.Names(), "other"),
		"op":      append(append(strs(sandbox.Ops), storeOps...), "other"),
		"outcome": append(append([]string{session.TurnFinished, session.TurnCancelled, session.TurnFailed, "ok"}, llmKinds...), append(strs(modelproxy.Results), "other")...),
		"kind":    append(strs(event.FailureKinds), "input", "output", "cache_read", "cache_write", "connect", "http", "other"),
		"via":     {"client", "proxy"},
		"api":     {"anthropic", "openai", "other"},
		"result":  append(append(strs(modelproxy.Results, ghbot.DeliveryResults), "ok", "error", "denied", "unauthorized", "busy"), "hit", "miss", "other"),
		"event": {"issue_comment", "issues", "pull_request", "pull_request_review", "pull_request_review_comment",
			"check_suite", "check_run", "push", "ping", "installation", "installation_repositories", "other"},
		"error":     {"not_found", "conflict", "lease_lost", "locked", "unavailable", "memory_full", "canceled", "other"},
		"direction": {"up", "down"},
	}
}()

func random() string {
	var b [8]byte
	rand.Read(b[:])
	return "x" + hex.EncodeToString(b[:])
}

// feed reports n operations, each with labels of its own that no set
// holds: what a user could send (a model's name, a webhook's event) and
// what a bug could pass.
func feed(m *telemetry.Metrics, n int, seen *[]string) {
	for range n {
		r := random()
		*seen = append(*seen, r)
		m.BoxOp(r, sandbox.Op(r), time.Millisecond, errors.New(r))
		m.BoxOp("local", sandbox.OpExec, time.Millisecond, errors.New(r))
		m.StoreOp(r, time.Millisecond, errors.New(r))
		m.StoreOp("GetSession", time.Millisecond, errors.New(r))
		m.TurnEnded(r, session.TurnResult{Outcome: r, Failure: event.FailureKind(r)}, time.Second)
		m.TurnEnded("builtin", session.TurnResult{Outcome: session.TurnFailed, Failure: event.FailureKind(r)}, time.Second)
		m.ModelCall(llm.Call{Provider: r, Model: r, Usage: llm.Usage{InputTokens: 1}, CostUSD: 1, Err: errors.New(r)})
		m.ModelCall(llm.Call{Model: "anthropic/claude-sonnet-4-5-20250929", Usage: llm.Usage{OutputTokens: 1}})
		m.ProxyRequest(modelproxy.Request{API: r, Model: r, Result: modelproxy.Result(r), Usage: &modelproxy.Usage{Model: r, Tokens: llm.Usage{InputTokens: 1}}})
		m.EgressRequest(egress.Stats{Session: r, Method: r, Host: r, Status: 403, Refusal: r, Error: r})
		m.Delivery(r, ghbot.DeliveryResult(r))
	}
}

// series counts the harvest_ series of a scrape.
func series(t *testing.T, m *telemetry.Metrics) (int, families, string) {
	srv := httptest.NewServer(m.Handler(nil))
	defer srv.Close()
	hc := srv.Client()
	defer hc.CloseIdleConnections()
	f := scrape(t, hc, srv.URL, "")
	rec := httptest.NewRecorder()
	m.Handler(nil).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	n := 0
	for name, mf := range f {
		if strings.HasPrefix(name, "harvest_") {
			n += len(mf.GetMetric())
		}
	}
	return n, f, rec.Body.String()
}

// TestCardinalityBounded: however many distinct names the instrumented
// packages report — backends, store operations, agents, outcomes,
// models, APIs, webhook events — the series do not grow past the fixed
// sets: after 300 operations with labels of their own, 300 more add no
// series, no reported name appears in the scrape, and every label value
// is one of its set's.
func TestCardinalityBounded(t *testing.T) {
	m := telemetry.NewMetrics(telemetry.Config{Version: "test"})
	var seen []string
	feed(m, 300, &seen)
	n1, _, _ := series(t, m)
	feed(m, 300, &seen)
	n2, f, text := series(t, m)
	if n2 != n1 {
		t.Errorf("300 more operations with new names made %d series into %d: the labels are not bounded", n1, n2)
	}
	if n2 > 2000 {
		t.Errorf("%d harvest_ series from the fixed sets alone: more than the 2000 expected", n2)
	}
	for _, r := range seen {
		if strings.Contains(text, r) {
			t.Fatalf("the reported name %q is in the scrape", r)
		}
	}
	checkBounded(t, f, "no-session")
	prices := llm.DefaultPrices
	for name, mf := range f {
		if !strings.HasPrefix(name, "harvest_") {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				_, known := labelSets[lp.GetName()]
				switch lp.GetName() {
				case "model":
					if k, ok := prices.Key(lp.GetValue()); lp.GetValue() != "other" && (!ok || k != lp.GetValue()) {
						t.Errorf("%s{model=%q}: not a name of the price table", name, lp.GetValue())
					}
				case "version":
				default:
					if !known {
						t.Errorf("%s has the label %s, which has no fixed set here", name, lp.GetName())
					}
				}
			}
		}
	}
	// The snapshot of a known model is counted under the model's name.
	if v := f.value("harvest_model_tokens_total", l("model", "claude-sonnet-4-5", "kind", "output")); v != 600 {
		t.Errorf("the dated snapshot's tokens under claude-sonnet-4-5: %v, want 600", v)
	}
	if !slices.Contains(labelSets["agent"], "builtin") {
		t.Fatal("the agent set has no builtin")
	}
}
