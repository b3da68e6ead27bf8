package modelproxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-dev/harvest/base/tracing"
)

// route is where a request goes.
type route struct {
	up   *upstream
	path string // appended to the upstream's base path
	// generation: a model call, whose budget is checked and usage metered.
	generation bool
}

// errRevoked cancels the requests of a token that is revoked.
var errRevoked = errors.New("the session token was revoked")

// exchangeKey carries the *exchange of a request through the
// ReverseProxy's hooks.
type exchangeKey struct{}

// exchange is one request on its way through the proxy. Its fields are
// used by the request's goroutine only (the ReverseProxy calls its hooks
// and reads the response body on it).
type exchange struct {
	p       *Proxy
	g       *grant
	route   route
	method  string
	path    string
	model   string // as requested
	stream  bool   // as requested
	start   time.Time
	status  int    // the upstream's, or the proxy's refusal
	meter   *meter // set for a 2xx answer to a model call
	once    sync.Once
	usage   *Usage     // once recorded
	problem string     // why the upstream could not answer, for the log
	span    trace.Span // a model call's, in the grant's trace (a no-op without one)
}

// ServeHTTP checks the request's session token and the session's budget,
// swaps the token for the real key and forwards the request, streaming the
// answer back with every real key scrubbed, and records the usage it
// reports. See the package doc.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rt, ref := p.route(r)
	if ref != nil {
		p.refuse(w, r, shapeOf(r), "", *ref)
		return
	}
	api := rt.up.api
	g := p.authenticate(r)
	if g == nil {
		msg := "harvest model proxy: the request has no session token: send the token Harvest gave the session as the API key (x-api-key, or Authorization: Bearer)"
		if tokenOf(r) != nil {
			msg = "harvest model proxy: the session token is not valid: it is not one Harvest gave, or it was revoked when its session stopped; use the token of the running session"
		}
		p.refuse(w, r, api, "", refuseAuth(msg))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.maxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			p.refuse(w, r, api, g.acct.session, refuseTooLarge(fmt.Sprintf("harvest model proxy: the request body is larger than the limit of %d bytes", p.maxBody)))
		} else {
			p.refuse(w, r, api, g.acct.session, refuseBadRequest("harvest model proxy: reading the request body: "+err.Error()))
		}
		return
	}
	ex := &exchange{p: p, g: g, route: rt, method: r.Method, path: r.URL.Path, start: start}
	if rt.generation {
		ex.model, ex.stream, body = inspect(api, body)
		if ref := p.admit(r.Context(), g, ex.model); ref != nil {
			p.refuse(w, r, api, g.acct.session, *ref)
			return
		}
		ex.startSpan(api)
	}

	// The upstream request ends with the client's, with Serve's context,
	// and when the token is revoked.
	ctx, cancel := context.WithCancelCause(context.WithValue(r.Context(), exchangeKey{}, ex))
	defer cancel(nil)
	stop := context.AfterFunc(g.revoked, func() { cancel(errRevoked) })
	defer stop()
	out := r.Clone(ctx)
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	out.Header.Del("Upgrade") // no protocol switches through the proxy

	// The ReverseProxy panics (http.ErrAbortHandler) when the copy to the
	// client fails: done runs anyway, records what the response reported and
	// logs the request.
	defer ex.done()
	p.rp.ServeHTTP(w, out)
}

