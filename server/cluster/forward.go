package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// Forwarding requests to a session's owner, and the hand-over of an event
// stream when the owner changes: see "Forwarding" and "Streams" in the
// package doc.

// forwardedHeader marks a forwarded request, with the forwarding node.
const forwardedHeader = "Harvest-Forwarded-By"

// Config is what Forward needs.
type Config struct {
	// Manager places new sessions (PlaceNew) and says who owns a session
	// (Owner).
	Manager *session.Manager
	// Store is the shared store: a stream served here reads its session's
	// lease from it.
	Store store.Store
	// Node is this node: its ID marks the requests it forwards, and a
	// stream served here checks its session's lease every Node.TTL/3.
	Node session.NodeConfig
	// Streams forwards event streams to the session's owner too. False
	// when this node serves them from NATS (harvest serve --nats-follow),
	// which carries every node's events.
	Streams bool
	// Logger logs what could not be forwarded (default: slog.Default).
	Logger *slog.Logger
	// StoreTimeout is each request's store budget (server.Config's, the
	// same flag): the forwarder's look-ups of the owner are bounded by it
	// too (default server.DefaultStoreTimeout; negative: none).
	StoreTimeout time.Duration
	// Token is this node's own token: a forwarded request carries it to
	// vouch for the client's address it names, which the owner's audit
	// log then records (server/forwarded.go). Nil: the owner records this
	// node's address.
	Token *Token
}

// Forward puts api behind the forwarder: a request that acts on a running
// session goes to the node that owns it, a create received by a full node
// to a node with room, and anything else to api.
func Forward(api http.Handler, cfg Config) http.Handler {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ttl := cfg.Node.TTL
	if ttl <= 0 {
		ttl = session.DefaultLeaseTTL
	}
	budget := cfg.StoreTimeout
	if budget == 0 {
		budget = server.DefaultStoreTimeout
	}
	poll := min(max(ttl/20, 100*time.Millisecond), 500*time.Millisecond)
	return &forwarder{mgr: cfg.Manager, st: cfg.Store, next: api, self: cfg.Node.ID, events: cfg.Streams,
		every: poll, poll: poll, budget: budget, patience: ttl + ttl/3 + 2*time.Second,
		leases: &leaseCache{st: cfg.Store, maxAge: poll}, token: cfg.Token, log: log.With("component", "forward")}
}

type forwarder struct {
	mgr    *session.Manager
	st     store.Store
	next   http.Handler
	self   string
	events bool          // forward event streams too (Config.Streams)
	every  time.Duration // how often a stream served here checks its session's lease
	// poll is how often a forward in flight checks that its target still
	// holds the lease (through leases, shared by the requests of a session).
	poll time.Duration
	// budget is each request's store budget (Config.StoreTimeout).
	budget time.Duration
	// patience bounds how long a request waits for a session whose owner
	// does not answer, or died, to be taken over: the lease's TTL, a
	// takeover scan, and slack.
	patience time.Duration
	leases   *leaseCache
	token    *Token // this node's (Config.Token), or nil
	log      *slog.Logger
}

// mark marks a request this node forwards: by whom, and, vouched for by
// this node's token, the client's address.
func (f *forwarder) mark(pr *httputil.ProxyRequest) {
	pr.Out.Header.Set(forwardedHeader, f.self)
	pr.Out.Header.Del(server.ForwardedForHeader)
	pr.Out.Header.Del(server.NodeAuthHeader)
	if f.token != nil {
		pr.Out.Header.Set(server.ForwardedForHeader, server.ClientIP(pr.In))
		pr.Out.Header.Set(server.NodeAuthHeader, "Bearer "+f.token.current())
	}
}

func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The look-ups here and the API behind share the request's budget.
	r = r.WithContext(store.WithBudget(r.Context(), f.budget))
	if r.Header.Get(forwardedHeader) != "" {
		if id, ok := f.stream(r); ok {
			// Ours only while no other node holds the lease.
			f.watchStream(w, r, id, store.Lease{})
			return
		}
		f.next.ServeHTTP(w, r)
		return
	}
	if r.URL.Path == "/v1/sessions" && r.Method == http.MethodPost {
		f.create(w, r)
		return
	}
	id, ok := f.forwardable(r)
	switch {
	case !ok:
		f.next.ServeHTTP(w, r)
	case f.events && strings.HasSuffix(r.URL.Path, "/events"):
		f.follow(w, r, id)
	default:
		f.toOwner(w, r, id)
	}
}

