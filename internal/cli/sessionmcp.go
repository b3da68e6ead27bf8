package cli

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/wire"
)

// mcpFlags are harvest session new's MCP servers for the session:
//
//	--mcp NAME=URL                  a remote (streamable HTTP) server
//	--mcp-stdio NAME='CMD ARGS...'  a stdio server run in the box (split on spaces)
//	--mcp-secret NAME:HEADER=SECRET header HEADER of remote server NAME is the
//	                                Harvest secret SECRET (harvest secret set)
//
// A command line never carries a credential: a header can only name a
// secret. What the flags can say is checked here (exit 2); the server
// checks the rest (names the server's config uses, secrets that are set).
type mcpFlags struct {
	remote, stdio, secret []string
}

func (f *mcpFlags) add(fl *pflag.FlagSet) {
	fl.StringArrayVar(&f.remote, "mcp", nil, "an MCP server for the session, NAME=URL (streamable HTTP, reached from the host; repeatable)")
	fl.StringArrayVar(&f.stdio, "mcp-stdio", nil, "an MCP server run in the box, NAME='COMMAND ARGS...' (split on spaces; repeatable)")
	fl.StringArrayVar(&f.secret, "mcp-secret", nil, "a header of an --mcp server from a Harvest secret, NAME:HEADER=SECRET, like github:Authorization=GITHUB_MCP (repeatable)")
}

var secretName = regexp.MustCompile(`^[A-Z_][A-Z0-9_]{0,127}$`)

// servers are the flags' servers, in the order given (remote first).
func (f *mcpFlags) servers() ([]wire.MCPServer, error) {
	var out []wire.MCPServer
	seen := map[string]bool{}
	add := func(flag, v string, s wire.MCPServer) error {
		if s.Name == "" {
			return fmt.Errorf("%s %q: give NAME=..., like %s", flag, v, mcpExample(flag))
		}
		if seen[s.Name] {
			return fmt.Errorf("%s %q: two MCP servers are named %q", flag, v, s.Name)
		}
		seen[s.Name] = true
		out = append(out, s)
		return nil
	}
	for _, v := range f.remote {
		name, url, _ := strings.Cut(v, "=")
		if url == "" {
			name = ""
		}
		if err := add("--mcp", v, wire.MCPServer{Name: name, URL: url}); err != nil {
			return nil, err
		}
	}
	for _, v := range f.stdio {
		name, cmd, _ := strings.Cut(v, "=")
		args := strings.Fields(cmd)
		if len(args) == 0 {
			name = ""
		}
		if err := add("--mcp-stdio", v, wire.MCPServer{Name: name, Command: args}); err != nil {
			return nil, err
		}
	}
	for _, v := range f.secret {
		target, secret, ok := strings.Cut(v, "=")
		name, header, ok2 := strings.Cut(target, ":")
		if !ok || !ok2 || name == "" || header == "" {
			return nil, fmt.Errorf("--mcp-secret %q: give NAME:HEADER=SECRET, like %s", v, mcpExample("--mcp-secret"))
		}
		if !secretName.MatchString(secret) {
			return nil, fmt.Errorf("--mcp-secret %q: %q is not a secret's name (A-Z, 0-9 and _, like GITHUB_MCP): store the value with harvest secret set and name it here", v, secret)
		}
		i := slices.IndexFunc(out, func(s wire.MCPServer) bool { return s.Name == name })
		if i < 0 || out[i].URL == "" {
			return nil, fmt.Errorf("--mcp-secret %q: no --mcp server is named %q (headers are for remote servers)", v, name)
		}
		if out[i].Headers == nil {
			out[i].Headers = map[string]string{}
		}
		if _, dup := out[i].Headers[header]; dup {
			return nil, fmt.Errorf("--mcp-secret %q: %s of %q is given twice", v, header, name)
		}
		out[i].Headers[header] = "${secret:" + secret + "}"
	}
	checked := make([]agent.MCPServer, len(out))
	for i, s := range out {
		checked[i] = agent.MCPServer{Name: s.Name, Command: s.Command, URL: s.URL, Headers: s.Headers, Source: "the command line"}
	}
	if err := agent.CheckMCP(checked); err != nil {
		return nil, err
	}
	return out, nil
}

func mcpExample(flag string) string {
	switch flag {
	case "--mcp":
		return "--mcp docs=https://mcp.example.com/mcp"
	case "--mcp-stdio":
		return "--mcp-stdio lint='python3 tools/lint_mcp.py'"
	}
	return "--mcp-secret github:Authorization=GITHUB_MCP"
}
