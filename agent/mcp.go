package agent

import "net/http"

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
}
