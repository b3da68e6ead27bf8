package gitproxy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/base/boxhttp"
)

// DefaultMaxBodyBytes bounds a request body (a push's pack, decompressed):
// GitHub's own limit on a push.
const DefaultMaxBodyBytes = 2 << 30

// DefaultRequestTimeout bounds one request, upstream answer included.
const DefaultRequestTimeout = time.Hour

// maxCommandBytes bounds the command section of a push (the ref updates and
// push options before the pack), which the proxy holds while it decides.
// Thousands of ref updates fit.
const maxCommandBytes = 1 << 20

// shutdownGrace is how long Serve waits for requests to end after its
// context is done (their contexts are cancelled by then).
const shutdownGrace = 5 * time.Second

// Config configures a Proxy. The zero Config is usable.
type Config struct {
	// Transport sends the upstream requests; nil means a clone of
	// http.DefaultTransport. Redirects are not followed.
	Transport http.RoundTripper
	// MaxBodyBytes bounds a request body as sent, and a push's after
	// decompression; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// RequestTimeout bounds a whole request, from the box's first byte to
	// the upstream's last; 0 means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logger gets one line per request (never a token); nil discards.
	Logger *slog.Logger
}

// Repo is one repository a session may use, and its push policy.
type Repo struct {
	// Path is the repository as the box names it, "owner/name": it is
	// served at /owner/name.git (and /owner/name). Matched without regard
	// to case, as GitHub does.
	Path string
	// URL is the upstream's smart-HTTP base, e.g.
	// https://github.com/owner/name.git, without credentials.
	URL string
	// Token returns the credential added upstream, as HTTP Basic
	// x-access-token:<token>. It is called for every request (the caller
	// caches and refreshes it: a GitHub installation token). nil: no
	// credential is sent.
	Token func(ctx context.Context) (string, error)
	// ReadOnly refuses every push.
	ReadOnly bool
	// DefaultBranch is the repository's default branch ("main"), never
	// pushable, even when listed in Branches.
	DefaultBranch string
	// Branches are the branch names (without refs/heads/) the session may
	// push to, exactly: "harvest/sess-abc", or the head branch of the pull
	// request it works on.
	Branches []string
	// Protected reports whether a branch is protected upstream; a
	// protected branch is refused. An error refuses the push (the proxy
	// does not push where it could not check). nil: no branch is.
	Protected func(ctx context.Context, branch string) (bool, error)
}

// Grant lets one session use the proxy for some repositories.
type Grant struct {
	// Session names the session, in logs and callbacks.
	Session string
	// Repos are the repositories the session may fetch from and push to;
	// any other is answered 404.
	Repos []Repo
	// Listener, when set, binds the token to it: the token is accepted
	// only on connections Serve accepted from this listener (the one
	// bridged into the session's box). nil: on any.
	Listener net.Listener
	// OnPush is called after every push the proxy forwarded, once the
	// upstream's answer has been passed to the box, with what the upstream
	// reported for each ref (RefUpdate.OK: it landed). It runs on the
	// request's goroutine and must not block long. nil: not called.
	OnPush func(Push)
	// OnRefuse is called when the proxy refuses a request of the session
	// itself (a repository not granted, a push against the policy). It
	// runs on the request's goroutine and must not block long. Requests
	// without a valid token are only logged: they have no session.
	OnRefuse func(Refusal)
}

// Op is what a request does.
type Op string

// The operations.
const (
	OpFetch Op = "fetch"
	OpPush  Op = "push"
)

// RefusalKind says why the proxy refused a request or a ref.
type RefusalKind string

