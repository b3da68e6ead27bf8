package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/wire"
)

// --mcp-allow's values are checked before anything starts, each mistake
// said with what to write instead.
func TestServeMCPAllowFlag(t *testing.T) {
	t.Setenv("HARVEST_HOME", t.TempDir())
	for in, want := range map[string]string{
		"http://mcp.internal/": "not a URL",
		"10.0.0.1/8":           "write 10.0.0.0/8",
		"*.corp.example":       "no wildcards",
		"mcp.internal:http":    `port "http" is not a TCP port`,
		"fd00::/8:80":          "goes in brackets, [fd00::/8]:8080",
	} {
		code, _, stderr := runCLI(t, "", "serve", "--listen", "127.0.0.1:0", "--mcp-allow", "mcp.internal:8080", "--mcp-allow", in)
		if code != 2 || !strings.Contains(stderr, "--mcp-allow: ") || !strings.Contains(stderr, want) || !strings.Contains(stderr, "a host name, an IP address or a CIDR network") {
			t.Errorf("--mcp-allow %q: exit %d, stderr %q, want exit 2 saying %q", in, code, stderr, want)
		}
	}
}

// A real harvest serve refuses a session's MCP server on loopback (a 400,
// nothing dialed) unless --mcp-allow names its address and port: then the
// session is created and its agent dials it.
func TestServeMCPAllow(t *testing.T) {
	e := newServeEnv(t)
	allowed, other := testbin.NewTripwire(t), testbin.NewTripwire(t)
	s := e.start("--mcp-allow", allowed.Addr())
	c := e.client(s)
	repo := filepath.Join(testbin.TempDir(t), "proj")
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644)
	ctx := testbin.Context(t)
	create := func(addr string) (*wire.View, error) {
		return c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "msg hi",
			MCPServers: []wire.MCPServer{{Name: "dev", URL: "http://" + addr + "/mcp"}}})
	}
	if _, err := create(other.Addr()); client.StatusOf(err) != 400 || !strings.Contains(err.Error()+strings.Join(errDetails(err), " "), "is a loopback address") {
		t.Fatalf("a loopback server not allowed: %v", err)
	}
	if n := other.Conns(t); n != 0 {
		t.Fatalf("the refused server saw %d connections", n)
	}
	v, err := create(allowed.Addr())
	if err != nil {
		t.Fatalf("the allowed server: %v", err)
	}
	// The tripwire is no MCP server: the agent reaches it, then fails.
	follow(t, c, v.ID, 0, "the session failing", func(ev event.Event) bool {
		st, ok := ev.Data.(event.SessionState)
		return ok && st.State == "failed"
	})
	if n := allowed.Conns(t); n == 0 {
		t.Fatal("the allowed server was never dialed")
	}
}

// errDetails is a client error's details.
func errDetails(err error) []string {
	if ce, ok := err.(*client.Error); ok {
		return ce.Details
	}
	return nil
}

// harvest run checks its --mcp-allow the same way, before any box starts.
func TestRunMCPAllowFlag(t *testing.T) {
	t.Setenv("HARVEST_HOME", t.TempDir())
	code, _, stderr := runCLI(t, "", "run", "--repo", t.TempDir(), "--mcp-allow", "localhost:3000", "--mcp-allow", "http://localhost:3000/", "fix it")
	if code != 2 || !strings.Contains(stderr, `--mcp-allow: "http://localhost:3000/": not a URL`) {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}
