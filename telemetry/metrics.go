package telemetry

import (
	"net/http"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/harvest-dev/harvest/agent/agents"
	"github.com/harvest-dev/harvest/egress"
	"github.com/harvest-dev/harvest/ghbot"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/modelproxy"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/backends"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// Config is what a Metrics needs: the sets its labels are bounded to.
type Config struct {
	// Version is harvest_build_info's version label.
	Version string
	// Backends, Agents are the backend and agent kind names (default:
	// every registered one).
	Backends, Agents []string
	// Prices names the models (default llm.DefaultPrices): a model it
	// does not price is "other".
	Prices *llm.PriceTable
}

// Metrics holds Harvest's metric families (doc.go lists them) in a
// registry of its own, and hears the instrumented packages: it is a
// store.Observer, a sandbox.Observer, a session.Observer (so an
// llm.Observer and a modelproxy.Observer), an egress.Observer and a
// ghbot.Observer. Safe for concurrent use.
type Metrics struct {
	reg      *prometheus.Registry
	prices   *llm.PriceTable
	backends set
	agents   set

	turns         *prometheus.CounterVec
	turnFailures  *prometheus.CounterVec
	turnDuration  *prometheus.HistogramVec
	boxFailures   *prometheus.CounterVec
	modelRequests *prometheus.CounterVec
	modelDuration *prometheus.HistogramVec
	modelTokens   *prometheus.CounterVec
	modelCost     *prometheus.CounterVec
	proxyRequests *prometheus.CounterVec
	egressReqs    *prometheus.CounterVec
	egressBytes   *prometheus.CounterVec
	deliveries    *prometheus.CounterVec
	storeErrors   *prometheus.CounterVec

	// The hot paths (every store call, every command started in a box)
	// observe through handles made once: no label hashing per call.
	box   map[boxKey]prometheus.Observer
	store map[string]prometheus.Observer
	// storeOther is the histogram of an op outside the Store's methods.
	storeOther prometheus.Observer
}

type boxKey struct {
	backend string
	op      sandbox.Op
}

var (
	_ store.Observer      = (*Metrics)(nil)
	_ sandbox.Observer    = (*Metrics)(nil)
	_ session.Observer    = (*Metrics)(nil)
	_ egress.Observer     = (*Metrics)(nil)
	_ ghbot.Observer      = (*Metrics)(nil)
	_ modelproxy.Observer = (*Metrics)(nil)
)

// Buckets of the histograms, in seconds.
var (
	turnBuckets  = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200}
	boxBuckets   = []float64{0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	storeBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5}
	modelBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120, 300}
)

