package cli

import (
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
	"os"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
	"github.com/spf13/pflag"
)

// With several nodes (--advertise), a session runs on the node that holds
// its lease, and only that node writes its events (its journal numbers
// them). Any node answers the API: reads come from the shared store, and
// the requests that act on a running session — send a message, cancel,
// delete, unlock, the live event stream, and those that use its box (diff,
// shell) — are forwarded to its owner by a reverse proxy that passes the
// caller's credentials on (the owner checks them against the same store). A request another node forwarded is
// never forwarded again: if ownership moved meanwhile the Manager answers
// 503 and the client retries. A session nobody owns (suspended, or its
// node died and its lease has not run out yet) is handled here: a send
// takes the lease and resumes the session on this node. With
// --max-sessions, a create received by a full node is forwarded to a live
// node with room (session.Manager.PlaceNew); when every node is full it
// is created here and queued until a node has room (session/place.go).
// Webhook deliveries have no client's request to forward: the node that
// processes one sends a session's message to its owner itself, with a
// token of its own (servenodetoken.go).

// An event stream served here comes from this node's journal, which has
// only the events this node writes: it is complete only while no other
// node writes the session's events. So a stream served here (its owner is
// this node, nobody, or a node that died and whose lease has not run out
// yet) ends as soon as another node takes the session's lease, and the
// client, reconnecting with Last-Event-ID, is forwarded to that node
// (watchStream). Without that, a client following a dead node's session
// through a survivor, or a session that resumes on another node, or that
// a node paused and resumed lost, would wait forever for events it is
// never sent.

// forwardedHeader marks a forwarded request, with the forwarding node.
const forwardedHeader = "Harvest-Forwarded-By"

type forwarder struct {
	mgr    *session.Manager
	st     store.Store
	next   http.Handler
	self   string
	events bool          // forward event streams too (not with --nats-follow)
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
	defer cancel()
	go func() {
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

// nodeConfig is serve's several-node configuration: nil unless --node-id
// or --advertise is given. listen is the address it listens on.
// carryMax is session.Config.CarryMax: how big a workspace carried
// between nodes may be, -1 with --shared-data.
func nodeConfig(f serveFlags, listen string) (n *session.NodeConfig, carryMax int64, err error) {
	n, err = nodeOnly(f, listen)
	if err != nil {
		return nil, 0, err
	}
	if n == nil {
		if f.sharedData || f.carryMax != "" {
			return nil, 0, errors.New("--shared-data and --carry-max are for one of several nodes: give --node-id or --advertise too")
		}
		return nil, 0, nil
	}
	switch {
	case f.sharedData && f.carryMax != "":
		return nil, 0, errors.New("--carry-max bounds the workspaces carried between nodes, which --shared-data turns off: give one of them")
	case f.sharedData:
		carryMax = -1
	case f.carryMax != "":
		carryMax, err = sandbox.ParseSize(f.carryMax)
		if err != nil || carryMax <= 0 {
			return nil, 0, fmt.Errorf("--carry-max %q: give a size like 4g (the largest workspace carried between nodes)", f.carryMax)
		}
	}
	return n, carryMax, nil
}

func nodeOnly(f serveFlags, listen string) (*session.NodeConfig, error) {
	if f.nodeID == "" && f.advertise == "" {
		if f.maxSess != 0 {
			return nil, errors.New("--max-sessions bounds one of several nodes: give --node-id or --advertise too (a lone server has no other node to place sessions on)")
		}
		return nil, nil
	}
	if !isPostgresURL(f.store) {
		return nil, errors.New("--node-id/--advertise: several nodes share one PostgreSQL store: give --store postgres://…")
	}
	if f.maxSess < 0 {
		return nil, fmt.Errorf("--max-sessions %d: give how many sessions this node runs at most (0: no bound)", f.maxSess)
	}
	if f.leaseTTL < time.Second {
		return nil, fmt.Errorf("--lease-ttl %s: give at least 1s", f.leaseTTL)
	}
	// Every start is a new owner (store/leases.go): the id gets a random
	// suffix, so a restarted node never renews the leases of the process
	// it replaces (nor of a twin started by mistake with the same name).
	name := f.nodeID
	if name == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "harvest"
		}
		name = host
	}
	var b [3]byte
	rand.Read(b[:])
	n := &session.NodeConfig{ID: name + "-" + hex.EncodeToString(b[:]), Addr: f.advertise, TTL: f.leaseTTL, Capacity: f.maxSess}
	if n.Addr == "" {
		n.Addr = "http://" + listen
	}
	if u, err := url.Parse(n.Addr); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("--advertise %q: give the URL other nodes reach this one at, like http://10.0.0.5:7777", n.Addr)
	}
	return n, nil
}

// addNodeFlags adds serve's several-node flags.
func addNodeFlags(fl *pflag.FlagSet, f *serveFlags) {
	fl.StringVar(&f.nodeID, "node-id", "", "run as one of several nodes on one --store: this node's name (default: the host name); a random suffix makes every start a new owner (see docs/several-machines.md)")
	fl.StringVar(&f.advertise, "advertise", "", "run as one of several nodes on one --store: the URL the other nodes forward this node's sessions' requests to (default http:// and the --listen address)")
	fl.IntVar(&f.maxSess, "max-sessions", 0, "with several nodes: how many sessions this node runs at most (0: no bound); a new session goes to a node with room, and waits (queued) while every node is full")
	fl.BoolVar(&f.sharedData, "shared-data", false, "with several nodes: they share the data directory (one machine, or a shared filesystem), so sessions' workspaces are not carried through the store and another node's box may be reattached")
	fl.StringVar(&f.carryMax, "carry-max", "", "with several nodes: the largest workspace carried through the store to the node that takes a session over, like 4g (default 4g); a larger one is not carried")
	fl.DurationVar(&f.leaseTTL, "lease-ttl", session.DefaultLeaseTTL, "with several nodes: how long a session's lease lasts without renewal, so how soon a dead node's sessions are taken over")
}

// nodeHandler is the API, behind the forwarder with several nodes.
func nodeHandler(api http.Handler, mgr *session.Manager, st store.Store, node *session.NodeConfig, f serveFlags, logger *slog.Logger, stderr io.Writer) http.Handler {
	if node == nil {
		return api
	}
	fmt.Fprintf(stderr, "harvest: node %s of several on the store, advertised at %s\n", node.ID, node.Addr)
	return &forwarder{mgr: mgr, st: st, next: api, self: node.ID, events: !f.natsFollow, every: node.TTL / 3, log: logger.With("component", "forward")}
}
