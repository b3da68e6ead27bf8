package agents

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/base/boxhttp"
	"github.com/harvest-dev/harvest/netguard"
	"github.com/harvest-dev/harvest/sandbox"
)

// The MCP bridge is how an agent reaches its remote and host-side MCP
// servers (agent.MCPServer) without their credentials entering the box,
// the way the model proxy keeps the model key out:
//
//	agent in box ──► 127.0.0.1:N/mcp/NAME (+ session token) ══ agentd ══► host: bridge ──► URL (+ Headers) | Handler
//
// One bridge per agent serves every such server under /mcp/NAME. It checks
// the session's bearer token (a random one per agent, worth nothing off
// that listener), drops it, and proxies to the server's URL with its
// Headers added on the host, or calls its Handler. Responses stream (a
// server's SSE flushes through as it comes). An agent whose loop runs on
// the host (the builtin one) gets the same host side as a Handler per
// server, called in-process: nothing is listened on in the box for it.
//
// The bridge dials a remote server the operator listed (--mcp-config,
// agent.MCPServer.Operator) as given; every other one (a session's, a
// repository's) only through the guard (package netguard), at every
// connection: no loopback, private, link-local or metadata address unless
// the operator allows it, the checked address the one dialed, and no
// proxy from the environment. The reverse proxy follows no redirect: a
// redirect goes back to the agent, whose next request comes to the
// bridge and is sent to the server's URL again.

// mcpBridge serves an agent's remote and host MCP servers.
type mcpBridge struct {
	token   string
	servers map[string]http.Handler
	names   []string
	// operator dials the operator's servers, guarded every other remote
	// one; each made when first needed.
	operator, guarded *http.Transport

	// Set once served in a box.
	ln     *sandbox.Listener
	cancel context.CancelFunc
	served chan struct{}
}

// newMCPBridge makes the host side of the bridge for servers' remote and
// host ones; nil when there are none. guard dials the remote servers that
// are not the operator's (nil: netguard's default policy).
func newMCPBridge(servers []agent.MCPServer, guard *netguard.Guard, log *slog.Logger) (*mcpBridge, error) {
	b := &mcpBridge{servers: map[string]http.Handler{}}
	for _, s := range servers {
		switch s.Kind() {
		case agent.MCPHost:
			b.servers[s.Name] = s.Handler
		case agent.MCPRemote:
			if s.Operator && b.operator == nil {
				// The operator's environment's proxy, if any, applies.
				b.operator = http.DefaultTransport.(*http.Transport).Clone()
			}
			if !s.Operator && b.guarded == nil {
				b.guarded = guard.Transport()
			}
			tr := b.guarded
			if s.Operator {
				tr = b.operator
			}
			h, err := b.proxyTo(s, tr, log)
			if err != nil {
				return nil, err
			}
			b.servers[s.Name] = h
		default:
			continue
		}
		b.names = append(b.names, s.Name)
	}
	if len(b.names) == 0 {
		return nil, nil
	}
	sort.Strings(b.names)
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, err
	}
	b.token = "harvest-mcp-" + hex.EncodeToString(raw[:])
	return b, nil
}

// proxyTo is a reverse proxy to s.URL that adds s.Headers; the request
// reaches exactly s.URL (plus the box's query), whatever path it came on.
func (b *mcpBridge) proxyTo(s agent.MCPServer, tr *http.Transport, log *slog.Logger) (http.Handler, error) {
	target, err := url.Parse(s.URL)
	if err != nil {
		return nil, fmt.Errorf("MCP server %q: url: %w", s.Name, err)
	}
	headers := make(http.Header, len(s.Headers))
	for k, v := range s.Headers {
		headers.Set(k, v)
	}
	name := s.Name
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			u := *target
			u.RawQuery = pr.In.URL.RawQuery
			pr.Out.URL = &u
			pr.Out.Host = ""
			pr.Out.Header.Del("Cookie")
			for k, v := range headers {
				pr.Out.Header[k] = slices.Clone(v)
			}
		},
		Transport:     tr,
		FlushInterval: -1, // streamed responses (SSE) flow as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn("the MCP bridge could not reach a server", "server", name, "err", netguard.Detail(err))
			http.Error(w, fmt.Sprintf("Harvest's MCP bridge could not reach MCP server %q: %v", name, err), http.StatusBadGateway)
		},
	}, nil
}

// ServeHTTP serves the box side: /mcp/NAME with the session's token.
func (b *mcpBridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(b.token)) != 1 {
		http.Error(w, "Harvest's MCP bridge: send the session's token as Authorization: Bearer (it is in the agent's MCP configuration)", http.StatusUnauthorized)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/mcp/")
	name, _, _ := strings.Cut(rest, "/")
	h := b.servers[name]
	if !ok || h == nil {
		http.Error(w, fmt.Sprintf("Harvest's MCP bridge has no server at %s: this agent's servers are /mcp/%s", r.URL.Path, strings.Join(b.names, ", /mcp/")), http.StatusNotFound)
		return
	}
	r = r.Clone(r.Context())
	r.Header.Del("Authorization")
	h.ServeHTTP(w, r)
}

// serveInBox serves the bridge on a loopback listener in box and returns
// its base URL there.
func (b *mcpBridge) serveInBox(ctx context.Context, box *sandbox.Sandbox, session string, log *slog.Logger) (string, error) {
	ln, err := box.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("bridging the MCP servers into the box: %w", err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.ln, b.cancel, b.served = ln, cancel, make(chan struct{})
	go func() {
		defer close(b.served)
		if err := boxhttp.Serve(sctx, ln, b, boxhttp.Options{Name: "MCP bridge", Logger: log}); err != nil && sctx.Err() == nil {
			log.Warn("serving the MCP bridge in the box stopped", "session", session, "err", err)
		}
	}()
	return "http://" + ln.Addr().String(), nil
}

// forKind is servers as a kind uses them (see agent.Deps.MCP): base is
// the bridge's URL in the box, "" for a kind whose loop runs on the host.
func (b *mcpBridge) forKind(servers []agent.MCPServer, base string) []agent.MCPServer {
	out := make([]agent.MCPServer, 0, len(servers))
	for _, s := range servers {
		if s.Kind() == agent.MCPStdio || b == nil {
			out = append(out, s)
			continue
		}
		v := agent.MCPServer{Name: s.Name, Source: s.Source}
		if base == "" {
			v.Handler = b.servers[s.Name]
		} else {
			v.URL = base + "/mcp/" + s.Name
			v.Headers = map[string]string{"Authorization": "Bearer " + b.token}
		}
		out = append(out, v)
	}
	return out
}

func (b *mcpBridge) stop() {
	if b.cancel != nil {
		b.cancel()
		b.ln.Close()
		<-b.served
	}
	for _, tr := range []*http.Transport{b.operator, b.guarded} {
		if tr != nil {
			tr.CloseIdleConnections()
		}
	}
}
