// Package apitest runs Harvest's API for tests: a session.Manager built
// from a stacktest.Stack, the HTTP server on 127.0.0.1, three tokens
// (admin, alice, bob) with a client each, and two checks when the test
// ends: every status a route answered is documented in openapi.json, and
// no goroutine started since New outlives the test (goleak, every
// goroutine, not only the server's). See internal/stacktest for why this
// is a package of its own.
package apitest

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/memory"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/secrets"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/telemetry"
)

// API is a running server over a Stack. The Manager runs on the wall
// clock (the Stack's Clock is not its).
type API struct {
	*stacktest.Stack

	Store   store.Store
	Journal *journal.Journal
	Manager *session.Manager
	Server  *server.Server
	URL     string // http://127.0.0.1:port

	// Transport is every client's. SmallBufs applies WithSendBuffer and
	// WithReceiveBuffer to new connections while set (it starts set).
	Transport *http.Transport
	SmallBufs atomic.Bool

	// SecretKey seals the server's secrets (kept in Store).
	SecretKey *secrets.Key

	// Memory is the server's repository memory (kept in Store).
	Memory *memory.Service

	// SimHits gets a value per model request, with WithSimHits.
	SimHits chan struct{}

	Admin, Alice, Bob    string // token secrets
	AliceID, BobID       string // their ids
	AdminC, AliceC, BobC *client.Client
	statuses             *statusLog
}

type config struct {
	journal   journal.Options
	keepAlive time.Duration
	sndBuf    int
	rcvBuf    int
	simHits   bool
	stack     []stacktest.Option
	logger    *slog.Logger
	nodeLive  func(ctx context.Context, node string) (bool, error)
	metrics   *telemetry.Metrics
	tracing   *telemetry.Tracing
	storeTime time.Duration
	access    func(*API) *authz.Resolver
	signIn    server.SignIn
	now       func() time.Time
}

// WithSignIn sets the server's sign-in with GitHub or OIDC.
func WithSignIn(si server.SignIn) Option { return func(c *config) { c.signIn = si } }

// WithNow gives the server a clock (server.Config.Now).
func WithNow(now func() time.Time) Option { return func(c *config) { c.now = now } }

// Option changes what New builds.
type Option func(*config)

// WithJournal gives the journal opts (its Logger defaults to WithLogger's, else the stack's).
func WithJournal(opts journal.Options) Option { return func(c *config) { c.journal = opts } }

// WithKeepAlive sets the server's SSE keep-alive interval.
func WithKeepAlive(d time.Duration) Option { return func(c *config) { c.keepAlive = d } }

// WithSendBuffer sets the server's socket send buffer (0: the system's).
func WithSendBuffer(n int) Option { return func(c *config) { c.sndBuf = n } }

// WithReceiveBuffer sets the clients' socket receive buffer (0: the
// system's).
func WithReceiveBuffer(n int) Option { return func(c *config) { c.rcvBuf = n } }

// WithLogger gives the journal, the Manager and the server logger
// (default: the stack's).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithNodeLive gives the server its Config.NodeLive (nodes' tokens are
// accepted while it says their node is live).
func WithNodeLive(f func(ctx context.Context, node string) (bool, error)) Option {
	return func(c *config) { c.nodeLive = f }
}

// WithTelemetry watches the server as harvest serve does: m measures the
// store, the boxes, the sessions and the journal and is served at
// /metrics (admin) and behind /readyz's checks; tr (may be nil, or off)
// traces the API's requests and the turns.
func WithTelemetry(m *telemetry.Metrics, tr *telemetry.Tracing) Option {
	return func(c *config) { c.metrics, c.tracing = m, tr }
}

// WithStoreTimeout sets the server's store budget (server.Config.StoreTimeout).
func WithStoreTimeout(d time.Duration) Option { return func(c *config) { c.storeTime = d } }

// WithAccess gives the server the rules of who sees what that mk makes
// (server.Config.Access), with the API's store and stack (its RepoRoot).
func WithAccess(mk func(*API) *authz.Resolver) Option {
	return func(c *config) { c.access = mk }
}

// WithSimHits makes SimHits count the model requests.
func WithSimHits(c *config) { c.simHits = true }

// WithStack passes opts to stacktest.New.
func WithStack(opts ...stacktest.Option) Option {
	return func(c *config) { c.stack = append(c.stack, opts...) }
}

