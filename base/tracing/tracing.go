// Package tracing is how Harvest's packages add spans to a trace that
// someone above them began: a child of the span in the context, made by
// the tracer provider that made that span.
//
// Harvest traces a turn (package session starts its span with the
// provider harvest serve configured; package telemetry says how). The
// packages below — the model client, the tools, the sandbox — take no
// tracer in their configuration: Start asks the context's span for its
// provider, so where no trace was begun (tests, harvest run, tracing off)
// the span is a no-op that costs a few nanoseconds, and where one was,
// the child lands in it. No global provider is read or set.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Start starts a span named name as a child of ctx's span, with that
// span's provider and the tracer scope (the instrumenting package's
// import path). Without a recording span in ctx it returns ctx and a
// span that records nothing.
func Start(ctx context.Context, scope, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, noSpan
	}
	return parent.TracerProvider().Tracer(scope).Start(ctx, name, opts...)
}

// noSpan is the span of a context without one: it records nothing, and
// ending it ends nothing (unlike the parent's, sampled out, it may be
// ended by whoever started it).
var noSpan = trace.SpanFromContext(context.Background())

// End ends span, marking it failed with err when err is not nil.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
