package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
)

// MCPServer is a Model Context Protocol server an agent may use, as the
// caller (a session, a run, an agent definition, the server's config)
// lists it. It is one of three kinds:
//
//   - stdio: Command runs inside the box (never on the host), started by
//     the agent or its CLI, speaking MCP on its stdin and stdout;
//   - remote: URL is a streamable-HTTP MCP endpoint reached from the
//     host, with Headers (credentials: they stay on the host) added there;
//   - host: Handler is an MCP endpoint Harvest itself serves on the host
//     (the per-repository memory), reached like a remote one.
//
// A remote or host server reaches the box only through a bridge the
// registry (agent/agents) serves on a loopback port inside the box, which
// takes a per-session token and adds the server's credentials on the
// host, as the model proxy does: the box never sees Headers.
type MCPServer struct {
	// Name identifies the server to the agent (its tools are offered as
	// NAME's): [a-z][a-z0-9_-]*, unique among an agent's servers.
	Name string `json:"name"`
	// Command and Env: a stdio server (Command[0] is looked up in the
	// box's PATH; Env is added to its environment). Dir is its working
	// directory in the box ("" the first workspace).
	Command []string          `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Dir     string            `json:"dir,omitempty"`
	// URL and Headers: a remote server.
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"-"`
	// Handler: a server Harvest serves on the host.
	Handler http.Handler `json:"-"`
	// Source says where the server was listed ("the session", "the
	// server's --mcp-config", ".mcp.json of REPO"), for errors.
	Source string `json:"-"`
	// Operator: the server's operator listed this remote server (harvest
	// serve --mcp-config; agents.LoadMCPConfig sets it), so it is dialed
	// as given. Every other remote server (a session's, a repository's
	// .mcp.json) is dialed only through the address policy (package
	// netguard: no loopback, private, link-local or metadata addresses
	// unless the operator allows them). Never set from a request.
	Operator bool `json:"-"`
}

// Kinds of MCP server, as MCPServer.Kind reports them.
const (
	MCPStdio  = "stdio"
	MCPRemote = "remote"
	MCPHost   = "host"
)

// Kind is the server's kind: MCPStdio, MCPRemote or MCPHost.
func (s MCPServer) Kind() string {
	switch {
	case s.Handler != nil:
		return MCPHost
	case s.URL != "":
		return MCPRemote
	}
	return MCPStdio
}

// MCPToolName is the name a server's tool is offered under: Claude Code's
// mcp__SERVER__TOOL.
func MCPToolName(server, tool string) string { return "mcp__" + server + "__" + tool }

// MaxMCPServers bounds an agent's MCP servers.
const MaxMCPServers = 32

var mcpName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,47}$`)

// header names are HTTP tokens.
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// CheckMCP validates an agent's MCP servers: each is exactly one kind, with
// the fields of its kind only, and names are unique. Errors name the server
// and where it was listed, and say what to fix.
func CheckMCP(servers []MCPServer) error {
	if len(servers) > MaxMCPServers {
		return fmt.Errorf("%d MCP servers: at most %d", len(servers), MaxMCPServers)
	}
	var errs []error
	seen := map[string]MCPServer{}
	for _, s := range servers {
		if err := s.check(); err != nil {
			errs = append(errs, err)
		}
		if prev, dup := seen[s.Name]; dup && s.Name != "" {
			errs = append(errs, fmt.Errorf("two MCP servers are named %q (%s and %s): rename or remove one", s.Name, sourceOf(prev), sourceOf(s)))
		}
		seen[s.Name] = s
	}
	return errors.Join(errs...)
}

func sourceOf(s MCPServer) string {
	if s.Source == "" {
		return "the request"
	}
	return s.Source
}

func (s MCPServer) check() error {
	where := fmt.Sprintf("MCP server %q (%s)", s.Name, sourceOf(s))
	if !mcpName.MatchString(s.Name) || strings.Contains(s.Name, "__") {
		return fmt.Errorf("%s: the name must be 1 to 48 lowercase letters, digits, - or _ (no __), starting with a letter, like \"docs\"", where)
	}
	n := 0
	for _, set := range []bool{len(s.Command) > 0, s.URL != "", s.Handler != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("%s: give exactly one of command (a stdio server run in the box) or url (a streamable-HTTP server)", where)
	}
	switch s.Kind() {
	case MCPStdio:
		if strings.TrimSpace(s.Command[0]) == "" {
			return fmt.Errorf("%s: command[0] is empty: it is the program to run, looked up in the box's PATH", where)
		}
		for i, a := range s.Command {
			if strings.ContainsRune(a, 0) {
				return fmt.Errorf("%s: command[%d] contains a NUL byte", where, i)
			}
		}
		for k, v := range s.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
				return fmt.Errorf("%s: env %q: names are non-empty without = or NUL, values without NUL", where, k)
			}
		}
		if s.Dir != "" && !path.IsAbs(s.Dir) {
			return fmt.Errorf("%s: dir %q must be an absolute path in the box (or empty: the first workspace)", where, s.Dir)
		}
		if len(s.Headers) > 0 {
			return fmt.Errorf("%s: headers are for a url server; a stdio server gets env", where)
		}
	default:
		if len(s.Env) > 0 || s.Dir != "" {
			return fmt.Errorf("%s: env and dir are for a stdio server (command); a url server gets headers", where)
		}
		if s.Handler != nil {
			break
		}
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return fmt.Errorf("%s: url %q: give an absolute http:// or https:// URL without credentials in it (put them in headers)", where, s.URL)
		}
		for k, v := range s.Headers {
			if !headerName.MatchString(k) || strings.ContainsAny(v, "\r\n\x00") {
				return fmt.Errorf("%s: header %q: the name must be an HTTP token and the value one line", where, k)
			}
		}
	}
	return nil
}

// MCPArgv is the command line a stdio server runs with in the box: its
// Command, run in Dir when that is not defaultDir.
func (s MCPServer) MCPArgv(defaultDir string) []string {
	if s.Dir == "" || s.Dir == defaultDir {
		return s.Command
	}
	return append([]string{"sh", "-c", `cd "$0" && exec "$@"`, s.Dir}, s.Command...)
}

// MCPJSON is servers in Claude Code's MCP config format (its --mcp-config
// and a repository's .mcp.json): {"mcpServers": {NAME: {"type": "stdio",
// command, args, env} | {"type": "http", url, headers}}}. A stdio server
// runs in its Dir (workdir: where the CLI runs). A Handler server cannot
// be given to a CLI (the registry bridges it to a URL first).
func MCPJSON(servers []MCPServer, workdir string) ([]byte, error) {
	type entry struct {
		Type    string            `json:"type"`
		Command string            `json:"command,omitempty"`
		Args    []string          `json:"args,omitempty"`
		Env     map[string]string `json:"env,omitempty"`
		URL     string            `json:"url,omitempty"`
		Headers map[string]string `json:"headers,omitempty"`
	}
	m := map[string]entry{}
	for _, s := range servers {
		switch s.Kind() {
		case MCPStdio:
			argv := s.MCPArgv(workdir)
			m[s.Name] = entry{Type: "stdio", Command: argv[0], Args: argv[1:], Env: s.Env}
		case MCPRemote:
			m[s.Name] = entry{Type: "http", URL: s.URL, Headers: s.Headers}
		default:
			return nil, fmt.Errorf("MCP server %q is served by Harvest on the host: a CLI reaches it through the registry's bridge (a URL)", s.Name)
		}
	}
	return json.Marshal(map[string]any{"mcpServers": m})
}
