package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
)

// Log formats (harvest serve --log-format).
const (
	LogText = "text" // key=value, one line a record (slog's text handler): for people
	LogJSON = "json" // one JSON object a line: for log collectors
)

// Logger is harvest serve's logger (NewLogger), with the node's id on
// every line once SetNode gave it.
type Logger struct {
	*slog.Logger
	node *atomic.Pointer[string]
}

// SetNode names the node every line is from: its id with several nodes,
// else the host's name. Lines logged before have none.
func (l *Logger) SetNode(id string) { l.node.Store(&id) }

// NewLogger is harvest serve's logger: format LogText or LogJSON, records
// of level and above. A record logged with a context that carries a span
// (slog's *Context methods) gets its trace_id and span_id, so a line
// leads to its trace; the session layer adds them to its turns' lines
// itself (with the session and turn ids).
func NewLogger(w io.Writer, format string, level slog.Leveler) (*Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch format {
	case LogText, "":
		h = slog.NewTextHandler(w, opts)
	case LogJSON:
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("log format %q: give %s or %s", format, LogText, LogJSON)
	}
	node := &atomic.Pointer[string]{}
	return &Logger{Logger: slog.New(traceHandler{h, node}), node: node}, nil
}

// traceHandler adds the node and the trace of a record's context.
type traceHandler struct {
	slog.Handler
	node *atomic.Pointer[string]
}

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if n := h.node.Load(); n != nil {
		r.AddAttrs(slog.String("node", *n))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(as), h.node}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name), h.node}
}
