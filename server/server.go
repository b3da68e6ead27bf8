package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/memory"
	"github.com/harvest-dev/harvest/secrets"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
	"github.com/harvest-dev/harvest/workspace"
)

// Sessions is what the server asks of the session layer (session.Manager
// is one). owner "" is the admin, who sees every session.
type Sessions interface {
	Create(ctx context.Context, owner string, req session.CreateRequest) (*session.View, error)
	Get(ctx context.Context, owner, id string) (*session.View, error)
	List(ctx context.Context, owner string, f store.SessionFilter) ([]*store.Session, error)
	SendMessage(ctx context.Context, owner, id string, out session.Outgoing) (*store.Message, error)
	Cancel(ctx context.Context, owner, id string) error
	Stop(ctx context.Context, owner, id string, req session.StopRequest) error
	Delete(ctx context.Context, owner, id string) error
	Subscribe(ctx context.Context, owner, id string, after int64) (*journal.Subscription, error)
	Changes(ctx context.Context, owner, id string, lim workspace.DiffLimits) ([]session.RepoChanges, error)
	OpenShell(ctx context.Context, owner, id string, sio session.ShellIO) (*session.Shell, error)
	Unlock(ctx context.Context, id string) error
	Draining() bool
	Prepare(ctx context.Context, req session.PrepareRequest) (*store.Environment, error)
	ListEnvironments(ctx context.Context, f store.EnvironmentFilter) ([]*store.Environment, error)
	GetEnvironment(ctx context.Context, id string) (*store.Environment, error)
	Sources(admin bool) wire.SourceList
	EnvironmentLog(ctx context.Context, id string, follow bool, w io.Writer) error
}

// EventStream is one session's events in seq order, with no gap and no
// repeat: a journal.Subscription (the session runs here) or a
// natsbus.Follower (it runs on another server). Events is closed when the
// stream ends; Err then says why (journal.ErrTooSlow, ErrClosed,
// ErrDeleted, ...). Close ends it.
type EventStream interface {
	Events() <-chan event.Event
	Err() error
	Close()
}

var _ EventStream = (*journal.Subscription)(nil)

// Records is what the server reads and writes in the store itself: API
// tokens, users and the audit log, and a session's stored events and lock
// (store.Store is one).
type Records interface {
	store.People
	store.Audit
	store.Teams
	store.Quotas
	TokenByHash(ctx context.Context, hash []byte) (*store.Token, error)
	CreateToken(ctx context.Context, t *store.Token) error
	ListTokens(ctx context.Context) ([]*store.Token, error)
	DeleteToken(ctx context.Context, id string) error
	LastSeq(ctx context.Context, session string) (int64, error)
	Events(ctx context.Context, session string, after int64, limit int) ([]event.Event, error)
	GetLock(ctx context.Context, key string) (store.Lock, error)
	store.WebSessions
	store.SignIns
	store.SlackLinks
}

var (
	_ Sessions = (*session.Manager)(nil)
	_ Records  = (store.Store)(nil)
)

// Config is what a Server serves.
type Config struct {
	// Manager runs the sessions (required).
	Manager Sessions
	// Store holds the API tokens and the session locks (required; the same
	// store the Manager uses).
	Store Records
	// Logger gets one line per failed request (default: discard).
	Logger *slog.Logger
	// Secrets keeps the secrets of /v1/secrets, sealed with SecretKey
	// (package secrets); without both, those routes answer 404.
	Secrets   store.Secrets
	SecretKey *secrets.Key
	// Memory is the repositories' memory of /v1/memory (package memory);
	// nil answers 404.
	Memory *memory.Service
	// GitHubWebhook receives POST /v1/github/webhook (package ghbot's
	// Hooks); nil answers 404.
	GitHubWebhook http.Handler
	// GitHubDeliveries lists and replays the deliveries it stored (the
	// same Hooks); nil answers 404.
	GitHubDeliveries GitHubDeliveries
	// SlackEvents receives POST /v1/slack/events (package slackbot's
	// Bot, with a signing secret); nil answers 404.
	SlackEvents http.Handler
	// UI serves every path outside the API (/, the page's assets): the web
	// UI, package web. Nil answers those with 404.
	UI http.Handler
	// Follow, when set, serves every event stream from it instead of
	// Manager.Subscribe (once Manager.Get says the caller may see the
	// session): the NATS event bus (package journal/natsbus), on a server
	// whose sessions run on another. It is all streams or none (harvest
	// serve --nats-follow); without it, harvest serve's several nodes
	// forward a stream to the session's owner instead.
	Follow func(ctx context.Context, session string, after int64) (EventStream, error)
	// NodeLive, when set (harvest serve's several nodes), says whether a
	// node is live (in the store's node list); a node's token (NewNodeToken)
	// is accepted only while it is. Nil refuses every node's token.
	NodeLive func(ctx context.Context, node string) (bool, error)
	// Access decides who sees and acts on which session (package authz,
	// server/access.go): the directory roots' policies and GitHub's
	// permissions. Nil: no policy and no GitHub, so each sees their own
	// sessions (and admins all).
	Access *authz.Resolver
	// Version is reported by /healthz.
	Version string
	// Ready are the checks of GET /readyz besides draining (which the
	// server checks itself): the store, the backends, the disk. Each
	// runs with a deadline of ReadyTimeout; all run at once.
	Ready []ReadyCheck
	// Metrics serves GET /metrics to admin tokens (package telemetry's
	// Prometheus handler); nil answers 404.
	Metrics http.Handler
	// KeepAlive is how often an idle event stream gets a comment line, so
	// proxies and clients see the connection is alive (default 15s).
	KeepAlive time.Duration
	// WriteTimeout bounds each write to an event stream: a client that
	// stops reading for this long is disconnected (default 30s).
	WriteTimeout time.Duration
	// StoreTimeout is every request's store budget (store.WithBudget;
	// harvest serve --store-timeout, default DefaultStoreTimeout): a
	// store call of the request that the database does not answer
	// within it fails, and the request is a 503 with Retry-After (see
	// "Deadlines" in the package doc). The Manager's and this Config's
	// store must be store.Bounded for it to cut the calls; negative: no
	// budget.
	StoreTimeout time.Duration
	// SignIn enables signing in with GitHub or an OIDC provider
	// (signin.go); the zero value offers the token form only.
	SignIn SignIn
	// Now is the clock a Slack link's code expires by (slacklinks.go;
	// default time.Now).
	Now func() time.Time
}

