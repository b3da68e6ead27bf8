// Package egress is the one way out of a box to the internet, for agents
// that need to install dependencies: an HTTP forward proxy on the host
// that lets a box reach the package registries on an allowlist and
// nothing else.
//
// # Why
//
// A box has network none, and stays that way: whatever runs in it may be
// prompt-injected, so it must not reach the host's network, the cloud
// metadata service or an arbitrary server to exfiltrate the workspace.
// But `npm install`, `pip install`, `go mod download` and `cargo fetch`
// need their registries. So, like the model proxy, the session layer
// serves this proxy on a box listener (sandbox.Sandbox.Listen, bridged by
// the in-box agent) and points the box's tools at it with the usual proxy
// variables (Env). Every tool that installs packages honours them, and the
// box gains no route of its own: a tool that ignores them still finds no
// network.
//
// # What is allowed
//
// Two kinds of request, each only to a host on the allowlist (Config.Allow:
// exact names, and "*.suffix" for the names under suffix, not suffix
// itself) and a port on Config.Ports (443 and 80 unless set):
//
//   - CONNECT host:port: a TCP tunnel. Registries speak TLS, and the proxy
//     never terminates it: it sees a name and a port, then opaque bytes, so
//     the client verifies the registry's certificate end to end.
//   - GET http://host/... (an absolute URI, any method): plain HTTP,
//     forwarded upstream (Debian's mirrors are plain HTTP, signed by apt).
//
// Anything else is refused before anything is dialed: a host not on the
// list gets 403 with a body (and an X-Harvest-Egress header, which curl -v
// shows for a refused CONNECT) that names the host and says how to allow
// it (Config.AllowHelp). An IP address as the target is never on the list.
//
// # An allowlisted name is not a way into the host's network
//
// The proxy resolves the name itself (Config.Resolver) and drops every
// address that is loopback, private (RFC 1918, ULA), link-local (which
// holds the metadata service, 169.254.169.254), shared (100.64/10),
// multicast, unspecified or reserved (package netguard's list, the one
// the MCP servers' connections follow too); if none is left the request
// is refused (403). Unlike netguard's Guard, which refuses a name with any
// such address, the proxy keeps the public ones of a mixed answer: it
// fetches packages from CDNs, where one odd record must not break an
// install, and it dials only the allowlisted names. It then dials one of the addresses it checked, never the
// name, so a second DNS answer (rebinding) cannot swap in another. The
// plain-HTTP path dials the same way.
//
// # Tokens and accounting
//
// Grant registers a session and returns a token ("harvest-egress-" and 256
// random bits) and its revoke function. The box sends it as the password
// of Proxy-Authorization: Basic (the user name is ignored), which every
// tool does when the proxy URL carries it: http://harvest:TOKEN@127.0.0.1:PORT.
// Without a live token the answer is 407 and nothing is dialed. Revoking
// a token refuses its next requests and closes its tunnels. The proxy
// keeps only the token's SHA-256 and never logs it.
//
// Each request of a session — a tunnel, a plain-HTTP request, or a
// refusal — ends with one call of the grant's onStats with its Stats
// (host, port, bytes each way, duration, how it ended) and the session's
// running Totals, and one log line. Calls for one grant never overlap;
// they run on the request's goroutine, so they must be quick. Plain-HTTP
// bytes are the bodies only; tunnel bytes are everything tunnelled.
//
// # Limits
//
// A tunnel is closed after Config.IdleTimeout without a byte either way
// and after Config.MaxDuration in all; a plain-HTTP request gets
// MaxDuration in all and IdleTimeout for the response headers. At most
// Config.MaxTunnels tunnels and requests run at once per Proxy (its
// sessions share them); beyond that the answer is 503 at once, which
// the installers retry.
//
// # Concurrency
//
// A Proxy is safe for concurrent use; one serves every session. Proxy.mu
// guards the grant table; grant.mu serialises a grant's Totals and its
// onStats calls; neither is held while dialing or copying. A tunnel runs
// on its request's goroutine, which owns the two copying goroutines and
// waits for them. Serve owns its server and returns only once every
// handler, tunnels included, has ended.
package egress
