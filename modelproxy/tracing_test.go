package modelproxy

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/llm"
)

// TestModelCallSpans: a grant's model calls are spans of the trace its
// Trace context is in (a turn's), children of that context's span, with
// their usage and cost; a call refused by the proxy, a call between turns
// (a context without a span) and a grant without Trace make none.
func TestModelCallSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	turnCtx, turn := tp.Tracer("test").Start(context.Background(), "session.turn t1")
	defer turn.End()

	h := newHarness(t, chatScript, nil)
	var inTurn atomic.Bool
	inTurn.Store(true)
	traced := h.grant(Grant{Session: "traced", BudgetUSD: 0.50, Trace: func() context.Context {
		if inTurn.Load() {
			return turnCtx
		}
		return context.Background()
	}})
	untraced := h.grant(Grant{Session: "untraced"})
	ctx := context.Background()
	hello := llm.Request{Messages: []llm.Message{llm.UserText("hello")}, Tools: []llm.Tool{bashTool}, MaxTokens: 1024}

	if _, err := h.llmClient(apiAnthropic, "claude-sonnet-4-5", traced).Complete(ctx, hello); err != nil {
		t.Fatal(err)
	}
	if _, err := h.llmClient(apiOpenAI, "gpt-4.1", traced).Complete(ctx, hello); err != nil {
		t.Fatal(err)
	}
	if _, err := h.llmClient(apiAnthropic, "claude-sonnet-4-5", untraced).Complete(ctx, hello); err != nil {
		t.Fatal(err)
	}
	// Spends the budget: its span fails nothing (the call went through).
	spend := llm.Request{Messages: []llm.Message{llm.UserText("spend")}, MaxTokens: 1024}
	if _, err := h.llmClient(apiAnthropic, "claude-sonnet-4-5", traced).Complete(ctx, spend); err != nil {
		t.Fatal(err)
	}
	// Refused for the budget: nothing forwarded, no span.
	var e *llm.Error
	if _, err := h.llmClient(apiAnthropic, "claude-sonnet-4-5", traced).Complete(ctx, hello); !errors.As(err, &e) || e.Status != http.StatusPaymentRequired {
		t.Fatalf("over budget: %v, want a 402", err)
	}
	inTurn.Store(false)
	h.proxy.SetBudget("traced", 0)
	if _, err := h.llmClient(apiAnthropic, "claude-sonnet-4-5", traced).Complete(ctx, hello); err != nil {
		t.Fatal(err)
	}

	// A span ends once its exchange is done, just after the client has
	// the answer: wait for the three.
	var ended []sdktrace.ReadOnlySpan
	testbin.WaitFor(t, 10*time.Second, "three model-call spans", func() bool {
		ended = rec.Ended()
		return len(ended) >= 3
	})
	if len(ended) != 3 {
		t.Fatalf("%d spans, want the traced grant's three forwarded calls in its turn", len(ended))
	}
	want := []struct {
		name, system string
		input        int64
	}{
		{"chat claude-sonnet-4-5", apiAnthropic, 1200 + 5000 + 700},
		{"chat gpt-4.1", apiOpenAI, 900 + 3000},
		{"chat claude-sonnet-4-5", apiAnthropic, 200000},
	}
	for i, w := range want {
		sp := ended[i]
		attrs := map[attribute.Key]attribute.Value{}
		for _, kv := range sp.Attributes() {
			attrs[kv.Key] = kv.Value
		}
		if sp.Name() != w.name || sp.Parent().SpanID() != turn.SpanContext().SpanID() || sp.SpanContext().TraceID() != turn.SpanContext().TraceID() {
			t.Errorf("span %d: %q, parent %v; want %q, a child of the turn", i, sp.Name(), sp.Parent().SpanID(), w.name)
		}
		if attrs["gen_ai.system"].AsString() != w.system || attrs["gen_ai.usage.input_tokens"].AsInt64() != w.input ||
			attrs["harvest.cost_usd"].AsFloat64() <= 0 || attrs["harvest.result"].AsString() != string(ResultOK) ||
			attrs["http.response.status_code"].AsInt64() != 200 || sp.Status().Code == codes.Error {
			t.Errorf("span %d (%s): attributes %v, status %v; want %s, %d prompt tokens, a cost, ok", i, sp.Name(), sp.Attributes(), sp.Status(), w.system, w.input)
		}
	}
}
