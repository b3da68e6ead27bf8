package agents

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strings"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/sandbox"
)

// maxMCPJSON bounds a repository's .mcp.json.
const maxMCPJSON = 256 << 10

// RepoMCP reads the MCP servers the workspaces list in their .mcp.json
// (Claude Code's project file: {"mcpServers": {NAME: {command, args, env} |
// {type: "http", url, headers}}}), through the box: nothing of the
// repository runs or is resolved on the host. A stdio server runs in its
// repository's directory. A remote one gets no credentials but what the
// file itself says (it is the repository's, visible in the box anyway); a
// header naming a variable (${VAR}) is left out, since Harvest expands none.
// A server of a transport Harvest does not bridge (sse) is left out with a
// warning.
func RepoMCP(ctx context.Context, box *sandbox.Sandbox, ws []agent.Workspace, log *slog.Logger) ([]agent.MCPServer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var out []agent.MCPServer
	for _, w := range ws {
		p := path.Join(w.Path, ".mcp.json")
		info, err := box.Stat(ctx, p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s in the box: %w", p, err)
		}
		if info.Size > maxMCPJSON {
			return nil, fmt.Errorf(".mcp.json of %s is %d bytes: at most %d", w.Name, info.Size, maxMCPJSON)
		}
		b, err := box.ReadFile(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("reading %s in the box: %w", p, err)
		}
		servers, warnings, err := ParseMCPJSON(b, ".mcp.json of "+w.Name, w.Path)
		if err != nil {
			return nil, err
		}
		for _, m := range warnings {
			log.Warn(m)
		}
		out = append(out, servers...)
	}
	return out, nil
}

// mcpJSONServer is a server in Claude Code's .mcp.json.
type mcpJSONServer struct {
	Type    string            `json:"type"`
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

// ParseMCPJSON parses a .mcp.json (source names it in errors); its stdio
// servers run in dir. It returns the servers, sorted by name, and what it
// left out and why.
func ParseMCPJSON(b []byte, source, dir string) ([]agent.MCPServer, []string, error) {
	var f struct {
		MCPServers map[string]json.RawMessage `json:"mcpServers"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, nil, fmt.Errorf("%s is not valid JSON: %w (its shape: {\"mcpServers\": {\"NAME\": {\"command\": ..., \"args\": [...]}}})", source, err)
	}
	names := make([]string, 0, len(f.MCPServers))
	for n := range f.MCPServers {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []agent.MCPServer
	var warnings []string
	for _, n := range names {
		var c mcpJSONServer
		dec := json.NewDecoder(bytes.NewReader(f.MCPServers[n]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return nil, nil, fmt.Errorf("%s: server %q: %w (a server has command, args and env, or type \"http\", url and headers)", source, n, err)
		}
		s := agent.MCPServer{Name: n, Source: source}
		switch c.Type {
		case "", "stdio":
			if c.Command == "" {
				return nil, nil, fmt.Errorf("%s: server %q has no command (a stdio server) nor type \"http\" and a url", source, n)
			}
			s.Command = append([]string{c.Command}, c.Args...)
			s.Env, s.Dir = c.Env, dir
		case "http":
			s.URL = c.URL
			for k, v := range c.Headers {
				if strings.Contains(v, "${") {
					warnings = append(warnings, fmt.Sprintf("%s: server %q: header %s names a variable, which Harvest does not expand: left out", source, n, k))
					continue
				}
				if s.Headers == nil {
					s.Headers = map[string]string{}
				}
				s.Headers[k] = v
			}
		case "sse":
			warnings = append(warnings, fmt.Sprintf("%s: server %q uses the legacy SSE transport, which Harvest does not bridge: left out (use type \"http\", streamable HTTP)", source, n))
			continue
		default:
			return nil, nil, fmt.Errorf("%s: server %q has type %q: use \"stdio\" (or none, with a command) or \"http\"", source, n, c.Type)
		}
		out = append(out, s)
	}
	return out, warnings, agent.CheckMCP(out)
}
