package builtin

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/netguard"
)

// mcpEndpoint is a streamable-HTTP MCP server with one tool, counting
// the requests that carry auth as their Authorization header and those
// that do not.
func mcpEndpoint(t *testing.T, auth string) (*httptest.Server, *atomic.Int32, *atomic.Int32) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "fact"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a fact"}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	var authed, bare atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/old" {
			http.Redirect(w, r, "/mcp", http.StatusTemporaryRedirect)
			return
		}
		if r.Header.Get("Authorization") != auth {
			bare.Add(1)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		authed.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		ts.Close()
		for ss := range srv.Sessions() {
			ss.Close()
		}
	})
	return ts, &authed, &bare
}

func guardAllowing(t *testing.T, allow ...string) *netguard.Guard {
	t.Helper()
	g, err := netguard.New(netguard.Config{Allow: allow})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The in-process client reaches a remote server that is not the
// operator's only through the guard: on loopback it is refused with no
// connection made, unless allowed; the operator's is reached as given.
func TestRemoteMCPGuarded(t *testing.T) {
	ctx := testbin.Context(t)
	log := slog.New(slog.DiscardHandler)
	ts, authed, bare := mcpEndpoint(t, "Bearer tok")
	wire := testbin.NewTripwire(t)
	headers := map[string]string{"Authorization": "Bearer tok"}
	for _, url := range []string{ts.URL + "/mcp", "http://" + wire.Addr() + "/mcp", "http://localhost:" + strings.TrimPrefix(wire.Addr(), "127.0.0.1:") + "/mcp"} {
		_, err := connectMCP(ctx, nil, []agent.MCPServer{{Name: "rem", URL: url, Headers: headers, Source: "the session's mcp_servers"}}, nil, "/", nil, log)
		if err == nil || !strings.Contains(err.Error(), `MCP server "rem" (the session's mcp_servers)`) || !strings.Contains(err.Error(), "harvest serve --mcp-allow") {
			t.Errorf("%s, not allowed: %v", url, err)
		}
	}
	if authed.Load()+bare.Load() != 0 || wire.Conns(t) != 0 {
		t.Fatalf("a refused server was reached: %d requests, %d connections", authed.Load()+bare.Load(), wire.Conns(t))
	}
	for _, c := range []struct {
		name     string
		operator bool
		guard    *netguard.Guard
	}{
		{"allowed", false, guardAllowing(t, ts.Listener.Addr().String())},
		{"the operator's", true, nil},
	} {
		m, err := connectMCP(ctx, nil, []agent.MCPServer{{Name: "rem", URL: ts.URL + "/mcp", Headers: headers, Operator: c.operator}}, c.guard, "/", nil, log)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(m.tools) != 1 || m.tools[0].Name() != "mcp__rem__fact" {
			t.Errorf("%s: tools %v", c.name, m.tools)
		}
		if err := m.close(ctx); err != nil {
			t.Errorf("%s: closing: %v", c.name, err)
		}
	}
}

// A redirect within the server's origin is followed with its headers; one
// to another origin is not followed at all (the other host gets neither
// the headers nor the request), even where the guard would dial it.
func TestRemoteMCPRedirects(t *testing.T) {
	ctx := testbin.Context(t)
	log := slog.New(slog.DiscardHandler)
	ts, authed, _ := mcpEndpoint(t, "Bearer tok")
	var other, otherAuth atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		other.Add(1)
		if r.Header.Get("Authorization") != "" {
			otherAuth.Add(1)
		}
	}))
	defer elsewhere.Close()
	jump := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/steal", http.StatusTemporaryRedirect)
	}))
	defer jump.Close()
	g := guardAllowing(t, "127.0.0.1") // every port: only the origin rule stops the jump
	headers := map[string]string{"Authorization": "Bearer tok"}

	m, err := connectMCP(ctx, nil, []agent.MCPServer{{Name: "rem", URL: ts.URL + "/old", Headers: headers}}, g, "/", nil, log)
	if err != nil {
		t.Fatalf("a same-origin redirect: %v", err)
	}
	m.close(ctx)
	if authed.Load() == 0 {
		t.Fatal("the redirected requests came without the server's headers")
	}

	for _, operator := range []bool{false, true} {
		_, err = connectMCP(ctx, nil, []agent.MCPServer{{Name: "rem", URL: jump.URL + "/mcp", Headers: headers, Operator: operator}}, g, "/", nil, log)
		if err == nil || !strings.Contains(err.Error(), "redirects to "+elsewhere.URL+", another origin") {
			t.Errorf("operator %v: a cross-origin redirect: %v", operator, err)
		}
	}
	if other.Load() != 0 || otherAuth.Load() != 0 {
		t.Fatalf("the other origin got %d requests, %d with the server's Authorization", other.Load(), otherAuth.Load())
	}

	// Below the client, the transport sends the headers to the origin only.
	rt := headerTransport(originOf(mustURL(t, ts.URL)), headers, http.DefaultTransport)
	req, _ := http.NewRequestWithContext(ctx, "GET", elsewhere.URL+"/x", nil)
	if _, err := rt.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "its headers are not sent there") || other.Load() != 0 {
		t.Errorf("the transport to another origin: %v (it got %d requests)", err, other.Load())
	}
	for in, want := range map[string]string{
		"https://H.example/mcp":     "https://h.example:443",
		"http://h.example/mcp":      "http://h.example:80",
		"http://h.example:8080/":    "http://h.example:8080",
		"http://[::1]:9/":           "http://[::1]:9",
		"HTTPS://h.example:443/mcp": "https://h.example:443",
	} {
		if got := originOf(mustURL(t, in)); got != want {
			t.Errorf("originOf(%s) = %s, want %s", in, got, want)
		}
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
