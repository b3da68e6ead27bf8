package session

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-dev/harvest/event"
)

// TestTraceBook: a message's trace is found by the provisioning (the
// oldest) and taken by its turn, once; a session keeps at most maxTraced.
func TestTraceBook(t *testing.T) {
	var b traceBook
	sc := func(n byte) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{n}, SpanID: trace.SpanID{n}, TraceFlags: trace.FlagsSampled})
	}
	if b.first("s-a").IsValid() || b.take("s-a", "m1").IsValid() {
		t.Fatal("an empty book has traces")
	}
	b.add("s-a", "m1", sc(1))
	b.add("s-a", "m2", sc(2))
	b.add("s-b", "m9", sc(9))
	if got := b.first("s-a"); !got.Equal(sc(1)) {
		t.Errorf("first = %v, want m1's", got)
	}
	if got := b.take("s-a", "m2"); !got.Equal(sc(2)) {
		t.Errorf("take m2 = %v", got)
	}
	// Taking m2 forgot m1 too (older: taken or dropped already).
	if b.first("s-a").IsValid() || b.take("s-a", "m1").IsValid() {
		t.Error("m1's trace is still there after m2's was taken")
	}
	b.forget("s-b")
	if b.first("s-b").IsValid() {
		t.Error("a forgotten session's trace is still there")
	}
	for i := range maxTraced + 10 {
		b.add("s-c", string(rune('a'+i)), sc(byte(i+1)))
	}
	b.mu.Lock()
	n := len(b.by["s-c"])
	b.mu.Unlock()
	if n != maxTraced {
		t.Errorf("%d traces kept for one session, want at most %d", n, maxTraced)
	}
}

// TestToolSpansFromEvents: for an agent whose tools run in the box, the
// turn's tool.started and tool.finished events make its tool spans,
// children of the turn's; one left running when the turn ends is ended
// as failed.
func TestToolSpansFromEvents(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	ctx, turn := tp.Tracer("test").Start(context.Background(), "session.turn t1")
	s := &turnSink{ctx: ctx, tools: map[string]trace.Span{}}
	s.toolSpan(event.ToolStarted{CallID: "c1", Tool: "Bash"})
	s.toolSpan(event.ToolStarted{CallID: "c2", Tool: "Read"})
	s.toolSpan(event.ToolFinished{CallID: "c1", Tool: "Bash", IsError: true})
	s.toolSpan(event.AssistantDelta{Text: "not a tool's"})
	s.endTools()
	turn.End()
	ended := rec.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans ended, want the two tools' and the turn's", len(ended))
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range ended {
		byName[sp.Name()] = sp
	}
	for _, name := range []string{"tool Bash", "tool Read"} {
		sp := byName[name]
		if sp == nil || sp.Parent().SpanID() != turn.SpanContext().SpanID() || sp.Status().Code != codes.Error {
			t.Errorf("%s: %v; want a failed child of the turn", name, sp)
		}
	}
	if len(s.tools) != 0 {
		t.Errorf("%d tool spans left open", len(s.tools))
	}
}