// route maps a request to its upstream, or says why none serves it. Paths
// not listed are answered 404 without a token check: nothing is forwarded.
func (p *Proxy) route(r *http.Request) (route, *refusal) {
	want := func(method string) *refusal {
		if r.Method == method {
			return nil
		}
		ref := refuseMethod(fmt.Sprintf("harvest model proxy: %s %s: use %s", r.Method, r.URL.Path, method))
		return &ref
	}
	needs := func(up *upstream, name string) *refusal {
		if up != nil {
			return nil
		}
		ref := refuseNotFound(fmt.Sprintf("harvest model proxy: %s %s: this Harvest has no %s model API configured; use a model of an API it has", r.Method, r.URL.Path, name))
		return &ref
	}
	path := r.URL.Path
	switch {
	case path == "/v1/messages" || path == "/v1/messages/count_tokens":
		if ref := firstRefusal(needs(p.anth, "Anthropic"), want(http.MethodPost)); ref != nil {
			return route{}, ref
		}
		return route{up: p.anth, path: path, generation: path == "/v1/messages"}, nil
	case path == "/v1/chat/completions" || path == "/chat/completions":
		if ref := firstRefusal(needs(p.oai, "OpenAI"), want(http.MethodPost)); ref != nil {
			return route{}, ref
		}
		return route{up: p.oai, path: "/chat/completions", generation: true}, nil
	case path == "/v1/models" || strings.HasPrefix(path, "/v1/models/"):
		up, name := p.anth, "Anthropic"
		if shapeOf(r) == apiOpenAI {
			up, name = p.oai, "OpenAI"
		}
		if ref := firstRefusal(needs(up, name), want(http.MethodGet)); ref != nil {
			return route{}, ref
		}
		if up.api == apiOpenAI {
			path = strings.TrimPrefix(path, "/v1")
		}
		return route{up: up, path: path}, nil
	}
	var served []string
	if p.anth != nil {
		served = append(served, "POST /v1/messages", "POST /v1/messages/count_tokens")
	}
	if p.oai != nil {
		served = append(served, "POST /v1/chat/completions")
	}
	served = append(served, "GET /v1/models")
	ref := refuseNotFound(fmt.Sprintf("harvest model proxy: %s %s is not served; it serves %s", r.Method, path, strings.Join(served, ", ")))
	return route{}, &ref
}

func firstRefusal(refs ...*refusal) *refusal {
	for _, r := range refs {
		if r != nil {
			return r
		}
	}
	return nil
}

// shapeOf guesses the API of a request the proxy refuses before routing
// it: OpenAI for its paths and for a bearer token without Anthropic's
// headers.
func shapeOf(r *http.Request) string {
	switch {
	case strings.Contains(r.URL.Path, "/chat/completions"):
		return apiOpenAI
	case strings.HasPrefix(r.URL.Path, "/v1/messages"):
		return apiAnthropic
	case r.Header.Get("Anthropic-Version") == "" && r.Header.Get("X-Api-Key") == "" &&
		r.Header.Get("Authorization") != "":
		return apiOpenAI
	}
	return apiAnthropic
}

// tokenOf returns the credentials a request carries: x-api-key (Anthropic
// clients) and a bearer token (OpenAI clients, and Claude Code given
// ANTHROPIC_AUTH_TOKEN).
func tokenOf(r *http.Request) []string {
	var out []string
	if k := strings.TrimSpace(r.Header.Get("X-Api-Key")); k != "" {
		out = append(out, k)
	}
	if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		if k := strings.TrimSpace(a[7:]); k != "" {
			out = append(out, k)
		}
	}
	return out
}

// authenticate returns the live grant of the request's token, or nil.
func (p *Proxy) authenticate(r *http.Request) *grant {
	for _, t := range tokenOf(r) {
		if g := p.lookup(t); g != nil {
			return g
		}
	}
	return nil
}

