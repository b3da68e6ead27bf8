package agent

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// Every way an MCP server list can be wrong is refused, naming the server,
// where it was listed, and what to do.
func TestCheckMCP(t *testing.T) {
	h := http.NotFoundHandler()
	for _, c := range []struct {
		name    string
		servers []MCPServer
		want    string // "" valid
	}{
		{"stdio", []MCPServer{{Name: "docs", Command: []string{"python3", "s.py"}, Env: map[string]string{"A": "1"}, Dir: "/workspace/r"}}, ""},
		{"remote", []MCPServer{{Name: "gh", URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer x"}}}, ""},
		{"host", []MCPServer{{Name: "memory", Handler: h}}, ""},
		{"bad name", []MCPServer{{Name: "Docs", Command: []string{"x"}}}, `MCP server "Docs" (the request): the name must be`},
		{"double underscore", []MCPServer{{Name: "a__b", Command: []string{"x"}}}, "no __"},
		{"empty name", []MCPServer{{Command: []string{"x"}}}, "the name must be"},
		{"none", []MCPServer{{Name: "a"}}, "give exactly one of command"},
		{"two kinds", []MCPServer{{Name: "a", Command: []string{"x"}, URL: "http://h/"}}, "give exactly one of command"},
		{"empty command", []MCPServer{{Name: "a", Command: []string{" "}}}, "command[0] is empty"},
		{"relative dir", []MCPServer{{Name: "a", Command: []string{"x"}, Dir: "sub"}}, "absolute path in the box"},
		{"headers on stdio", []MCPServer{{Name: "a", Command: []string{"x"}, Headers: map[string]string{"A": "b"}}}, "headers are for a url server"},
		{"env on url", []MCPServer{{Name: "a", URL: "http://h/", Env: map[string]string{"A": "b"}}}, "env and dir are for a stdio server"},
		{"scheme", []MCPServer{{Name: "a", URL: "ftp://h/"}}, "absolute http:// or https:// URL"},
		{"relative url", []MCPServer{{Name: "a", URL: "/mcp"}}, "absolute http:// or https:// URL"},
		{"userinfo", []MCPServer{{Name: "a", URL: "https://u:p@h/"}}, "without credentials in it"},
		{"header name", []MCPServer{{Name: "a", URL: "https://h/", Headers: map[string]string{"Bad Name": "x"}}}, "must be an HTTP token"},
		{"header value", []MCPServer{{Name: "a", URL: "https://h/", Headers: map[string]string{"X": "a\r\nb"}}}, "value one line"},
		{"duplicate", []MCPServer{
			{Name: "docs", Command: []string{"x"}, Source: ".mcp.json of repo"},
			{Name: "docs", URL: "https://h/", Source: "the server's --mcp-config"},
		}, `two MCP servers are named "docs" (.mcp.json of repo and the server's --mcp-config)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckMCP(c.servers)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
	many := make([]MCPServer, MaxMCPServers+1)
	if err := CheckMCP(many); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("too many servers: %v", err)
	}
}

// MCPJSON is Claude Code's format; a stdio server outside the CLI's
// directory is run in its own, and a host server cannot be given to a
// CLI directly.
func TestMCPJSON(t *testing.T) {
	b, err := MCPJSON([]MCPServer{
		{Name: "here", Command: []string{"python3", "s.py"}, Env: map[string]string{"K": "v"}, Dir: "/workspace/a"},
		{Name: "there", Command: []string{"node", "t.js"}, Dir: "/workspace/b"},
		{Name: "far", URL: "http://127.0.0.1:5/mcp/far", Headers: map[string]string{"Authorization": "Bearer tok"}},
	}, "/workspace/a")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]map[string]map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	s := got["mcpServers"]
	if s["here"]["type"] != "stdio" || s["here"]["command"] != "python3" || s["here"]["args"].([]any)[0] != "s.py" || s["here"]["env"].(map[string]any)["K"] != "v" {
		t.Errorf("stdio server: %v", s["here"])
	}
	if args := s["there"]["args"].([]any); s["there"]["command"] != "sh" || args[2] != "/workspace/b" || args[3] != "node" {
		t.Errorf("stdio server in another directory: %v", s["there"])
	}
	if s["far"]["type"] != "http" || s["far"]["url"] != "http://127.0.0.1:5/mcp/far" || s["far"]["headers"].(map[string]any)["Authorization"] != "Bearer tok" {
		t.Errorf("remote server: %v", s["far"])
	}
	if _, err := MCPJSON([]MCPServer{{Name: "memory", Handler: http.NotFoundHandler()}}, "/"); err == nil {
		t.Error("a host server was written into a CLI's config")
	}
}
