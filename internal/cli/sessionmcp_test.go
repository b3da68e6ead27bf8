package cli

import (
	"reflect"
	"testing"

	"github.com/harvest-dev/harvest/wire"
)

// The session's MCP flags become the request's mcp_servers: a header is
// only ever a ${secret:NAME} reference. (Mistakes: TestServeSessionBadInput.)
func TestSessionMCPFlags(t *testing.T) {
	f := mcpFlags{
		remote: []string{"github=https://api.githubcopilot.com/mcp/?x=1"},
		stdio:  []string{"lint=python3  tools/lint_mcp.py --strict"},
		secret: []string{"github:Authorization=GITHUB_MCP", "github:X-Team=TEAM"},
	}
	got, err := f.servers()
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.MCPServer{
		{Name: "github", URL: "https://api.githubcopilot.com/mcp/?x=1", Headers: map[string]string{"Authorization": "${secret:GITHUB_MCP}", "X-Team": "${secret:TEAM}"}},
		{Name: "lint", Command: []string{"python3", "tools/lint_mcp.py", "--strict"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if got, err := (&mcpFlags{}).servers(); err != nil || got != nil {
		t.Fatalf("no flags: %v, %v", got, err)
	}
}