// NewMetrics makes the metric families and registers them, with the Go
// runtime's and the process's collectors, in a registry of their own.
// What the Manager, the journal, the backends and the disk can say at
// any moment is added by Watch, once they exist.
func NewMetrics(cfg Config) *Metrics {
	if cfg.Backends == nil {
		cfg.Backends = backends.Names()
	}
	if cfg.Agents == nil {
		cfg.Agents = agents.Names()
	}
	if cfg.Prices == nil {
		cfg.Prices = llm.DefaultPrices
	}
	m := &Metrics{reg: prometheus.NewRegistry(), prices: cfg.Prices, backends: set(cfg.Backends), agents: set(cfg.Agents)}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	}
	m.turns = counter("harvest_turns_total", "Turns ended, by agent kind and outcome (finished, cancelled, failed).", "agent", "outcome")
	m.turnFailures = counter("harvest_turn_failures_total", "Failed turns, by agent kind and failure kind (the turn.failed event's kind).", "agent", "kind")
	m.turnDuration = histogram("harvest_turn_duration_seconds", "How long turns took, from the message's delivery to the session idle again.", turnBuckets, "agent", "outcome")
	boxDuration := histogram("harvest_box_operation_duration_seconds", "How long box operations took, by backend and operation (create, recover, stop, destroy, exec: a command started, one round trip).", boxBuckets, "backend", "op")
	m.boxFailures = counter("harvest_box_operation_failures_total", "Box operations that failed, by backend and operation.", "backend", "op")
	m.modelRequests = counter("harvest_model_requests_total", "Model calls, by model (the price table's name, else other), path (client: the builtin agent's, from the host; proxy: a box's, through the model proxy) and outcome.", "model", "via", "outcome")
	m.modelDuration = histogram("harvest_model_request_duration_seconds", "How long model calls took, retries included, by model and path.", modelBuckets, "model", "via")
	m.modelTokens = counter("harvest_model_tokens_total", "Tokens of model calls, by model and kind (input, output, cache_read, cache_write: disjoint).", "model", "kind")
	m.modelCost = counter("harvest_model_cost_usd_total", "What model calls cost, in US dollars, priced by the price table, by model.", "model")
	m.proxyRequests = counter("harvest_modelproxy_requests_total", "Requests from boxes through the model proxy, by API and result (ok, refused, upstream_error, failed).", "api", "result")
	m.egressReqs = counter("harvest_egress_requests_total", "Requests from boxes through the egress proxy, by kind (connect, http) and result (ok, error, denied, unauthorized, busy).", "kind", "result")
	m.egressBytes = counter("harvest_egress_bytes_total", "Bytes through the egress proxy, by direction (up: from boxes).", "direction")
	m.deliveries = counter("harvest_webhook_deliveries_total", "GitHub webhook deliveries, by event and result (accepted, duplicate, rejected, unstored when received; acted, ignored, declined, retry, failed when processed).", "event", "result")
	storeDuration := histogram("harvest_store_operation_duration_seconds", "How long store operations took, by operation (the Store method).", storeBuckets, "op")
	m.storeErrors = counter("harvest_store_operation_errors_total", "Store operations that returned an error, by operation and error (not_found and conflict are answers, the others failures).", "op", "error")
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "harvest_build_info", Help: "Always 1, with the version of harvest that serves."}, []string{"version"})
	build.WithLabelValues(cfg.Version).Set(1)

	m.reg.MustRegister(m.turns, m.turnFailures, m.turnDuration, boxDuration, m.boxFailures,
		m.modelRequests, m.modelDuration, m.modelTokens, m.modelCost, m.proxyRequests, m.egressReqs, m.egressBytes,
		m.deliveries, storeDuration, m.storeErrors, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Zero from the start, for every value of bounded sets that are
	// small: a family is there before anything happened, and rate()
	// sees the first increase.
	m.box = map[boxKey]prometheus.Observer{}
	for _, b := range append(set{other}, m.backends...) {
		for _, op := range sandbox.Ops {
			m.box[boxKey{b, op}] = boxDuration.WithLabelValues(b, string(op))
			m.boxFailures.WithLabelValues(b, string(op))
		}
	}
	m.store = map[string]prometheus.Observer{}
	st := reflect.TypeFor[store.Store]()
	for i := range st.NumMethod() {
		op := st.Method(i).Name
		m.store[op] = storeDuration.WithLabelValues(op)
	}
	m.storeOther = storeDuration.WithLabelValues(other)
	for _, a := range m.agents {
		for _, o := range []string{session.TurnFinished, session.TurnCancelled, session.TurnFailed} {
			m.turns.WithLabelValues(a, o)
		}
	}
	for _, api := range []string{"anthropic", "openai"} {
		for _, r := range modelproxy.Results {
			m.proxyRequests.WithLabelValues(api, string(r))
		}
	}
	for _, k := range egressKinds {
		for _, r := range egressResults {
			m.egressReqs.WithLabelValues(k, r)
		}
	}
	m.egressBytes.WithLabelValues("up")
	m.egressBytes.WithLabelValues("down")
	for _, e := range append(set{other}, events...) {
		for _, r := range ghbot.DeliveryResults {
			m.deliveries.WithLabelValues(e, string(r))
		}
	}
	return m
}

// Registry is where the families are; Handler serves it.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in Prometheus' text format (or OpenMetrics,
// when asked). A source that fails (the store, for the sessions by state)
// is logged and left out; the rest is served.
func (m *Metrics) Handler(errorLog promhttp.Logger) http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog: errorLog, ErrorHandling: promhttp.ContinueOnError,
		MaxRequestsInFlight: 4, Timeout: 30 * time.Second, EnableOpenMetrics: true,
	})
}

// model is the model label of a model name: the price table's name for
// it, else "other".
func (m *Metrics) model(name string) string {
	if k, ok := m.prices.Key(name); ok {
		return k
	}
	return other
}

