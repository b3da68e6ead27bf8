package modelproxy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/base/boxhttp"
	"github.com/harvest-dev/harvest/llm"
)

// Upstream is one model API the proxy forwards to.
type Upstream struct {
	// BaseURL is where the API is served. Anthropic: the root, without /v1
	// (https://api.anthropic.com, the default). OpenAI and compatible
	// servers: including /v1 (https://api.openai.com/v1, the default;
	// http://localhost:11434/v1 for Ollama), as their SDKs take it.
	BaseURL string
	// APIKey is the real key, added on the host to every forwarded request
	// (Anthropic: x-api-key; OpenAI: Authorization: Bearer). Empty sends no
	// key (a local server that wants none). Keys of at least MinScrubLen
	// bytes are scrubbed from every response; shorter ones are taken for
	// placeholders (Ollama's "ollama") and are not.
	APIKey string
}

// MinScrubLen is the shortest API key the proxy scrubs from responses. A
// real key is far longer (Anthropic's are 108 characters); replacing a short
// placeholder would mangle model output that happens to contain it.
const MinScrubLen = 8

// DefaultMaxBodyBytes bounds a request body: the Messages API's own limit
// (32 MB), far above what a long conversation with images takes.
const DefaultMaxBodyBytes = 32 << 20

// maxResponseBytes bounds a response that is not a stream (read whole, to
// scrub it and record its usage before the client sees its end).
const maxResponseBytes = 64 << 20

// shutdownGrace is how long Serve waits for requests to end after its
// context is done (their contexts are cancelled by then).
const shutdownGrace = 5 * time.Second

// Config configures a Proxy. At least one of Anthropic and OpenAI is set.
type Config struct {
	// Anthropic serves POST /v1/messages, POST /v1/messages/count_tokens and
	// GET /v1/models (for requests with Anthropic headers); nil refuses them.
	Anthropic *Upstream
	// OpenAI serves POST /v1/chat/completions (also /chat/completions, for
	// a client given the proxy's root as base URL) and GET /v1/models; nil
	// refuses them.
	OpenAI *Upstream
	// Prices prices usage; nil means llm.DefaultPrices.
	Prices *llm.PriceTable
	// Transport sends the upstream requests; nil means a clone of
	// http.DefaultTransport. (No overall timeout: a stream lasts as long as
	// the model writes; cancellation comes from the box's client going away,
	// a revoked token, or Serve's context.)
	Transport http.RoundTripper
	// MaxBodyBytes bounds a request body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// BudgetHelp ends the message of a request refused for a spent budget:
	// how to raise it. Default: DefaultBudgetHelp.
	BudgetHelp string
	// Logger gets one line per request (never a key or a token); nil
	// discards.
	Logger *slog.Logger
	// Observer, when set, hears of every request once it is answered
	// (package telemetry counts them). Nil: nobody does.
	Observer Observer
}

// Observer hears of the proxy's requests. ProxyRequest runs on the
// request's goroutine, after the log line, and must return at once.
type Observer interface {
	ProxyRequest(Request)
}

// Request is one request as an Observer hears of it.
type Request struct {
	// API is "anthropic" or "openai" ("" for a path the proxy does not
	// serve); Model the model a model call asked for ("" for other
	// requests).
	API, Model string
	// Status is what the box got; Result how the request ended.
	Status   int
	Result   Result
	Duration time.Duration
	// Usage is a model call's recorded usage (a 2xx answer), else nil.
	Usage *Usage
}

// Result says how a request through the proxy ended.
type Result string

// The results, a closed set.
const (
	// ResultOK: the upstream answered 2xx.
	ResultOK Result = "ok"
	// ResultRefused: the proxy answered itself (no such route, no valid
	// token, a body too large, a spent budget): nothing was forwarded.
	ResultRefused Result = "refused"
	// ResultUpstreamError: the upstream answered with an error status.
	ResultUpstreamError Result = "upstream_error"
	// ResultFailed: the upstream could not be reached or broke off, the
	// token was revoked meanwhile, or the client went away.
	ResultFailed Result = "failed"
)

// Results lists every Result.
var Results = []Result{ResultOK, ResultRefused, ResultUpstreamError, ResultFailed}

// DefaultBudgetHelp tells how to raise a spent budget.
const DefaultBudgetHelp = "raise the session's budget (limits.budget_usd) to go on"

