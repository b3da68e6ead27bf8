package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/agents"
	"github.com/harvest-dev/harvest/netguard"
	"github.com/harvest-dev/harvest/store"
)

// A session's agent gets MCP servers from three places, in this order of
// precedence when two have the same name:
//
//  1. the server's config (harvest serve --mcp-config: the operator's)
//     and Harvest's own (the repository's memory, "memory"; the host's,
//     Config.HostMCP, whose names, Config.HostMCPNames, the operator's
//     may not take either);
//  2. the session's request (CreateRequest.MCPServers), which may not
//     reuse a name of the first (a 400 says so);
//  3. the repositories' .mcp.json, whose server is left out when a
//     higher one has its name (agents.Open does that).
//
// A request never carries a credential: a remote server's header value is
// exactly ${secret:NAME}, a Harvest secret of the session's repository or
// owner, resolved on the host when the agent starts (Config.MCPSecrets,
// agents.ExpandMCPSecrets), added by the bridge, and masked in the
// session's events like its environment's secrets.

// A request's remote server is dialed from the host, so its URL follows
// the address policy (Config.MCPGuard, package netguard): a host that is,
// or resolves to, a loopback, private, link-local or reserved address, or
// that does not resolve, is a 400 at create, before anything is stored or
// dialed (the lookup is all that happens); the bridge checks again at
// every dial, so a name that changes its answer later gets nowhere. The
// 400 names an IP literal's class but not what a name resolves to (that
// would map the host's network for the requester); the log has it.

// sessionMCPSource names a session's own servers in errors.
const sessionMCPSource = "the session's mcp_servers"

// memoryMCPName is the name Harvest's memory server takes (memory.go).
const memoryMCPName = "memory"

// maxMCPRequestBytes bounds a request's mcp_servers (as JSON).
const maxMCPRequestBytes = 64 << 10

// secretHeader is the one form a request's header value may take.
var secretHeader = regexp.MustCompile(`^\$\{secret:([A-Z_][A-Z0-9_]{0,127})\}$`)

// agentMCP is the session's servers as the agent layer takes them.
func agentMCP(servers []store.MCPServer) []agent.MCPServer {
	out := make([]agent.MCPServer, 0, len(servers))
	for _, s := range servers {
		out = append(out, agent.MCPServer{
			Name: s.Name, Command: slices.Clone(s.Command), Env: s.Env, Dir: s.Dir,
			URL: s.URL, Headers: s.Headers, Source: sessionMCPSource,
		})
	}
	return out
}

// checkMCP validates a request's MCP servers, returning every problem.
func (m *Manager) checkMCP(servers []store.MCPServer) []string {
	if len(servers) == 0 {
		return nil
	}
	var problems []string
	if b, _ := json.Marshal(servers); len(b) > maxMCPRequestBytes {
		problems = append(problems, fmt.Sprintf("mcp_servers is %d bytes of JSON: at most %d", len(b), maxMCPRequestBytes))
	}
	if err := agent.CheckMCP(agentMCP(servers)); err != nil {
		problems = append(problems, splitErr("mcp_servers: ", err)...)
	}
	reserved := map[string]string{}
	for _, s := range m.cfg.MCP {
		reserved[s.Name] = "the server's MCP config (" + s.Source + "), which the session gets anyway"
	}
	if m.cfg.Memory != nil {
		reserved[memoryMCPName] = "Harvest's repository memory, which the session gets anyway"
	}
	for _, n := range m.cfg.HostMCPNames {
		reserved[n] = "a server Harvest itself gives sessions on the host (the Slack app's slack_update, for the sessions Slack starts)"
	}
	for i, s := range servers {
		if by, ok := reserved[s.Name]; ok {
			problems = append(problems, fmt.Sprintf("mcp_servers[%d]: the name %q is taken by %s: give yours another name", i, s.Name, by))
		}
		for k, v := range s.Headers {
			if !secretHeader.MatchString(v) {
				problems = append(problems, fmt.Sprintf("mcp_servers[%d] (%q): header %s: a request carries no credentials: store the value with `harvest secret set` (for the repository or yourself) and give the header as exactly ${secret:NAME}", i, s.Name, k))
			}
		}
	}
	return problems
}

