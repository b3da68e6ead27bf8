package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/telemetry"
)

// How harvest serve is watched: its logs, its metrics, its traces and its
// readiness (package telemetry; docs/running-a-server.md#metrics-traces-logs-and-probes). serve.go calls
// these at its composition points.

type telemetryFlags struct {
	logFormat     string
	metricsListen string
}

func (t *telemetryFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&t.logFormat, "log-format", telemetry.LogText, "log lines as text (key=value) or json (one object a line, for log collectors); each turn's lines carry the session, the turn, the node and, with tracing on, the trace")
	fl.StringVar(&t.metricsListen, "metrics-listen", "", "also serve GET /metrics (Prometheus) on this address, HOST:PORT, WITHOUT a token; the API's /metrics needs the admin token. Bind it to loopback or a network only your Prometheus reaches (see docs/running-a-server.md#metrics)")
}

// serveTelemetry is what harvest serve is watched with.
type serveTelemetry struct {
	logs    *telemetry.Logger
	metrics *telemetry.Metrics
	tracing *telemetry.Tracing
}

// newServeTelemetry makes the logger, the metrics and the tracing of
// --log-format and the OTEL_* variables.
func newServeTelemetry(ctx context.Context, t telemetryFlags, stderr io.Writer, level slog.Level) (*serveTelemetry, error) {
	logs, err := telemetry.NewLogger(stderr, t.logFormat, level)
	if err != nil {
		return nil, exitCode(2, fmt.Errorf("--log-format: %w", err))
	}
	if host, err := os.Hostname(); err == nil {
		logs.SetNode(host) // a lone server: the machine; several nodes: setNode
	}
	tr, err := telemetry.NewTracing(ctx, Version)
	if err != nil {
		return nil, exitCode(2, err)
	}
	if tr.On() {
		fmt.Fprintf(stderr, "harvest: tracing every turn to %s (%s; OTEL_* variables)\n", tr.Endpoint, tr.Protocol)
	}
	return &serveTelemetry{logs: logs, metrics: telemetry.NewMetrics(telemetry.Config{Version: Version}), tracing: tr}, nil
}

// stop sends the last spans, within a few seconds.
func (st *serveTelemetry) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := st.tracing.Shutdown(ctx); err != nil {
		st.logs.Warn("sending the last spans", "err", err)
	}
}

// readyChecks are GET /readyz's checks besides draining: the store, the
// default backend and every other one opened, and the data directory's
// free space.
func (st *serveTelemetry) readyChecks(s store.Store, provs *providerSet, backend string, mgr *session.Manager) []server.ReadyCheck {
	checks := []server.ReadyCheck{
		{Name: "store", Check: telemetry.StoreReady(s, st.logs.Logger)},
		{Name: "disk", Check: telemetry.DiskReady(mgr.DiskUsage, st.logs.Logger)},
	}
	for _, name := range []string{backend} {
		checks = append(checks, server.ReadyCheck{Name: "backend " + name,
			Check: telemetry.BackendReady(func() (sandbox.Provider, error) { return provs.open(name) }, 30*time.Second)})
	}
	return checks
}

// serveMetrics serves --metrics-listen until stop is called, which waits
// for it.
func (st *serveTelemetry) serveMetrics(addr string, stderr io.Writer) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, exitCode(exitHarvestError, fmt.Errorf("--metrics-listen %s: %w", addr, err))
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", st.metrics.Handler(slog.NewLogLogger(st.logs.Handler(), slog.LevelWarn)))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(st.logs.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			st.logs.Error("serving --metrics-listen", "err", err)
		}
	}()
	fmt.Fprintf(stderr, "harvest: metrics on http://%s/metrics (no token)\n", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if hs.Shutdown(ctx) != nil {
			hs.Close()
		}
		<-done
	}, nil
}