// DefaultStoreTimeout is Config.StoreTimeout's default: well above what a
// healthy database takes (milliseconds), well below what a client waits
// before it gives up.
const DefaultStoreTimeout = 5 * time.Second

// ReadyCheck is one check of GET /readyz: Check returns nil when it
// passes, else an error whose message says why and what to do (it is
// shown to anyone: it must name no secret).
type ReadyCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

// ReadyTimeout bounds each check of GET /readyz.
const ReadyTimeout = 5 * time.Second

// Server is the HTTP API. It is an http.Handler; serve it with an
// http.Server, and call Drain before that server's Shutdown.
type Server struct {
	cfg    Config
	log    *slog.Logger
	mux    *http.ServeMux
	routes []route
	access *authz.Resolver

	draining atomic.Bool
	// drain is cancelled by Drain: open event streams end with an
	// "unavailable" error event (clients reconnect later).
	drain       context.Context
	cancelDrain context.CancelFunc

	oidc oidcCache // the OIDC provider, discovered (signin_oidc.go)
}

// New returns the API server of cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Manager == nil || cfg.Store == nil {
		return nil, errors.New("server: Config.Manager and Config.Store are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 15 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = DefaultStoreTimeout
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "server"), mux: http.NewServeMux()}
	s.access = cfg.Access
	if s.access == nil {
		s.access = authz.NewResolver(authz.Config{Store: cfg.Store})
	}
	s.drain, s.cancelDrain = context.WithCancel(context.Background())
	s.routes = s.table()
	byPath := map[string][]route{}
	var paths []string
	for _, rt := range s.routes {
		if _, ok := byPath[rt.path]; !ok {
			paths = append(paths, rt.path)
		}
		byPath[rt.path] = append(byPath[rt.path], rt)
	}
	for _, p := range paths {
		s.mux.Handle(p, s.dispatch(byPath[p]))
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.UI != nil && r.URL.Path != "/v1" && !strings.HasPrefix(r.URL.Path, "/v1/") {
			s.cfg.UI.ServeHTTP(w, r)
			return
		}
		hint := "the API is described at /openapi.json"
		if strings.HasPrefix(r.URL.Path, "/v1/secrets/") {
			hint = "a secret is /v1/secrets/{scope}/{name}, with the / of a repository scope sent as %2F: /v1/secrets/repo:owner%2Fname/NAME"
		}
		writeError(w, errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no route %s %s: %s", r.Method, clip(r.URL.Path, 200), hint)))
	})
	return s, nil
}

// ServeHTTP serves the API. A path that is not clean (//, /./, /../)
// names no route: 404, rather than the mux's redirect with an HTML body.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.EscapedPath()
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	if c != p {
		writeError(w, errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no route %s %s: the path is not clean (did an id come out empty?); the API is described at /openapi.json", r.Method, clip(p, 200))))
		return
	}
	// Every store call of the request (the Manager's, the journal's
	// waits, this package's) gets the budget; a forwarder in front may
	// have set a shorter one.
	s.mux.ServeHTTP(w, r.WithContext(store.WithBudget(r.Context(), s.cfg.StoreTimeout)))
}