// create places a new session: to a node with room when this one is full
// (--max-sessions); one that finds every node full queues it.
func (f *forwarder) create(w http.ResponseWriter, r *http.Request) {
	n, elsewhere, err := f.mgr.PlaceNew(r.Context())
	if err != nil {
		f.log.Warn("placing a new session; creating it here", "err", err)
	}
	if err != nil || !elsewhere {
		f.next.ServeHTTP(w, r)
		return
	}
	target, err := url.Parse(n.Addr)
	if err != nil || target.Host == "" {
		f.log.Warn("a node advertises an unusable address", "node", n.ID, "addr", n.Addr)
		f.next.ServeHTTP(w, r)
		return
	}
	p := &httputil.ReverseProxy{
		Transport: forwardTransport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			f.mark(pr)
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			f.log.Warn("forwarding a new session to a node with room", "node", n.ID, "err", err)
			unavailable(w, forwardFailed("", n.ID))
		},
	}
	p.ServeHTTP(w, r)
}

// toOwner sends a request that acts on session id to its owner, and
// follows the owner: a target that does not answer, or that loses the
// lease while the request is in flight, is left for the node that holds
// the lease then (the request is sent again, with its body; a message
// without an Idempotency-Key gets one, so that it is stored once
// whichever node stores it). A session whose owner died is waited for
// until a node takes it over (at most patience), then served here.
func (f *forwarder) toOwner(w http.ResponseWriter, r *http.Request, id string) {
	ctx := r.Context()
	body, replay := bufferBody(r)
	if replay && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages") && r.Header.Get("Idempotency-Key") == "" {
		r.Header.Set("Idempotency-Key", forwardKey())
	}
	giveUp := time.Now().Add(f.patience)
	var failed owner // the target of the last attempt that got no answer
	for {
		o, err := f.resolve(ctx, id)
		if err != nil {
			if errors.Is(err, store.ErrUnavailable) {
				unavailable(w, "finding the node that runs session "+id+": "+err.Error()+"; try again")
				return
			}
			f.log.Warn("finding the node that runs a session; serving it here", "session", id, "err", err)
			o = owner{place: here}
		}
		wait := o.place == orphaned || (o.place == there && o.node.ID == failed.node.ID && !moved(failed.lease, o.lease))
		if wait && (!replay || time.Now().After(giveUp)) {
			if o.place == orphaned {
				o.place = here // the Manager takes it, or answers 503
			} else {
				unavailable(w, forwardFailed(id, o.node.ID))
				return
			}
		} else if wait {
			select {
			case <-ctx.Done():
				return
			case <-time.After(f.poll):
			}
			continue
		}
		if o.place == here {
			r.Body = replayBody(body, r.Body, replay)
			f.next.ServeHTTP(w, r)
			return
		}
		r.Body = replayBody(body, r.Body, replay)
		if f.proxy(w, r, id, o) {
			return
		}
		if !replay || ctx.Err() != nil {
			if ctx.Err() == nil {
				unavailable(w, forwardFailed(id, o.node.ID))
			}
			return
		}
		failed = o
	}
}

// proxy forwards r to o's node, cancelling it if o's lease moves before
// the node answers. It reports whether an answer was written; false is
// nothing written (the node could not be reached, or lost the lease):
// the caller tries again.
func (f *forwarder) proxy(w http.ResponseWriter, r *http.Request, id string, o owner) (answered bool) {
	target, err := url.Parse(o.node.Addr)
	if err != nil || target.Host == "" {
		f.log.Warn("a node advertises an unusable address", "node", o.node.ID, "addr", o.node.Addr)
		return false
	}
	answered = true
	p := &httputil.ReverseProxy{
		Transport: watched{f: f, id: id, lease: o.lease},
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			f.mark(pr)
		},
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) {
			// Nothing is written yet: the caller tries again.
			f.log.Warn("forwarding a request to the session's node", "session", id, "node", o.node.ID, "err", err)
			answered = false
		},
	}
	p.ServeHTTP(w, r)
	return answered
}

