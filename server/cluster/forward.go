package cluster

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

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
}

// Forward puts api behind the forwarder: a request that acts on a running
// session goes to the node that owns it, a create received by a full node
// to a node with room, and anything else to api.
func Forward(api http.Handler, cfg Config) http.Handler {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	every := cfg.Node.TTL / 3
	if every <= 0 {
		every = session.DefaultLeaseTTL / 3
	}
	return &forwarder{mgr: cfg.Manager, st: cfg.Store, next: api, self: cfg.Node.ID, events: cfg.Streams,
		every: every, log: log.With("component", "forward")}
}

type forwarder struct {
	mgr    *session.Manager
	st     store.Store
	next   http.Handler
	self   string
	events bool          // forward event streams too (Config.Streams)
	every  time.Duration // how often a stream served here checks its session's lease
	log    *slog.Logger
}

func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(forwardedHeader) != "" {
		if id, ok := f.stream(r); ok {
			// Ours only while no other node holds the lease.
			f.watchStream(w, r, id, store.Lease{})
			return
		}
		f.next.ServeHTTP(w, r)
		return
	}
	var n store.Node
	var elsewhere bool
	var err error
	var before store.Lease // an event stream's lease, before it is served
	if id, ok := f.stream(r); ok {
		before, _ = f.st.GetLease(r.Context(), id)
	}
	if r.URL.Path == "/v1/sessions" && r.Method == http.MethodPost {
		// A new session: to a node with room when this one is full
		// (--max-sessions); one that finds every node full queues it.
		n, elsewhere, err = f.mgr.PlaceNew(r.Context())
		if err != nil {
			f.log.Warn("placing a new session; creating it here", "err", err)
		}
	} else if id, ok := f.forwardable(r); ok {
		n, elsewhere, err = f.mgr.Owner(r.Context(), id)
	}
	if err != nil || !elsewhere {
		if id, ok := f.stream(r); ok {
			f.watchStream(w, r, id, before)
			return
		}
		f.next.ServeHTTP(w, r)
		return
	}
	id, _ := f.forwardable(r)
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
			pr.Out.Header.Set(forwardedHeader, f.self)
		},
		FlushInterval: -1, // event streams
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			f.log.Warn("forwarding a request to the session's node", "session", id, "node", n.ID, "err", err)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			json.NewEncoder(w).Encode(wire.ErrorBody{Error: wire.ErrorInfo{Code: wire.CodeUnavailable,
				Message: forwardFailed(id, n.ID)}})
		},
	}
	p.ServeHTTP(w, r)
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

// watchStream serves an event stream of session id here, from this node's
// journal, and ends it once another node has taken the session's lease
// (every TTL/3 it reads the lease: held by another node, and not the lease
// before, read before the stream was opened). The client reconnects with
// Last-Event-ID, is forwarded to the new owner, and gets from its replay
// what this stream missed.
func (f *forwarder) watchStream(w http.ResponseWriter, r *http.Request, id string, before store.Lease) {
	ctx, cancel := context.WithCancel(r.Context())
	watched := make(chan struct{})
	defer func() { cancel(); <-watched }()
	go func() {
		defer close(watched)
		t := time.NewTicker(f.every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			l, err := f.st.GetLease(ctx, id)
			if err == nil && l.Node != "" && l.Node != f.self && (l.Node != before.Node || l.Epoch != before.Epoch) {
				f.log.Info("ending an event stream served here: another node runs the session now", "session", id, "node", l.Node)
				cancel()
				return
			}
		}
	}()
	f.next.ServeHTTP(w, r.WithContext(ctx))
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