// inspect reads the model and stream flag of a model call. A body that
// does not parse is forwarded as it is: the API says what is wrong with it.
// An OpenAI stream is made to report its usage (stream_options.
// include_usage): without it a box could stream without being counted.
func inspect(api string, body []byte) (model string, stream bool, out []byte) {
	var req struct {
		Model         string `json:"model"`
		Stream        bool   `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if json.Unmarshal(body, &req) != nil {
		return "", false, body
	}
	if api == apiOpenAI && req.Stream && (req.StreamOptions == nil || !req.StreamOptions.IncludeUsage) {
		body = withIncludeUsage(body)
	}
	return req.Model, req.Stream, body
}

// withIncludeUsage sets stream_options.include_usage in an OpenAI request.
func withIncludeUsage(body []byte) []byte {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return body
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := top["stream_options"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &opts) != nil {
			return body // the API rejects it
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	top["stream_options"], _ = json.Marshal(opts)
	out, err := json.Marshal(top)
	if err != nil {
		return body
	}
	return out
}

// admit checks the session's budget, then the grant's Admit, before a
// model call.
func (p *Proxy) admit(ctx context.Context, g *grant, model string) *refusal {
	if ref := p.admitSession(g, model); ref != nil {
		return ref
	}
	if g.admit != nil {
		if err := g.admit(ctx); err != nil {
			ref := refuseBudget("harvest: " + err.Error())
			return &ref
		}
	}
	return nil
}

// admitSession checks the session's own budget (Grant.BudgetUSD).
func (p *Proxy) admitSession(g *grant, model string) *refusal {
	p.mu.Lock()
	budget, spent, session := g.acct.budget, g.acct.spent, g.acct.session
	p.mu.Unlock()
	if budget <= 0 {
		return nil
	}
	if spent >= budget {
		ref := refuseBudget(fmt.Sprintf("harvest: the model budget of session %s is spent (%s of %s); %s", session, usd(spent), usd(budget), p.budgetHelp))
		return &ref
	}
	if _, ok := p.prices.Lookup(model); !ok {
		ref := refuseBadRequest(fmt.Sprintf("harvest: model %q has no price, so the budget of session %s (%s) cannot be enforced; add the model's price to Harvest's price file, use a priced model, or remove the budget", model, session, usd(budget)))
		return &ref
	}
	return nil
}

// usd formats an amount of dollars for a message: cents from a dollar up,
// else four decimals, else as many as it takes.
func usd(v float64) string {
	switch {
	case v >= 1 || v == 0:
		return fmt.Sprintf("$%.2f", v)
	case v >= 0.0001:
		return fmt.Sprintf("$%.4f", v)
	}
	return "$" + strconv.FormatFloat(v, 'f', -1, 64)
}

// refuse answers with the proxy's own error and logs it.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, api, session string, ref refusal) {
	ref.write(w, api)
	level := slog.LevelWarn
	if ref.status == http.StatusNotFound || ref.status == http.StatusMethodNotAllowed {
		level = slog.LevelInfo // Claude Code's HEAD / probe, every run
	}
	p.logger.Log(context.Background(), level, "model request refused", "session", session, "method", r.Method,
		"path", r.URL.Path, "status", ref.status, "reason", ref.msg, "remote", r.RemoteAddr)
	if p.obs != nil {
		p.obs.ProxyRequest(Request{API: api, Status: ref.status, Result: ResultRefused})
	}
}

// rewrite points the outgoing request at the upstream, with the real key
// in place of whatever credentials the client sent. (The ReverseProxy has
// already removed hop-by-hop and X-Forwarded headers.)
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	ex := pr.In.Context().Value(exchangeKey{}).(*exchange)
	up := ex.route.up
	u := pr.Out.URL
	u.Scheme, u.Host, u.User = up.base.Scheme, up.base.Host, nil
	u.Path, u.RawPath = up.base.Path+ex.route.path, ""
	u.RawQuery = pr.In.URL.RawQuery
	pr.Out.Host = ""
	h := pr.Out.Header
	for _, k := range []string{"X-Api-Key", "Authorization", "Proxy-Authorization", "Cookie",
		// Without the client's Accept-Encoding, the transport asks for gzip
		// and decodes it: the proxy sees (and scrubs) plain bytes.
		"Accept-Encoding"} {
		h.Del(k)
	}
	if up.key != "" {
		if up.api == apiOpenAI {
			h.Set("Authorization", "Bearer "+up.key)
		} else {
			h.Set("X-Api-Key", up.key)
		}
	}
}

// modifyResponse scrubs the upstream's answer and meters its usage: a
// stream as it passes (streamBody), any other body whole, before the client
// gets a byte of it.
func (p *Proxy) modifyResponse(res *http.Response) error {
	ex := res.Request.Context().Value(exchangeKey{}).(*exchange)
	ex.status = res.StatusCode
	sc := &scrubber{secrets: p.secrets}
	sc.scrubHeader(res.Header)
	switch enc := strings.ToLower(res.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(res.Body)
		if err != nil {
			return fmt.Errorf("the model API's gzip response: %w", err)
		}
		res.Body = struct {
			io.Reader
			io.Closer
		}{zr, res.Body}
		res.Header.Del("Content-Encoding")
		res.ContentLength = -1
	default:
		return fmt.Errorf("the model API answered with Content-Encoding %q, which the proxy cannot inspect for keys", enc)
	}
	metered := ex.route.generation && res.StatusCode/100 == 2
	if metered {
		ex.meter = &meter{api: ex.route.up.api}
	}
	if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt == "text/event-stream" {
		res.Header.Del("Content-Length") // scrubbing may change it
		res.ContentLength = -1
		res.Body = &streamBody{rc: res.Body, ex: ex, sc: sc}
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, maxResponseBytes+1))
	res.Body.Close()
	if err != nil {
		return fmt.Errorf("reading the model API's response: %w", err)
	}
	if len(b) > maxResponseBytes {
		return fmt.Errorf("the model API's response is larger than %d bytes and not a stream", maxResponseBytes)
	}
	if metered {
		ex.meter.parseJSON(b)
		ex.record()
	}
	b = sc.scrub(b)
	res.Body = io.NopCloser(bytes.NewReader(b))
	res.ContentLength = int64(len(b))
	res.Header.Set("Content-Length", strconv.Itoa(len(b)))
	return nil
}

// upstreamError answers when the upstream could not: unreachable, or a
// response modifyResponse refused. Nothing has been written yet.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	ex := r.Context().Value(exchangeKey{}).(*exchange)
	api := ex.route.up.api
	switch {
	case errors.Is(context.Cause(r.Context()), errRevoked):
		ex.status, ex.problem = http.StatusUnauthorized, errRevoked.Error()
		refuseAuth("harvest model proxy: the session token was revoked while the request was in flight (its session stopped)").write(w, api)
	case r.Context().Err() != nil:
		ex.status, ex.problem = 499, "the client went away, or the proxy is shutting down"
	default:
		sc := scrubber{secrets: p.secrets}
		msg := string(sc.scrub(fmt.Appendf(nil, "harvest model proxy: no answer from the model API at %s: %v", ex.route.up.base.Host, err)))
		ex.status, ex.problem = http.StatusBadGateway, msg
		refuseUpstream(msg).write(w, api)
	}
}

// streamBody passes an SSE response on as it arrives, metering its usage
// and scrubbing keys. It records the usage when it sees the stream's last
// event, before passing that event on: a client that starts its next
// request the moment a stream ends finds the budget up to date.
type streamBody struct {
	rc  io.ReadCloser
	ex  *exchange
	sc  *scrubber
	buf []byte
	out []byte
	err error
}

func (b *streamBody) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		if b.buf == nil {
			b.buf = buffers.Get()
		}
		n, err := b.rc.Read(b.buf)
		if n > 0 {
			if m := b.ex.meter; m != nil && m.feed(b.buf[:n]) {
				b.ex.record()
			}
			b.out = b.sc.write(b.buf[:n])
		}
		if err != nil {
			b.out = append(b.out, b.sc.flush()...)
			b.err = err
		}
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	return n, nil
}

// Close is called once the ReverseProxy is done with the body (it reads
// no more).
func (b *streamBody) Close() error {
	if b.buf != nil {
		buffers.Put(b.buf)
		b.buf = nil
	}
	return b.rc.Close()
}

// record counts the metered usage against the session and reports it, once.
func (ex *exchange) record() {
	ex.once.Do(func() {
		p, m := ex.p, ex.meter
		model := m.model
		if model == "" {
			model = ex.model
		}
		cost, priced := p.prices.Cost(model, m.tokens)
		if !priced && ex.model != "" {
			cost, priced = p.prices.Cost(ex.model, m.tokens)
		}
		p.mu.Lock()
		ex.g.acct.spent += cost
		u := Usage{
			Session: ex.g.acct.session, API: ex.route.up.api, Model: model, Stream: ex.stream,
			Tokens: m.tokens, CostUSD: cost, Priced: priced, SpentUSD: ex.g.acct.spent,
			Complete: m.complete, Duration: time.Since(ex.start),
		}
		p.mu.Unlock()
		ex.usage = &u
		if !m.reported {
			p.logger.Warn("the model API reported no usage: the call is not counted", "session", u.Session, "api", u.API, "model", model)
		}
		if ex.g.onUsage != nil {
			ex.g.onUsage(u)
		}
	})
}

// tracerScope is this package's tracing scope.
const tracerScope = "github.com/harvest-dev/harvest/modelproxy"

// startSpan starts a model call's span, a child of the span of the
// grant's Trace context; without one, span is a no-op.
func (ex *exchange) startSpan(api string) {
	ctx := context.Background()
	if ex.g.trace != nil {
		ctx = ex.g.trace()
	}
	_, ex.span = tracing.Start(ctx, tracerScope, "chat "+ex.model, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.system", api),
			attribute.String("gen_ai.request.model", ex.model), attribute.Bool("harvest.stream", ex.stream),
			attribute.String("harvest.via", "proxy")))
}

// endSpan ends a model call's span with what the exchange learnt.
func (ex *exchange) endSpan(res Result) {
	span := ex.span
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Int("http.response.status_code", ex.status), attribute.String("harvest.result", string(res)))
	if u := ex.usage; u != nil {
		span.SetAttributes(attribute.String("gen_ai.response.model", u.Model),
			attribute.Int("gen_ai.usage.input_tokens", u.Tokens.PromptTokens()),
			attribute.Int("gen_ai.usage.output_tokens", u.Tokens.OutputTokens),
			attribute.Float64("harvest.cost_usd", u.CostUSD), attribute.Bool("harvest.complete", u.Complete))
	}
	if res != ResultOK {
		msg := ex.problem
		if msg == "" {
			msg = fmt.Sprintf("the model API answered %d", ex.status)
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End()
}

// done ends an exchange: usage of a response cut short is recorded as far
// as it was reported, and the request is logged.
func (ex *exchange) done() {
	if ex.meter != nil {
		ex.record()
	}
	res := ResultUpstreamError
	switch {
	case ex.problem != "":
		res = ResultFailed
	case ex.status >= 200 && ex.status < 300:
		res = ResultOK
	}
	if ex.span != nil {
		ex.endSpan(res)
	}
	attrs := []any{"session", ex.g.acct.session, "method", ex.method, "path", ex.path, "status", ex.status,
		"ms", time.Since(ex.start).Milliseconds()}
	if ex.route.generation {
		attrs = append(attrs, "model", ex.model, "stream", ex.stream)
	}
	if u := ex.usage; u != nil {
		attrs = append(attrs, "input_tokens", u.Tokens.InputTokens, "output_tokens", u.Tokens.OutputTokens,
			"cache_read_tokens", u.Tokens.CacheReadTokens, "cache_write_tokens", u.Tokens.CacheWriteTokens,
			"cost_usd", u.CostUSD, "spent_usd", u.SpentUSD, "complete", u.Complete)
	}
	if ex.problem != "" {
		attrs = append(attrs, "error", ex.problem)
	}
	if ex.problem == "" && (ex.status == http.StatusUnauthorized || ex.status == http.StatusForbidden) {
		// The API refused the real key: the box cannot fix that.
		ex.p.logger.Warn("the model API refused Harvest's key: check the API key configured for it", attrs...)
	} else {
		ex.p.logger.Info("model request", attrs...)
	}
	if o := ex.p.obs; o != nil {
		o.ProxyRequest(Request{API: ex.route.up.api, Model: ex.model, Status: ex.status, Result: res, Duration: time.Since(ex.start), Usage: ex.usage})
	}
}