// watched is forwardTransport, cancelling a request whose session's lease
// moves before its answer starts (it is then sent to the new owner).
type watched struct {
	f     *forwarder
	id    string
	lease store.Lease
}

func (t watched) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	stop := t.f.watch(ctx, cancel, t.id, t.lease)
	resp, err := forwardTransport.RoundTrip(req.WithContext(ctx))
	stop()
	if err != nil {
		cancel(nil)
		if c := context.Cause(ctx); errors.Is(c, errLeaseMoved) {
			err = fmt.Errorf("%w: %w", c, err)
		}
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		// (An upgraded connection's body must stay writable: its context
		// ends with the request's.)
		resp.Body = cancelOnClose{resp.Body, func() { cancel(nil) }}
	}
	return resp, nil
}

// cancelOnClose is a body that releases its request's context when closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// bufferBody reads r's body (at most server.MaxBody: the API refuses more)
// so that the request can be sent again; replay false when it is larger
// (sent once, as it comes).
func bufferBody(r *http.Request) (b []byte, replay bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	if r.ContentLength > server.MaxBody {
		return nil, false
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, server.MaxBody+1))
	if err != nil || len(b) > server.MaxBody {
		// Sent on as it is: what was read, then the rest.
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
		return nil, false
	}
	r.Body.Close()
	return b, true
}

// replayBody is the body of the next attempt.
func replayBody(b []byte, body io.ReadCloser, replay bool) io.ReadCloser {
	if !replay {
		return body
	}
	if b == nil {
		return http.NoBody
	}
	return io.NopCloser(bytes.NewReader(b))
}

// forwardKey is the Idempotency-Key a forwarded message gets when its
// client gave none: the attempts through several nodes store it once.
func forwardKey() string {
	var b [12]byte
	rand.Read(b[:])
	return "forwarded-" + hex.EncodeToString(b[:])
}

// unavailable answers 503 with Retry-After and msg.
func unavailable(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	json.NewEncoder(w).Encode(wire.ErrorBody{Error: wire.ErrorInfo{Code: wire.CodeUnavailable, Message: msg}})
}

// forwardFailed is the message of a 503 for a forward that failed; id is
// "" for a create.
func forwardFailed(id, node string) string {
	if id == "" {
		return "this node is full (--max-sessions) and node " + node + ", which had room, does not answer; try again"
	}
	return "session " + id + " runs on node " + node + ", which does not answer; try again (its sessions are taken over once its lease runs out)"
}

// forwardTransport bounds how long a forwarded request waits for the
// owner's answer to start: a node paused (or cut off) keeps its leases
// until they run out, and a request to it fails with 503 instead of
// hanging; the client retries, and once the lease ran out the session is
// taken over. An event stream's headers come at once, so it is not cut.
var forwardTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = time.Minute
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	return t
}()

// stream says whether r is a session's event stream that this node
// would forward to the session's owner (not with --nats-follow: NATS
// carries every node's events), and which session.
func (f *forwarder) stream(r *http.Request) (string, bool) {
	id, ok := f.forwardable(r)
	return id, ok && f.events && strings.HasSuffix(r.URL.Path, "/events")
}

// forwardable says whether r acts on a running session, and which.
func (f *forwarder) forwardable(r *http.Request) (string, bool) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sessions/")
	if !ok {
		return "", false
	}
	id, sub, _ := strings.Cut(rest, "/")
	switch {
	case sub == "" && r.Method == http.MethodDelete,
		sub == "messages" && r.Method == http.MethodPost,
		sub == "cancel" && r.Method == http.MethodPost,
		sub == "unlock" && r.Method == http.MethodPost,
		sub == "diff" && r.Method == http.MethodGet,  // read in the box
		sub == "shell" && r.Method == http.MethodGet, // a shell in the box (an upgrade: proxied too)
		sub == "events" && r.Method == http.MethodGet && f.events:
		return id, id != ""
	}
	return "", false
}
