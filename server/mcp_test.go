package server_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/wire"
)

// The acceptance: a session's MCP server at loopback (the host
// itself, by address or by a name resolving there), the metadata service
// or a private address is a 400 for a user token, and the admin token's
// alike (the operator allows addresses with --mcp-allow, or lists the
// server in --mcp-config); no session is stored and nothing is dialed: a
// listener at the loopback URLs' port sees no connection.
func TestCreateRefusesInternalMCPServers(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	tw := testbin.NewTripwire(t)
	port := strconv.Itoa(tw.Port())
	for _, c := range []struct{ url, says string }{
		{"http://127.0.0.1:" + port + "/mcp", "127.0.0.1 is a loopback address"},
		{"http://localhost:" + port + "/mcp", "localhost does not resolve to public addresses only"},
		{"http://[::ffff:127.0.0.1]:" + port + "/mcp", "::ffff:127.0.0.1 is a loopback address"},
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"},
		{"http://[fd00:ec2::254]/latest/meta-data/", "fd00:ec2::254 is a metadata address"},
		{"http://10.0.0.1/mcp", "10.0.0.1 is a private address"},
		{"https://192.168.1.20:8443/mcp", "192.168.1.20 is a private address"},
	} {
		for who, cl := range map[string]*client.Client{"alice": e.AliceC, "admin": e.AdminC} {
			_, err := cl.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: e.Repo}}, Prompt: "msg hi",
				MCPServers: []wire.MCPServer{{Name: "x", URL: c.url}}})
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status != 400 || ce.Code != wire.CodeInvalid {
				t.Errorf("%s, %s: %v, want a 400", who, c.url, err)
				continue
			}
			all := ce.Message + "\n" + strings.Join(ce.Details, "\n")
			if !strings.Contains(all, `mcp_servers[0] ("x"): url `+c.url) || !strings.Contains(all, c.says) || !strings.Contains(all, "harvest serve --mcp-allow") {
				t.Errorf("%s, %s: the 400 says %q, want %q and how to allow it", who, c.url, all, c.says)
			}
		}
	}
	for who, cl := range map[string]*client.Client{"alice": e.AliceC, "admin": e.AdminC} {
		if list, err := cl.ListSessions(ctx, client.ListOptions{}); err != nil || len(list) != 0 {
			t.Errorf("%s has %v sessions (%v), want none", who, list, err)
		}
	}
	if n := tw.Conns(t); n != 0 {
		t.Fatalf("the listener at the refused URLs' port saw %d connections", n)
	}
}
