package session

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-dev/harvest/base/tracing"
)

// Tracing (Config.Tracer). A turn is one trace, from the request that sent
// its message to the turn's end:
//
//	POST /v1/sessions (or .../messages, or a GitHub delivery)   the sender's span
//	├── session.provision            a new or resumed session's box, if it needs one
//	│   ├── session.workspaces       its repositories copied or cloned
//	│   └── session.box              its box started, its agent made
//	└── session.turn t3              the turn, until its end event
//	    ├── chat claude-sonnet-4-5   each model call: the builtin agent's from
//	    │                            the host (package llm), a CLI's in the box
//	    │                            through the model proxy (Grant.Trace)
//	    └── tool bash                each tool call: the builtin agent's (package
//	                                 agent/builtin), a CLI's from its
//	                                 tool.started and tool.finished events
//
// The request's span ends when it is answered; what it caused goes on in
// the runner, later, as its children. The link between the two is the
// message: Create and SendMessage remember the span context of their ctx
// with the message they stored (traceBook, in memory), and the runner
// continues that trace when it provisions for the message, then when its
// turn takes it. A message whose trace is not known (sent untraced, or
// before a restart) begins a trace of its own at its turn.

// maxTraced bounds the traces remembered per session: messages queued
// beyond it begin traces of their own.
const maxTraced = 64

// traceBook keeps the trace of each queued message whose sender was
// traced, until the turn that takes it. Safe for concurrent use.
type traceBook struct {
	mu sync.Mutex
	by map[string][]traced // by session, in the order sent
}

type traced struct {
	msg string
	sc  trace.SpanContext
}

func (b *traceBook) add(session, msg string, sc trace.SpanContext) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.by == nil {
		b.by = map[string][]traced{}
	}
	if len(b.by[session]) < maxTraced {
		b.by[session] = append(b.by[session], traced{msg, sc})
	}
}

// first is the trace of the session's oldest remembered message.
func (b *traceBook) first(session string) trace.SpanContext {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ts := b.by[session]; len(ts) > 0 {
		return ts[0].sc
	}
	return trace.SpanContext{}
}

// take returns the trace of message msg and forgets it (with those of
// older messages: they were taken, or dropped, already).
func (b *traceBook) take(session, msg string) trace.SpanContext {
	b.mu.Lock()
	defer b.mu.Unlock()
	ts := b.by[session]
	for i, t := range ts {
		if t.msg == msg {
			if rest := ts[i+1:]; len(rest) > 0 {
				b.by[session] = rest
			} else {
				delete(b.by, session)
			}
			return t.sc
		}
	}
	return trace.SpanContext{}
}

// forget drops what is remembered of a session (it ended, or was deleted).
func (b *traceBook) forget(session string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.by, session)
}

// remember records the trace of ctx, if it is traced, for message msg.
func (m *Manager) remember(ctx context.Context, session, msg string) {
	if m.cfg.Tracer == nil {
		return
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		m.traces.add(session, msg, sc)
	}
}

// tracerScope is this package's tracing scope.
const tracerScope = "github.com/harvest-dev/harvest/session"

// span starts a span of the runner's: a child of parent (the trace of a
// request, from the traceBook) when it is valid, else the root of a new
// trace. Without a Tracer it records nothing.
func (r *runner) span(ctx context.Context, parent trace.SpanContext, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	tp := r.d.cfg.Tracer
	if tp == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	opts := []trace.SpanStartOption{trace.WithAttributes(append(attrs, attribute.String("harvest.session", r.id))...)}
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	return tp.Tracer(tracerScope).Start(ctx, name, opts...)
}

// endSpan ends span, failed with err if it is not nil.
func endSpan(span trace.Span, err error) { tracing.End(span, err) }

// traceAttrs are the log attributes naming span's trace (none when it
// records nothing).
func traceAttrs(span trace.Span) []any {
	sc := span.SpanContext()
	if !span.IsRecording() || !sc.IsValid() {
		return nil
	}
	return []any{"trace_id", sc.TraceID().String(), "span_id", sc.SpanID().String()}
}
