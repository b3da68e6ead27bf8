package deptest

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/harvest-dev/harvest"

// rule says what a package may depend on (transitively): the standard
// library and the listed module path prefixes, and never the forbidden ones.
type rule struct {
	pkg       string
	allow     []string // beyond the standard library (see hasPrefix); nil: anything not forbidden
	forbidden []string // prefixes
}

var rules = []rule{
	{
		// Every box runs it as PID 1: it links the standard library and a
		// few small packages, nothing of the server's.
		pkg: module + "/cmd/harvest-agent",
		allow: []string{
			module + "/cmd/harvest-agent", module + "/sandbox/agentd", module + "/sandbox/proto",
			module + "/sandbox/local/shim", module + "/base/unixsock",
			"golang.org/x/sys/", "github.com/creack/pty", "github.com/bmatcuk/doublestar/",
		},
	},
	{
		// The sandbox contract: what every backend and every agent uses.
		pkg: module + "/sandbox",
		allow: []string{
			module + "/sandbox", module + "/sandbox/proto", module + "/base/procutil", module + "/base/unixsock",
			"golang.org/x/sys/",
		},
	},
	{
		// The API client: the wire types, the events and the standard
		// library — no server, session, store, agent, model SDK or Docker.
		pkg:   module + "/client",
		allow: []string{module + "/client", module + "/wire", module + "/event"},
	},
	{
		// The address policy: the standard library only, so anything
		// that dials for someone else (egress, the MCP bridge) can use it.
		pkg:   module + "/netguard",
		allow: []string{module + "/netguard"},
	},
	{
		// The wire types themselves.
		pkg:   module + "/wire",
		allow: []string{module + "/wire", module + "/event"},
	},
	{
		// Secrets: the key, sealing and Resolve over the store's contract.
		// The session layer will call it, so it reaches nothing above the
		// store (and no SQLite: the caller passes its store).
		pkg:   module + "/secrets",
		allow: []string{module + "/secrets", module + "/store", module + "/wire", module + "/event"},
	},
	{
		// The repositories' memory: over the store's contract (the caller
		// passes its store, so no SQLite) and the MCP SDK; the agents and
		// the server use it, never the other way round.
		pkg: module + "/memory",
		forbidden: []string{
			module + "/agent", module + "/session", module + "/server", module + "/store/sqlite",
			module + "/sandbox", "modernc.org/",
		},
	},
	{
		// The store's queries, written once for both databases: no
		// database driver (each database's dialect and driver are
		// store/sqlite's and store/postgres's), nothing above the store.
		pkg:   module + "/store/sqlstore",
		allow: []string{module + "/store/sqlstore", module + "/store", module + "/event", module + "/wire"},
	},
	{
		// The agent contract: no agent, no backend, no model SDK.
		pkg: module + "/agent",
		forbidden: []string{
			module + "/agent/", module + "/session", module + "/server", module + "/store",
			module + "/sandbox/docker", module + "/sandbox/local",
			"github.com/anthropics/", "github.com/openai/", "github.com/moby/", "github.com/docker/",
		},
	},
	{
		// Each kind of agent knows the contract, not the registry nor the
		// other kinds nor the session layer.
		pkg:       module + "/agent/claudecode",
		forbidden: []string{module + "/agent/agents", module + "/agent/builtin", module + "/agent/opencode", module + "/agent/terminal", module + "/session", module + "/server"},
	},
	{
		pkg:       module + "/agent/opencode",
		forbidden: []string{module + "/agent/agents", module + "/agent/builtin", module + "/agent/claudecode", module + "/agent/terminal", module + "/session", module + "/server"},
	},
	{
		pkg:       module + "/agent/terminal",
		forbidden: []string{module + "/agent/agents", module + "/agent/builtin", module + "/agent/claudecode", module + "/agent/opencode", module + "/session", module + "/server"},
	},
	{
		pkg:       module + "/agent/builtin",
		forbidden: []string{module + "/agent/agents", module + "/agent/claudecode", module + "/agent/opencode", module + "/agent/terminal", module + "/session", module + "/server"},
	},
	{
		// The test stack below the session layer: session's internal tests
		// import it, so it must not reach session (an import cycle), nor
		// the server above it (that is internal/stacktest/apitest's).
		pkg:       module + "/internal/stacktest",
		forbidden: []string{module + "/session", module + "/server", module + "/internal/stacktest/"},
	},
	{
		// What a test requires of the machine: every test package uses
		// it, so it links the standard library alone.
		pkg:   module + "/internal/testreq",
		allow: []string{module + "/internal/testreq"},
	},
}

func TestDependencies(t *testing.T) {
	for _, r := range rules {
		t.Run(strings.TrimPrefix(r.pkg, module+"/"), func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", r.pkg).Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", r.pkg, err)
			}
			deps := strings.Fields(string(out))
			if len(deps) < 2 {
				t.Fatalf("go list -deps %s listed %d packages", r.pkg, len(deps))
			}
			for _, d := range deps {
				for _, f := range r.forbidden {
					if strings.HasPrefix(d, f) {
						t.Errorf("%s depends on %s, which it must not", r.pkg, d)
					}
				}
				if r.allow == nil || std(d) || hasPrefix(d, r.allow) {
					continue
				}
				t.Errorf("%s depends on %s: not in what it may use (%v)", r.pkg, d, r.allow)
			}
		})
	}
}

// std reports whether a package path is the standard library's (no dot in
// its first element; vendored x/ packages of the standard library too).
func std(p string) bool {
	first, _, _ := strings.Cut(p, "/")
	return !strings.Contains(first, ".") || strings.HasPrefix(p, "vendor/")
}

// hasPrefix reports whether p is one of the entries: a path ending in "/"
// is a prefix, any other an exact package.
func hasPrefix(p string, entries []string) bool {
	for _, x := range entries {
		if p == x || (strings.HasSuffix(x, "/") && strings.HasPrefix(p, x)) {
			return true
		}
	}
	return false
}