// New starts the API on a new Stack whose model plays script, with the
// Manager recovered (a server that just started).
func New(t testing.TB, script string, opts ...Option) *API {
	t.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	// Registered first, so it runs last, once everything is closed: no
	// goroutine started from here on outlives the test.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { verifyNoLeaks(t, ignore) })

	a := &API{statuses: &statusLog{}, Transport: http.DefaultTransport.(*http.Transport).Clone()}
	a.SmallBufs.Store(true)
	t.Cleanup(a.Transport.CloseIdleConnections)
	if cfg.rcvBuf > 0 {
		d := &net.Dialer{}
		a.Transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err == nil && a.SmallBufs.Load() {
				err = c.(*net.TCPConn).SetReadBuffer(cfg.rcvBuf)
			}
			return c, err
		}
	}
	if cfg.simHits {
		a.SimHits = make(chan struct{}, 1024)
		cfg.stack = append(cfg.stack, stacktest.SimHook(func(r *http.Request) {
			if r.URL.Path == "/v1/messages" {
				a.SimHits <- struct{}{}
			}
		}))
	}
	a.Stack = stacktest.New(t, script, cfg.stack...)
	t.Cleanup(func() { a.statuses.check(t) })

	logger := cfg.logger
	if logger == nil {
		logger = a.Logger()
	}
	if cfg.journal.Logger == nil {
		cfg.journal.Logger = logger
	}
	a.Store, a.Journal = a.Open(cfg.journal)
	a.SecretKey = secrets.GenerateKey()
	backends := a.Backends
	var observer session.Observer
	var ready []server.ReadyCheck
	var metrics http.Handler
	if m := cfg.metrics; m != nil {
		// As harvest serve wires it (internal/cli/servetelemetry.go).
		a.Store = store.Observe(a.Store, m)
		var mu sync.Mutex
		observed := map[string]sandbox.Provider{}
		backends = func(name string) (sandbox.Provider, error) {
			p, err := a.Backends(name)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			defer mu.Unlock()
			if observed[name] == nil {
				observed[name] = sandbox.Observe(p, m)
			}
			return observed[name], nil
		}
		observer, metrics = m, m.Handler(nil)
		m.Watch(telemetry.Sources{Store: a.Store, Journal: a.Journal, Backends: func() []sandbox.Provider {
			p, _ := backends("local")
			return []sandbox.Provider{p}
		}, Disk: func(ctx context.Context) (session.DiskUsage, error) { return a.Manager.DiskUsage(ctx) },
			Logger: logger, Sessions: managerStats{a}})
		ready = []server.ReadyCheck{
			{Name: "store", Check: telemetry.StoreReady(a.Store, logger)},
			{Name: "disk", Check: telemetry.DiskReady(func(ctx context.Context) (session.DiskUsage, error) { return a.Manager.DiskUsage(ctx) }, logger)},
			{Name: "backend local", Check: telemetry.BackendReady(func() (sandbox.Provider, error) { return backends("local") }, 30*time.Second)},
		}
	}
	var err error
	a.Manager, err = session.NewManager(session.Config{
		Store: a.Store, Journal: a.Journal,
		Backends:     backends,
		DataDir:      a.DataDir,
		Disks:        a.Disks,
		Sources:      a.Sources,
		Models:       a.Models(),
		DefaultModel: stacktest.Model,
		Logger:       logger,
		Observer:     observer,
		Tracer:       cfg.tracing.TracerProvider(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Manager.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Memory, err = memory.New(memory.Config{Store: a.Store}); err != nil {
		t.Fatal(err)
	}
	var rules *authz.Resolver
	if cfg.access != nil {
		rules = cfg.access(a)
	}
	a.Server, err = server.New(server.Config{Access: rules, Manager: a.Manager, Store: a.Store, Logger: logger, KeepAlive: cfg.keepAlive,
		Secrets: a.Store, SecretKey: a.SecretKey, Memory: a.Memory, NodeLive: cfg.nodeLive, Ready: ready, Metrics: metrics,
		StoreTimeout: cfg.storeTime, SignIn: cfg.signIn, Now: cfg.now})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: cfg.tracing.Handler(a.statuses.wrap(a.Server)), ReadHeaderTimeout: 10 * time.Second}
	if cfg.sndBuf > 0 {
		hs.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
			if a.SmallBufs.Load() {
				c.(*net.TCPConn).SetWriteBuffer(cfg.sndBuf)
			}
			return ctx
		}
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		hs.Serve(ln)
	}()
	a.URL = "http://" + ln.Addr().String()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		a.Server.Drain()
		if err := hs.Shutdown(ctx); err != nil {
			t.Errorf("shutting the server down: %v", err)
		}
		<-served
		if err := a.Manager.Close(ctx); err != nil {
			t.Errorf("closing the manager: %v", err)
		}
	})

	a.Admin, _ = a.Token("admin", true)
	a.Alice, a.AliceID = a.Token("alice", false)
	a.Bob, a.BobID = a.Token("bob", false)
	a.AdminC, a.AliceC, a.BobC = a.Client(a.Admin), a.Client(a.Alice), a.Client(a.Bob)
	return a
}

// managerStats reads the Manager's Stats once it exists (Watch is
// called before it is made).
type managerStats struct{ a *API }

func (s managerStats) Stats() session.Stats {
	if s.a.Manager == nil {
		return session.Stats{}
	}
	return s.a.Manager.Stats()
}

// Token stores a new token named name and returns its secret and id.
func (a *API) Token(name string, admin bool) (secret, id string) {
	a.T.Helper()
	secret, tok := server.NewToken(name, admin, time.Now())
	if err := a.Store.CreateToken(context.Background(), tok); err != nil {
		a.T.Fatal(err)
	}
	return secret, tok.ID
}

// Client is a client of the API with token, over Transport.
func (a *API) Client(token string) *client.Client {
	a.T.Helper()
	c, err := client.New(a.URL, token, &http.Client{Transport: a.Transport})
	if err != nil {
		a.T.Fatal(err)
	}
	return c
}

// verifyNoLeaks fails the test if goroutines that ignore does not list are
// still there once everything is closed. They get five seconds to finish
// returning (goleak alone waits about half a second).
func verifyNoLeaks(t testing.TB, ignore goleak.Option) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if goleak.Find(ignore, testbin.IgnorePostgres) == nil {
			return
		}
	}
	goleak.VerifyNone(t, ignore, testbin.IgnorePostgres)
}
