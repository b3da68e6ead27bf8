package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracing is harvest serve's OpenTelemetry tracing, as the standard
// OTEL_* variables configure it (NewTracing). Off, its Provider is nil
// and nothing is traced.
type Tracing struct {
	// Provider makes the spans (nil when tracing is off): give it to
	// session.Config.Tracer, ghbot.HookConfig.Tracer and Handler.
	Provider *sdktrace.TracerProvider
	// Endpoint and Protocol say where spans go, for the log.
	Endpoint, Protocol string
}

// ErrTracingConfig: an OTEL_* variable asks for what Harvest cannot do.
var ErrTracingConfig = errors.New("tracing configuration")

// NewTracing sets tracing up from the process's environment, as the
// OpenTelemetry specification names the variables:
//
//	OTEL_SDK_DISABLED=true                      off, whatever else is set
//	OTEL_TRACES_EXPORTER                        otlp (the default when an endpoint is set) or none
//	OTEL_EXPORTER_OTLP_ENDPOINT                 the collector (e.g. http://collector:4318 for
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT          http/protobuf, http://collector:4317 for grpc); the
//	                                            traces one is the full URL of the traces endpoint
//	OTEL_EXPORTER_OTLP_PROTOCOL                 http/protobuf (default) or grpc (also _TRACES_PROTOCOL)
//	OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, ...   as the OTLP exporters read them
//	OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES the resource (service.name default "harvest")
//	OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG the sampler (default parentbased_always_on)
//	OTEL_BSP_*                                  the batch span processor
//
// Tracing is off unless an endpoint is set or OTEL_TRACES_EXPORTER=otlp
// asks for it (then the exporter's default, localhost, is the endpoint).
// The exporters read their variables themselves; NewTracing reads only
// what decides whether and how to export.
func NewTracing(ctx context.Context, version string) (*Tracing, error) {
	env := func(k string) string { return strings.TrimSpace(os.Getenv(k)) }
	if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") {
		return &Tracing{}, nil
	}
	endpoint := env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = env("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	switch exp := env("OTEL_TRACES_EXPORTER"); exp {
	case "none":
		return &Tracing{}, nil
	case "":
		if endpoint == "" {
			return &Tracing{}, nil
		}
	case "otlp":
	default:
		return nil, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%s: harvest exports traces with otlp (or none)", ErrTracingConfig, exp)
	}
	proto := env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = env("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto == "" {
		proto = "http/protobuf"
	}
	var client otlptrace.Client
	switch proto {
	case "http/protobuf":
		client = otlptracehttp.NewClient()
	case "grpc":
		client = otlptracegrpc.NewClient()
	default:
		return nil, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_PROTOCOL=%s: harvest speaks http/protobuf or grpc", ErrTracingConfig, proto)
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("starting the OTLP trace exporter (%s, %s): %w", proto, endpoint, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "harvest"), attribute.String("service.version", version)),
		resource.WithFromEnv(), resource.WithHost(), resource.WithProcessPID())
	if err != nil && res == nil {
		return nil, fmt.Errorf("the trace resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME): %w", err)
	}
	// The sampler is the SDK's reading of OTEL_TRACES_SAMPLER.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	if endpoint == "" {
		endpoint = "the exporter's default (localhost)"
	}
	return &Tracing{Provider: tp, Endpoint: endpoint, Protocol: proto}, nil
}

// On reports whether spans are made.
func (t *Tracing) On() bool { return t != nil && t.Provider != nil }

// TracerProvider is Provider as the interface, nil when off (a typed nil
// would not be).
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if !t.On() {
		return nil
	}
	return t.Provider
}

// Shutdown sends the spans still batched and stops the exporter, within
// ctx.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.On() {
		return nil
	}
	return t.Provider.Shutdown(ctx)
}

// Handler traces every request of h but the probes' and the scrapes'
// (/healthz, /readyz, /metrics): a request's span is a child of the trace
// its traceparent header names, if any, else the root of a new one, and
// is named for its route, not its path (no ids in span names). Off, it
// returns h.
func (t *Tracing) Handler(h http.Handler) http.Handler {
	if !t.On() {
		return h
	}
	return otelhttp.NewHandler(h, "harvest",
		otelhttp.WithTracerProvider(t.Provider),
		otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
		otelhttp.WithFilter(func(r *http.Request) bool {
			switch r.URL.Path {
			case "/healthz", "/readyz", "/metrics":
				return false
			}
			return true
		}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + Route(r.URL.Path) }),
	)
}

// apiRoots are the API's first segments after /v1.
var apiRoots = set{"auth", "sessions", "tokens", "secrets", "sources", "environments", "github", "memory"}

func (s set) has(v string) bool { return s.of(v) == v }

// Route is the route of an API path, its ids replaced by their names:
// /v1/sessions/s-abc/messages is /v1/sessions/{id}/messages. Paths
// outside the API are "/" (the web UI's).
func Route(path string) string {
	if path != "/v1" && !strings.HasPrefix(path, "/v1/") {
		switch path {
		case "/healthz", "/readyz", "/metrics", "/openapi.json":
			return path
		}
		return "/"
	}
	seg := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if len(seg) > 5 {
		seg = seg[:5]
	}
	if len(seg) > 1 && !apiRoots.has(seg[1]) {
		return "/v1/{unknown}"
	}
	if len(seg) >= 3 {
		switch seg[1] {
		case "sessions", "tokens", "environments":
			seg[2] = "{id}"
		case "secrets":
			seg[2] = "{scope}"
			if len(seg) >= 4 {
				seg[3] = "{name}"
			}
		}
	}
	for i, s := range seg {
		if len(s) > 32 {
			seg[i] = "{…}"
		}
	}
	return "/" + strings.Join(seg, "/")
}
