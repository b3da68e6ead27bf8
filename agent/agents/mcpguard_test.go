package agents

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/agenttest"
	"github.com/harvest-dev/harvest/agent/builtin"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/netguard"
)

// allowing is a guard with the operator's allowances allow.
func allowing(t *testing.T, allow ...string) *netguard.Guard {
	t.Helper()
	g, err := netguard.New(netguard.Config{Allow: allow})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The bridge dials a session's or a repository's server only through the
// guard: one on loopback is refused (a 502 saying why, and the server sees
// no connection) unless the operator allows it; the operator's own
// (--mcp-config) is dialed as given.
func TestMCPBridgeGuard(t *testing.T) {
	var hits atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "upstream")
	}))
	defer upstream.Close()
	wire := testbin.NewTripwire(t)
	servers := []agent.MCPServer{
		{Name: "session", URL: upstream.URL + "/mcp", Source: "the session's mcp_servers"},
		{Name: "wire", URL: "http://" + wire.Addr() + "/mcp", Source: "the session's mcp_servers"},
		{Name: "meta", URL: "http://169.254.169.254/latest/meta-data/", Source: ".mcp.json of repo"},
		{Name: "ops", URL: upstream.URL + "/mcp", Source: "--mcp-config /etc/harvest/mcp.yaml", Operator: true},
	}
	call := func(b *mcpBridge, name string) (int, string) {
		t.Helper()
		box := httptest.NewServer(b)
		defer box.Close()
		req, _ := http.NewRequestWithContext(t.Context(), "POST", box.URL+"/mcp/"+name, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+b.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	b, err := newMCPBridge(servers, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer b.stop()
	for _, name := range []string{"session", "wire"} {
		if code, body := call(b, name); code != http.StatusBadGateway || !strings.Contains(body, "127.0.0.1 is a loopback address") || !strings.Contains(body, "--mcp-allow 127.0.0.1:") {
			t.Errorf("%s, not allowed: %d %s", name, code, body)
		}
	}
	if code, body := call(b, "meta"); code != http.StatusBadGateway || !strings.Contains(body, "169.254.169.254 is a link-local address") {
		t.Errorf("the metadata service: %d %s", code, body)
	}
	if hits.Load() != 0 || wire.Conns(t) != 0 {
		t.Fatalf("a refused server was reached: %d requests, %d connections", hits.Load(), wire.Conns(t))
	}
	if code, body := call(b, "ops"); code != http.StatusOK || body != "upstream" {
		t.Errorf("the operator's server: %d %s", code, body)
	}

	// The operator allows the session's server's address and port.
	b2, err := newMCPBridge(servers, allowing(t, upstream.Listener.Addr().String()), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer b2.stop()
	if code, body := call(b2, "session"); code != http.StatusOK || body != "upstream" {
		t.Errorf("allowed: %d %s", code, body)
	}
	if code, _ := call(b2, "wire"); code != http.StatusBadGateway || wire.Conns(t) != 0 {
		t.Errorf("another port of the allowed address was dialed: %d", code)
	}
	if hits.Load() != 2 {
		t.Errorf("the upstream saw %d requests, want 2", hits.Load())
	}
}

// hostResolver resolves names from a table, the rest not at all.
type hostResolver map[string][]string

func (r hostResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, s := range r[host] {
		out = append(out, netip.MustParseAddr(s))
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

// A repository's .mcp.json server the policy refuses (a dev server on
// localhost, the metadata service, a name that does not resolve) is left
// out with a warning, the session's agent built all the same; a public one
// and a stdio one stay. The operator's allowance lets the dev server in.
func TestRepoMCPGuard(t *testing.T) {
	p := agenttest.Provider(t)
	dev := testbin.NewTripwire(t)
	ws := agenttest.Workspace(t, map[string]string{".mcp.json": `{"mcpServers": {
		"dev": {"type": "http", "url": "http://localhost:` + strconv.Itoa(dev.Port()) + `/mcp"},
		"meta": {"type": "http", "url": "http://169.254.169.254/latest/"},
		"gone": {"type": "http", "url": "https://nowhere.test/mcp"},
		"pub": {"type": "http", "url": "https://mcp.public.test/mcp"},
		"tool": {"command": "python3", "args": ["t.py"]}
	}}`})
	ctx := testbin.Context(t)
	box := agenttest.StartBox(ctx, t, p, ws)
	res := hostResolver{"localhost": {"127.0.0.1", "::1"}, "mcp.public.test": {"203.0.113.7"}}
	wireUp := func(allow ...string) ([]string, string) {
		t.Helper()
		g, err := netguard.New(netguard.Config{Allow: allow, Resolver: res})
		if err != nil {
			t.Fatal(err)
		}
		var log testbin.Buffer
		req := Request{Box: box, Workspaces: []agent.Workspace{{Name: "repo", Path: box.WorkspacePath("repo")}}, MCPGuard: g,
			Logger: slog.New(slog.NewTextHandler(&log, nil))}
		b, servers, err := wireMCP(ctx, req, builtin.Kind)
		if err != nil {
			t.Fatal(err)
		}
		if b != nil {
			b.stop()
		}
		var names []string
		for _, s := range servers {
			names = append(names, s.Name)
		}
		return names, log.String()
	}
	names, log := wireUp()
	if strings.Join(names, " ") != "pub tool" {
		t.Errorf("servers %q, want pub and tool", names)
	}
	for _, want := range []string{"name=dev", "localhost resolves to 127.0.0.1, a loopback address", "name=meta", "169.254.169.254 is a link-local address",
		"name=gone", "nowhere.test does not resolve", "allow it with --mcp-allow"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
	names, _ = wireUp("localhost:" + strconv.Itoa(dev.Port()))
	if strings.Join(names, " ") != "dev pub tool" {
		t.Errorf("with the allowance: servers %q, want dev, pub and tool", names)
	}
	if n := dev.Conns(t); n != 0 {
		t.Errorf("the dev server was dialed %d times while the agent was wired (nothing asked it anything)", n)
	}
}