// The refusals. Each comes with a reason for the agent that says what to
// do instead.
const (
	// RefusedRepo: the repository is not one the grant lists.
	RefusedRepo RefusalKind = "repo"
	// RefusedReadOnly: the repository is read-only for the session.
	RefusedReadOnly RefusalKind = "read-only"
	// RefusedDefaultBranch: a push to the repository's default branch.
	RefusedDefaultBranch RefusalKind = "default-branch"
	// RefusedBranch: a push to a branch the grant does not list.
	RefusedBranch RefusalKind = "branch"
	// RefusedProtected: a push to a branch protected upstream, or one whose
	// protection could not be checked.
	RefusedProtected RefusalKind = "protected"
	// RefusedDelete: a push that deletes a ref.
	RefusedDelete RefusalKind = "delete"
	// RefusedTag: a push to refs/tags/.
	RefusedTag RefusalKind = "tag"
	// RefusedRef: a push to a ref that is neither a branch nor a tag.
	RefusedRef RefusalKind = "ref"
	// RefusedWithOthers: a ref the policy allows, not pushed because
	// another ref of the same push was refused (pushes are all or nothing).
	RefusedWithOthers RefusalKind = "with-others"
	// RefusedRequest: a push the proxy could not read or does not support
	// (a signed push, a malformed or oversized command list).
	RefusedRequest RefusalKind = "request"
)

// RefUpdate is one ref of a push.
type RefUpdate struct {
	// Ref is the full ref name (refs/heads/harvest/sess-abc).
	Ref string
	// Old and New are the object ids the push moves Ref from and to; all
	// zeros for a ref created (Old) or deleted (New).
	Old, New string
	// OK: the upstream reported the ref updated.
	OK bool
	// Reason is why not, as the upstream or Harvest put it.
	Reason string
	// Refused is why Harvest refused the ref (in a Refusal); empty when it
	// did not.
	Refused RefusalKind
}

// Push is a push the proxy forwarded, and its outcome.
type Push struct {
	Session string
	Repo    string // Repo.Path
	Refs    []RefUpdate
	// Reported: the upstream's report-status was read whole. When false the
	// outcome is unknown (the upstream failed or was cut off); every ref is
	// then OK false with the reason.
	Reported bool
	// Unpack is the upstream's unpack status: "ok", or its error.
	Unpack string
}

// Refusal is a request of a session the proxy refused; nothing of it was
// forwarded.
type Refusal struct {
	Session string
	Repo    string // as the box asked for it
	Op      Op
	// Kind is the first reason: the repository's, or the first refused
	// ref's.
	Kind RefusalKind
	// Reason is what the agent was told (for a push, the first refused
	// ref's reason).
	Reason string
	// Refs are every ref of a refused push, each with why it was not
	// pushed.
	Refs []RefUpdate
}

// Proxy is the git endpoint of the boxes. It is an http.Handler; Serve
// serves it on one listener (any number of times, one per box). It is safe
// for concurrent use.
type Proxy struct {
	transport http.RoundTripper
	maxBody   int64
	timeout   time.Duration
	logger    *slog.Logger

	mu     sync.Mutex
	tokens map[[sha256.Size]byte]*grant // by the token's hash
}

// grant is one live token.
type grant struct {
	session  string
	repos    []*repo
	listener net.Listener
	onPush   func(Push)
	onRefuse func(Refusal)
	// revoked is cancelled by revoke: requests in flight with the token are
	// cancelled with it.
	revoked context.Context
}

// repo is a granted Repo with its URL parsed.
type repo struct {
	Repo
	base   *url.URL // nil when URL is not usable: its requests fail (502)
	badURL error
}