// checkMCPAddrs checks the hosts of a request's remote servers against
// the address policy (all at once: each is a DNS lookup), returning a
// problem for each it refuses. A URL CheckMCP refuses is left to it.
func (m *Manager) checkMCPAddrs(ctx context.Context, owner string, servers []store.MCPServer) ([]string, error) {
	problems := make([]string, len(servers))
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		if s.URL == "" || len(s.Command) > 0 {
			continue
		}
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
			continue
		}
		wg.Go(func() {
			err := m.cfg.MCPGuard.CheckURL(ctx, s.URL)
			if _, refused := errors.AsType[*netguard.RefusedError](err); refused {
				m.log.Info("a session's MCP server refused: its address is not one Harvest dials", "owner", owner, "name", s.Name, "url", s.URL, "why", netguard.Detail(err))
				problems[i] = fmt.Sprintf("mcp_servers[%d] (%q): url %s: %v", i, s.Name, s.URL, err)
			} else if err != nil {
				errs[i] = fmt.Errorf("checking the address of mcp_servers[%d] (%q): %w", i, s.Name, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(problems, func(p string) bool { return p == "" }), nil
}

// checkMCPSecrets refuses a request whose headers name a secret the
// session's repository and owner do not have, so the session does not
// fail when its agent starts.
func (m *Manager) checkMCPSecrets(ctx context.Context, s *store.Session) error {
	var names []string
	for _, srv := range s.MCPServers {
		for _, v := range srv.Headers {
			if sm := secretHeader.FindStringSubmatch(v); sm != nil {
				names = append(names, sm[1])
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	var env []string
	if f := m.cfg.MCPSecrets; f != nil {
		var err error
		if env, err = f(ctx, firstGitHub(s), s.Owner); err != nil {
			return fmt.Errorf("reading the secrets mcp_servers names: %w", err)
		}
	}
	var problems []string
	for _, n := range names {
		if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, n+"=") }) {
			problems = append(problems, fmt.Sprintf("mcp_servers: the secret %s is not set for this session's repository nor for you: set it with `harvest secret set`", n))
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return &InputError{Problems: slices.Compact(problems)}
	}
	return nil
}

func firstGitHub(s *store.Session) string {
	if len(s.Repos) == 0 {
		return ""
	}
	return s.Repos[0].GitHub
}

// splitErr is err's joined errors, each prefixed.
func splitErr(prefix string, err error) []string {
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, splitErr(prefix, e)...)
		}
		return out
	}
	return []string{prefix + err.Error()}
}

// mcpServers gives req the server's MCP servers and the session's, their
// headers' secrets resolved for the session (the workspaces' .mcp.json
// ones agents.Open adds itself), and returns the resolved secrets' values,
// to be masked in the session's events.
func (r *runner) mcpServers(ctx context.Context, req *agents.Request) ([]string, error) {
	servers := append(slices.Clone(r.d.cfg.MCP), agentMCP(r.s.MCPServers)...)
	if f := r.d.cfg.HostMCP; f != nil {
		servers = append(f(r.s), servers...) // Harvest's own first, as the memory's
	}
	var env []string
	if f := r.d.cfg.MCPSecrets; f != nil && slices.ContainsFunc(servers, func(s agent.MCPServer) bool { return len(s.Headers) > 0 }) {
		var err error
		if env, err = f(ctx, firstGitHub(r.s), r.s.Owner); err != nil {
			return nil, fmt.Errorf("the secrets of the MCP servers: %w", err)
		}
	}
	servers, used, err := agents.ExpandMCPSecrets(servers, env)
	if err != nil {
		return nil, fatal(err)
	}
	req.MCP = servers
	return used, nil
}