// Grant lets one session use the proxy.
type Grant struct {
	// Session names the session: budgets and Spent are per session, shared
	// by every live grant of it. Required.
	Session string
	// BudgetUSD caps what the session may spend; 0 is no cap. Once the
	// session has spent it, requests are refused with 402 (see the package
	// doc). A grant for a session that already has a live grant sets the
	// session's budget to this one.
	BudgetUSD float64
	// SpentUSD is what the session spent before (its recorded usage, after
	// a Harvest restart): the session starts from it when it has no live
	// grant; otherwise it is ignored.
	SpentUSD float64
	// OnUsage is called once for each model call this grant's token made
	// that the upstream answered with 2xx, after its usage is counted and
	// before the client sees the end of the response. It runs on the
	// request's goroutine and must not block long. nil: usage is only
	// counted.
	OnUsage func(Usage)
	// Admit, when set, is asked before each model call of this grant's
	// token, after the session's own budget: an error refuses the call
	// as a spent budget does (402, not retried), with the error's text
	// as the message the CLI shows — say what was reached and who can
	// raise it. The session layer checks its user's and teams' daily
	// budgets here (package session). It runs on the request's
	// goroutine with the request's context.
	Admit func(ctx context.Context) error
	// Trace, when set, returns the context a model call of this grant's
	// is traced in: its span ("chat MODEL") is a child of that context's
	// span (the session's turn running). nil, or a context without a
	// recording span (between turns, tracing off): the call is not traced.
	// Called on the request's goroutine; it must return at once.
	Trace func() context.Context
}

// Proxy forwards model API requests from boxes to the real APIs. It is an
// http.Handler; Serve serves it on one listener. It is safe for concurrent
// use.
type Proxy struct {
	anth, oai  *upstream
	prices     *llm.PriceTable
	logger     *slog.Logger
	maxBody    int64
	budgetHelp string
	secrets    [][]byte // every real key to scrub from responses
	rp         *httputil.ReverseProxy
	obs        Observer

	mu       sync.Mutex
	tokens   map[[sha256.Size]byte]*grant // by the token's hash
	sessions map[string]*account
}

// upstream is a parsed Upstream.
type upstream struct {
	api  string // apiAnthropic | apiOpenAI
	base *url.URL
	key  string
}

// grant is one live token.
type grant struct {
	acct    *account
	onUsage func(Usage)
	admit   func(context.Context) error
	trace   func() context.Context
	// revoked is cancelled by revoke: requests in flight with the token are
	// cancelled with it.
	revoked context.Context
	revoke  context.CancelFunc
}

// account is a session's spending, shared by its live grants. Guarded by
// Proxy.mu.
type account struct {
	session string
	budget  float64
	spent   float64
	grants  int
}

// New returns a proxy for cfg.
func New(cfg Config) (*Proxy, error) {
	if cfg.Anthropic == nil && cfg.OpenAI == nil {
		return nil, errors.New("model proxy: no upstream: configure Anthropic, OpenAI or both")
	}
	p := &Proxy{
		prices:     cfg.Prices,
		logger:     cfg.Logger,
		maxBody:    cfg.MaxBodyBytes,
		budgetHelp: cfg.BudgetHelp,
		obs:        cfg.Observer,
		tokens:     map[[sha256.Size]byte]*grant{},
		sessions:   map[string]*account{},
	}
	if p.prices == nil {
		p.prices = llm.DefaultPrices
	}
	if p.logger == nil {
		p.logger = slog.New(slog.DiscardHandler)
	}
	if p.maxBody <= 0 {
		p.maxBody = DefaultMaxBodyBytes
	}
	if p.budgetHelp == "" {
		p.budgetHelp = DefaultBudgetHelp
	}
	var err error
	if cfg.Anthropic != nil {
		if p.anth, err = parseUpstream(apiAnthropic, *cfg.Anthropic, "https://api.anthropic.com"); err != nil {
			return nil, err
		}
	}
	if cfg.OpenAI != nil {
		if p.oai, err = parseUpstream(apiOpenAI, *cfg.OpenAI, "https://api.openai.com/v1"); err != nil {
			return nil, err
		}
	}
	for _, u := range []*upstream{p.anth, p.oai} {
		if u != nil && len(u.key) >= MinScrubLen {
			p.secrets = append(p.secrets, []byte(u.key))
		}
	}
	tr := cfg.Transport
	if tr == nil {
		tr = http.DefaultTransport.(*http.Transport).Clone()
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      tr,
		FlushInterval:  -1, // every write reaches the box at once: SSE events are not held
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.upstreamError,
		ErrorLog:       slog.NewLogLogger(p.logger.Handler(), slog.LevelWarn),
		BufferPool:     &buffers,
	}
	return p, nil
}