// New returns a proxy for cfg.
func New(cfg Config) *Proxy {
	p := &Proxy{
		transport: cfg.Transport,
		maxBody:   cfg.MaxBodyBytes,
		timeout:   cfg.RequestTimeout,
		logger:    cfg.Logger,
		tokens:    map[[sha256.Size]byte]*grant{},
	}
	if p.transport == nil {
		p.transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if p.maxBody <= 0 {
		p.maxBody = DefaultMaxBodyBytes
	}
	if p.timeout <= 0 {
		p.timeout = DefaultRequestTimeout
	}
	if p.logger == nil {
		p.logger = slog.New(slog.DiscardHandler)
	}
	return p
}

// tokenPrefix marks Harvest's git tokens, so one found in a log or a file
// is recognised for what it is.
const tokenPrefix = "harvest-git-"

// TokenUser is the user name BoxEnv puts beside the token; the proxy
// ignores the user name and checks only the password.
const TokenUser = "x-harvest"

// errRevoked cancels the requests of a token that is revoked.
var errRevoked = errors.New("the session's git token was revoked")

// Grant registers a session and returns its token (256 random bits), which
// the box sends as the HTTP Basic password (BoxEnv), and revoke, which
// invalidates the token and cancels its requests in flight (calling it
// again does nothing). The proxy keeps only the token's SHA-256.
func (p *Proxy) Grant(g Grant) (token string, revoke func()) {
	var raw [32]byte
	rand.Read(raw[:]) // never fails (crypto/rand)
	token = tokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	h := sha256.Sum256([]byte(token))

	ctx, cancel := context.WithCancel(context.Background())
	gr := &grant{session: g.Session, listener: g.Listener, onPush: g.OnPush, onRefuse: g.OnRefuse, revoked: ctx}
	for _, r := range g.Repos {
		rp := &repo{Repo: r}
		rp.Path = strings.Trim(strings.TrimSuffix(strings.Trim(r.Path, "/"), ".git"), "/")
		rp.base, rp.badURL = parseUpstream(r.URL)
		if rp.badURL != nil {
			p.logger.Error("git proxy: a granted repository has an unusable upstream URL; its requests will fail",
				"session", g.Session, "repo", rp.Path, "err", rp.badURL)
		}
		gr.repos = append(gr.repos, rp)
	}
	p.mu.Lock()
	p.tokens[h] = gr
	p.mu.Unlock()

	var once sync.Once
	return token, func() {
		once.Do(func() {
			p.mu.Lock()
			delete(p.tokens, h)
			p.mu.Unlock()
			cancel()
		})
	}
}

func parseUpstream(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("upstream URL %q: want an http or https URL like https://github.com/owner/name.git", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("upstream URL %q: no credentials, query or fragment; Repo.Token gives the credential", u.Redacted())
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// lookup returns the live grant of token, or nil. The map is keyed by the
// token's SHA-256, so finding it compares hashes, never the token; the
// final comparison is constant-time.
func (p *Proxy) lookup(token string, ln net.Listener) *grant {
	if !strings.HasPrefix(token, tokenPrefix) {
		return nil
	}
	h := sha256.Sum256([]byte(token))
	p.mu.Lock()
	g := p.tokens[h]
	var found [sha256.Size]byte
	if g != nil {
		found = h
	}
	p.mu.Unlock()
	if g == nil || subtle.ConstantTimeCompare(found[:], h[:]) != 1 {
		return nil
	}
	if g.listener != nil && g.listener != ln {
		return nil
	}
	return g
}

// find returns the granted repository the box calls path, or nil.
func (g *grant) find(path string) *repo {
	for _, r := range g.repos {
		if strings.EqualFold(r.Path, path) {
			return r
		}
	}
	return nil
}

// listenerKey carries the listener a request came in on (set by Serve).
type listenerKey struct{}

// Serve serves the proxy on l (a box listener from sandbox.Sandbox.Listen,
// or any net.Listener) until ctx is done, then closes l and every
// connection, cancelling requests in flight, and returns nil once every
// handler has returned. It returns early, with the error, if accepting fails
// (the box is gone).
func (p *Proxy) Serve(ctx context.Context, l net.Listener) error {
	return boxhttp.Serve(ctx, l, p, boxhttp.Options{Name: "git proxy", Logger: p.logger, Grace: shutdownGrace,
		Context: func(ctx context.Context, _ net.Listener) context.Context {
			return context.WithValue(ctx, listenerKey{}, l)
		}})
}

// Handler returns the proxy as an http.Handler, for a caller that serves
// it itself. Tokens bound to a listener (Grant.Listener) are not accepted
// through it: only Serve knows the listener.
func (p *Proxy) Handler() http.Handler { return p }