// Drain makes the server refuse new requests with 503 and ends the open
// event streams (each gets an "unavailable" error event, so its client
// reconnects once the server is back). Requests in flight finish. Call it,
// then http.Server.Shutdown, then close the Manager.
func (s *Server) Drain() {
	s.draining.Store(true)
	s.cancelDrain()
}

// access says who may call a route.
type access int

const (
	public access = iota // anyone (health, the API document)
	user                 // any valid token
	admin                // an admin token
)

// route is one method on one path. The table (routes.go) is the single
// list of the API; the mux, the 405s and the OpenAPI test all read it.
type route struct {
	method string
	path   string // http.ServeMux pattern syntax, {id} for an id segment
	access access
	handle func(w http.ResponseWriter, r *http.Request, c caller) *apiError
}

// dispatch serves every method of one path: 405 for the others, then the
// token, then the id's shape, then the handler.
func (s *Server) dispatch(rts []route) http.Handler {
	var allow []string
	for _, rt := range rts {
		allow = append(allow, rt.method)
	}
	slices.Sort(allow)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := slices.IndexFunc(rts, func(rt route) bool { return rt.method == r.Method })
		if i < 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, errorf(http.StatusMethodNotAllowed, CodeMethodNotAllowed, fmt.Sprintf("%s %s: this path takes %s", r.Method, r.URL.Path, strings.Join(allow, ", "))))
			return
		}
		rt := rts[i]
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("handler panicked", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
				writeError(w, errorf(http.StatusInternalServerError, CodeInternal, fmt.Sprintf("the server failed (a bug: %v); see its log", v)))
			}
		}()
		if e := s.serve(w, r, rt); e != nil {
			logError(s.log, r, e)
			writeError(w, e)
		}
	})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, rt route) *apiError {
	if s.draining.Load() && rt.path != "/healthz" && rt.path != "/readyz" {
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, "the server is shutting down: retry in a few seconds")
	}
	var c caller
	if rt.access != public {
		var e *apiError
		if c, e = s.authenticate(r); e != nil {
			return e
		}
	}
	action := audited[rt.method+" "+rt.path]
	if action == "" {
		return s.check(w, r, rt, c)
	}
	r, a := startAudit(r, action, c)
	if ip := s.forwardedFor(r); ip != "" {
		a.e.Remote = ip
	}
	e := s.check(w, r, rt, c)
	s.finishAudit(a, e)
	return e
}

// check refuses what the caller may not call, and an id of the wrong
// shape, then calls the handler.
func (s *Server) check(w http.ResponseWriter, r *http.Request, rt route, c caller) *apiError {
	if rt.access != public {
		if c.node != "" && !nodeRoute(rt) {
			return errorf(http.StatusForbidden, CodeForbidden, fmt.Sprintf("token %s is node %s's: between nodes it only sends messages to sessions, cancels their turns and stops them (POST /v1/sessions/{id}/messages, .../cancel, .../stop), not %s %s", c.token.ID, c.node, r.Method, rt.path))
		}
		if rt.access == admin && !c.admin() {
			if c.token.Admin {
				return errorf(http.StatusForbidden, CodeForbidden, fmt.Sprintf("%s %s needs an admin token of an admin; token %s (%s) is an admin token, but its user %s is a %s", r.Method, rt.path, c.token.ID, c.token.Name, c.token.User, c.token.Role))
			}
			return errorf(http.StatusForbidden, CodeForbidden, fmt.Sprintf("%s %s needs an admin token; token %s (%s) is not one", r.Method, rt.path, c.token.ID, c.token.Name))
		}
	}
	if strings.Contains(rt.path, "{id}") {
		id := r.PathValue("id")
		if strings.HasPrefix(rt.path, "/v1/environments/") {
			if !envIDPattern.MatchString(id) {
				return errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("%q is not an environment id: environment ids look like env-0123456789abcdef (see GET /v1/environments)", clip(id, 80)))
			}
		} else if strings.HasPrefix(rt.path, "/v1/github/deliveries/") {
			if !wire.ValidDeliveryID(id) {
				return errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("%q is not a delivery id: delivery ids are GitHub's X-GitHub-Delivery GUIDs (see GET /v1/github/deliveries)", clip(id, 80)))
			}
		} else if strings.HasPrefix(rt.path, "/v1/tokens/") {
			if !validTokenID(id) {
				return errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("%q is not a token id: token ids look like tok-0123456789ab (see GET /v1/tokens)", clip(id, 80)))
			}
		} else if strings.HasPrefix(rt.path, "/v1/users/") {
			if !validUserID(id) {
				return errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("%q is not a user id: user ids look like usr-0123456789ab (see GET /v1/users)", clip(id, 80)))
			}
		} else if !session.ValidID(id) {
			return errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("%q is not a session id: session ids look like s-abcdefghijklmnop (see GET /v1/sessions)", clip(id, 80)))
		}
	}
	return rt.handle(w, r, c)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