// buffers are the 32 KB copy buffers of responses (the ReverseProxy's and
// streamBody's): without a pool, half of what a call allocates.
var buffers bufferPool

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if buf, ok := b.p.Get().(*[]byte); ok {
		return *buf
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

func parseUpstream(api string, u Upstream, def string) (*upstream, error) {
	raw := strings.TrimSpace(u.BaseURL)
	if raw == "" {
		raw = def
	}
	base, err := url.Parse(raw)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("model proxy: %s base URL %q: want an http or https URL like %s", api, raw, def)
	}
	if base.User != nil || base.RawQuery != "" || base.Fragment != "" {
		return nil, fmt.Errorf("model proxy: %s base URL %q: no credentials, query or fragment; put the key in APIKey", api, raw)
	}
	base.Path = strings.TrimSuffix(base.Path, "/")
	base.RawPath = ""
	return &upstream{api: api, base: base, key: u.APIKey}, nil
}

// Grant registers a session's token. The token is random (256 bits) and is
// what the session's CLI sends as its API key; revoke invalidates it and
// cancels the requests in flight with it (calling it again does nothing).
// When the last grant of a session is revoked, the session's spending is
// forgotten (Spent returns 0; OnUsage is where it is kept).
func (p *Proxy) Grant(g Grant) (token string, revoke func()) {
	var raw [32]byte
	rand.Read(raw[:]) // never fails (crypto/rand)
	token = tokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	h := sha256.Sum256([]byte(token))

	ctx, cancel := context.WithCancel(context.Background())
	p.mu.Lock()
	acct := p.sessions[g.Session]
	if acct == nil {
		acct = &account{session: g.Session, spent: max(g.SpentUSD, 0)}
		p.sessions[g.Session] = acct
	}
	acct.budget = max(g.BudgetUSD, 0)
	acct.grants++
	p.tokens[h] = &grant{acct: acct, onUsage: g.OnUsage, admit: g.Admit, trace: g.Trace, revoked: ctx, revoke: cancel}
	p.mu.Unlock()

	var once sync.Once
	return token, func() {
		once.Do(func() {
			p.mu.Lock()
			delete(p.tokens, h)
			if acct.grants--; acct.grants == 0 && p.sessions[acct.session] == acct {
				delete(p.sessions, acct.session)
			}
			p.mu.Unlock()
			cancel()
		})
	}
}

// tokenPrefix marks Harvest's session tokens, so one found in a log or a
// file is recognised for what it is.
const tokenPrefix = "harvest-session-"

// Spent returns what the session has spent, in USD, while it has a live
// grant (0 otherwise).
func (p *Proxy) Spent(session string) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a := p.sessions[session]; a != nil {
		return a.spent
	}
	return 0
}

// SetBudget changes the budget of a session that has a live grant (0: no
// cap) and reports whether it had one. Raising the budget lets the next
// request through.
func (p *Proxy) SetBudget(session string, usd float64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.sessions[session]
	if a != nil {
		a.budget = max(usd, 0)
	}
	return a != nil
}

// lookup returns the live grant of token, or nil.
func (p *Proxy) lookup(token string) *grant {
	if !strings.HasPrefix(token, tokenPrefix) {
		return nil
	}
	h := sha256.Sum256([]byte(token))
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tokens[h]
}

// Serve serves the proxy on l (a box listener from sandbox.Sandbox.Listen,
// or any net.Listener) until ctx is done, then closes l and every
// connection, cancelling requests in flight, and returns nil once every
// handler has returned. It returns early, with the error, if accepting fails
// (the box is gone).
func (p *Proxy) Serve(ctx context.Context, l net.Listener) error {
	return boxhttp.Serve(ctx, l, p, boxhttp.Options{Name: "model proxy", Logger: p.logger, Grace: shutdownGrace})
}
