package agents

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/harvest-dev/harvest/agent"
)

// An MCP config file (harvest serve --mcp-config FILE) lists the server's
// MCP servers, given to every session's agent:
//
//	servers:
//	  docs:                       # a stdio server, run in each box
//	    command: [python3, /opt/docs/mcp.py]
//	    env: {DOCS_MODE: offline}
//	    dir: /workspace/app       # default: the first workspace
//	  github:                     # a remote one, reached from the host
//	    url: https://api.githubcopilot.com/mcp/
//	    headers:
//	      Authorization: "Bearer ${secret:GITHUB_MCP_TOKEN}"
//
// A header value may name a file, ${file:/etc/harvest/token} (read when
// the file is loaded, trailing newline dropped), or a Harvest secret,
// ${secret:NAME}, looked up for each session among its repository's and
// owner's secrets (ExpandMCPSecrets): the value is added on the host by
// the bridge, so a secret not marked for sessions stays out of the box.
//
// The file is the operator's: its remote servers are dialed as given
// (agent.MCPServer.Operator), an internal address included, where a
// session's or a repository's go through the address policy (package
// netguard, harvest serve --mcp-allow).

// mcpFileServer is a server in an MCP config file.
type mcpFileServer struct {
	Command []string          `yaml:"command"`
	Env     map[string]string `yaml:"env"`
	Dir     string            `yaml:"dir"`
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
}

var (
	fileRef   = regexp.MustCompile(`\$\{file:([^}]*)\}`)
	secretRef = regexp.MustCompile(`\$\{secret:([^}]*)\}`)
	anyRef    = regexp.MustCompile(`\$\{([a-z]+):`)
)

// LoadMCPConfig reads an MCP config file (see above). Errors name the file
// and the server, and say what to fix.
func LoadMCPConfig(file string) ([]agent.MCPServer, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--mcp-config: %w", err)
	}
	var f struct {
		Servers map[string]mcpFileServer `yaml:"servers"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("--mcp-config %s: %w (its shape: servers: {NAME: {command: [...], env: {...}} or {url: ..., headers: {...}}})", file, err)
	}
	if len(f.Servers) == 0 {
		return nil, fmt.Errorf("--mcp-config %s lists no servers: give them under servers:", file)
	}
	source := "--mcp-config " + file
	names := make([]string, 0, len(f.Servers))
	for n := range f.Servers {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []agent.MCPServer
	var errs []error
	for _, n := range names {
		c := f.Servers[n]
		s := agent.MCPServer{Name: n, Command: c.Command, Env: c.Env, Dir: c.Dir, URL: c.URL, Source: source, Operator: true}
		for k, v := range c.Headers {
			v, err := expandFiles(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: server %q: header %s: %w", source, n, k, err))
				continue
			}
			for _, m := range anyRef.FindAllStringSubmatch(v, -1) {
				if m[1] != "secret" {
					errs = append(errs, fmt.Errorf("%s: server %q: header %s: ${%s:...} is not known: use ${secret:NAME} or ${file:PATH}", source, n, k, m[1]))
				}
			}
			if s.Headers == nil {
				s.Headers = map[string]string{}
			}
			s.Headers[k] = v
		}
		out = append(out, s)
	}
	if err := agent.CheckMCP(out); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func expandFiles(v string) (string, error) {
	var err error
	v = fileRef.ReplaceAllStringFunc(v, func(m string) string {
		p := fileRef.FindStringSubmatch(m)[1]
		b, rerr := os.ReadFile(p)
		if rerr != nil {
			err = fmt.Errorf("${file:%s}: %w", p, rerr)
			return ""
		}
		return strings.TrimRight(string(b), "\r\n")
	})
	return v, err
}

// ExpandMCPSecrets returns servers with every ${secret:NAME} in a header
// replaced by the secret's value from env (NAME=VALUE, a session's
// secrets), and the values it put in (the caller masks them in what it
// shows: a server may echo its credentials). A secret env lacks is an
// error saying how to set it.
func ExpandMCPSecrets(servers []agent.MCPServer, env []string) ([]agent.MCPServer, []string, error) {
	vals := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vals[k] = v
		}
	}
	out := make([]agent.MCPServer, len(servers))
	var used []string
	var errs []error
	for i, s := range servers {
		out[i] = s
		if len(s.Headers) == 0 {
			continue
		}
		out[i].Headers = make(map[string]string, len(s.Headers))
		for k, v := range s.Headers {
			out[i].Headers[k] = secretRef.ReplaceAllStringFunc(v, func(m string) string {
				name := secretRef.FindStringSubmatch(m)[1]
				val, ok := vals[name]
				if !ok {
					errs = append(errs, fmt.Errorf("MCP server %q (%s): header %s names the secret %s, which this session's repository and owner do not have: set it (harvest secret set)", s.Name, s.Source, k, name))
				}
				if val != "" && !slices.Contains(used, val) {
					used = append(used, val)
				}
				return val
			})
		}
	}
	return out, used, errors.Join(errs...)
}