// StoreOp implements store.Observer.
func (m *Metrics) StoreOp(op string, d time.Duration, err error) {
	h, ok := m.store[op]
	if !ok {
		h, op = m.storeOther, other
	}
	h.Observe(d.Seconds())
	if err != nil {
		m.storeErrors.WithLabelValues(op, storeErr(err)).Inc()
	}
}

// BoxOp implements sandbox.Observer.
func (m *Metrics) BoxOp(backend string, op sandbox.Op, d time.Duration, err error) {
	h, ok := m.box[boxKey{backend, op}]
	if !ok {
		backend = other
		if h, ok = m.box[boxKey{other, op}]; !ok {
			return // not an Op of sandbox.Ops
		}
	}
	h.Observe(d.Seconds())
	if err != nil {
		m.boxFailures.WithLabelValues(backend, string(op)).Inc()
	}
}

// TurnEnded implements session.Observer.
func (m *Metrics) TurnEnded(agent string, end session.TurnResult, d time.Duration) {
	a := m.agents.of(agent)
	outcome := set{session.TurnFinished, session.TurnCancelled, session.TurnFailed}.of(end.Outcome)
	// The duration first: a scrape that sees the turn counted sees its
	// duration too (tests wait on the count).
	m.turnDuration.WithLabelValues(a, outcome).Observe(d.Seconds())
	m.turns.WithLabelValues(a, outcome).Inc()
	if end.Outcome == session.TurnFailed {
		m.turnFailures.WithLabelValues(a, failures.of(string(end.Failure))).Inc()
	}
}

// ModelCall implements llm.Observer (through session.Observer): a model
// call of the builtin agent.
func (m *Metrics) ModelCall(c llm.Call) {
	model := m.model(c.Model)
	m.modelRequests.WithLabelValues(model, "client", llmOutcomes.of(llmOutcome(c.Err))).Inc()
	m.modelDuration.WithLabelValues(model, "client").Observe(c.Duration.Seconds())
	m.usage(model, c.Usage, c.CostUSD)
}

// ProxyRequest implements modelproxy.Observer: a box's request through
// the model proxy; its model calls count as such.
func (m *Metrics) ProxyRequest(r modelproxy.Request) {
	res := set{"ok", "refused", "upstream_error", "failed"}.of(string(r.Result))
	m.proxyRequests.WithLabelValues(set{"anthropic", "openai"}.of(r.API), res).Inc()
	if r.Model == "" {
		return // not a model call (models, count_tokens, a refused path)
	}
	name := r.Model
	if r.Usage != nil && r.Usage.Model != "" {
		name = r.Usage.Model
	}
	model := m.model(name)
	m.modelRequests.WithLabelValues(model, "proxy", res).Inc()
	if r.Result != modelproxy.ResultRefused {
		m.modelDuration.WithLabelValues(model, "proxy").Observe(r.Duration.Seconds())
	}
	if r.Usage != nil {
		m.usage(model, r.Usage.Tokens, r.Usage.CostUSD)
	}
}

func (m *Metrics) usage(model string, u llm.Usage, cost float64) {
	for kind, n := range map[string]int{"input": u.InputTokens, "output": u.OutputTokens, "cache_read": u.CacheReadTokens, "cache_write": u.CacheWriteTokens} {
		if n > 0 {
			m.modelTokens.WithLabelValues(model, kind).Add(float64(n))
		}
	}
	if cost > 0 {
		m.modelCost.WithLabelValues(model).Add(cost)
	}
}

// EgressRequest implements egress.Observer.
func (m *Metrics) EgressRequest(st egress.Stats) {
	m.egressReqs.WithLabelValues(egressKind(st), egressResult(st)).Inc()
	if st.BytesUp > 0 {
		m.egressBytes.WithLabelValues("up").Add(float64(st.BytesUp))
	}
	if st.BytesDown > 0 {
		m.egressBytes.WithLabelValues("down").Add(float64(st.BytesDown))
	}
}

var deliveryResults = func() set {
	var s set
	for _, r := range ghbot.DeliveryResults {
		s = append(s, string(r))
	}
	return s
}()

// Delivery implements ghbot.Observer.
func (m *Metrics) Delivery(event string, r ghbot.DeliveryResult) {
	m.deliveries.WithLabelValues(events.of(event), deliveryResults.of(string(r))).Inc()
}
