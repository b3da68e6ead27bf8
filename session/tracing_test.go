package session

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-dev/harvest/agent/agenttest"
	"github.com/harvest-dev/harvest/agent/claudecode"
	"github.com/harvest-dev/harvest/agent/opencode"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sim"
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

// TestExternalAgentTraced: the turn of an agent that runs in the box
// (the real Claude Code and OpenCode on harvest sim) is one trace whose
// model calls (made through the model proxy) and tool calls (reported by
// the CLI) are spans under the turn's.
func TestExternalAgentTraced(t *testing.T) {
	for _, kind := range []string{claudecode.Kind.Name, opencode.Kind.Name} {
		t.Run(kind, func(t *testing.T) {
			if kind == opencode.Kind.Name {
				testbin.OpenCode(t)
			} else {
				testbin.Claude(t)
			}
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			defer tp.Shutdown(context.Background())
			e := newEnv(t, withKey(canaryKey), withDisks, withTracer(tp))
			s, err := sim.ParseScript("conformance.yaml", []byte(agenttest.ConformanceScript))
			if err != nil {
				t.Fatal(err)
			}
			e.Sim.Store(sim.New(s))
			v := e.create("Task one: make fixed.txt", func(r *CreateRequest) { r.Agent = kind })
			w := e.watch(v.ID)
			stacktest.Typed[event.ToolStarted](w, "t1", func(p event.ToolStarted) bool { return strings.EqualFold(p.Tool, "bash") })
			release(t, v)
			if f := w.Finished("t1"); f.Result != "Task one done." {
				t.Fatalf("t1 finished with %+v", f)
			}
			var turn sdktrace.ReadOnlySpan
			testbin.WaitFor(t, 30*time.Second, "the turn's span ended", func() bool {
				for _, sp := range rec.Ended() {
					if sp.Name() == "session.turn t1" {
						turn = sp
					}
				}
				return turn != nil
			})
			chats, tools := 0, 0
			for _, sp := range rec.Ended() {
				under := sp.Parent().SpanID() == turn.SpanContext().SpanID() && sp.SpanContext().TraceID() == turn.SpanContext().TraceID()
				switch {
				case strings.HasPrefix(sp.Name(), "chat "):
					if !under {
						t.Errorf("model call %q is not a child of the turn", sp.Name())
					}
					chats++
				case strings.EqualFold(sp.Name(), "tool bash"):
					if !under || sp.Status().Code == codes.Error {
						t.Errorf("tool span %q: a child of the turn %t, status %v; want a child, not failed", sp.Name(), under, sp.Status())
					}
					tools++
				}
			}
			// The task's two main-loop calls at least (the CLI may make
			// more of its own: a title, a summary).
			if chats < 2 || tools != 1 {
				t.Errorf("the turn has %d model-call spans and %d bash tool spans; want at least 2 and 1", chats, tools)
			}
		})
	}
}
