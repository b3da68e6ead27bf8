package deptest

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// floor is one storey of the module: the packages on it (module-relative
// paths; an entry ending in "/" is every package under it, the longest
// matching entry of all floors places a package) and why they are there.
type floor struct {
	name string
	pkgs []string
}

// floors is the module's layering, ground first: a package may import
// (in its non-test files) packages of its own floor and of the floors
// below, never of one above. Tests may reach up (a test of the session
// layer starts a whole stack); what the product links may not.
//
// The CLI, on the top floor, has one more rule: only cmd/ imports it,
// from any file, tests included (cliImporters), so that nothing a server
// or a test needs hides in the command-line package.
var floors = []floor{
	// The ground floor: low-level helpers that import nothing of
	// Harvest's (processes, unix sockets, serving into a box, tracing
	// spans), what tests ask of the machine and of the binaries on it, and
	// the real OpenID Provider tests sign in with (zitadel's).
	{"ground", []string{"base", "base/", "internal/testreq", "internal/testbin", "internal/mountinfo", "internal/testoidc"}},
	// The stand-ins for the services this machine cannot reach, speaking
	// their wire protocols (harvest sim), and the demo's script on them.
	{"stand-ins", []string{"sim", "sim/", "internal/demo"}},
	// The words every floor speaks: events, the API's wire types, the
	// address policy.
	{"words", []string{"event", "wire", "netguard"}},
	// Boxes: the contract, the in-box agent and its protocol, the
	// backends and their conformance suite.
	{"sandbox", []string{"sandbox", "sandbox/"}},
	// What sessions stand on: the store and its databases, the journal,
	// secrets, memory, repositories and workspaces, models, the proxies a
	// box reaches the world through, GitHub's API.
	{"infra", []string{
		"store", "store/", "journal", "journal/", "secrets", "memory",
		"workspace", "workspace/", "llm", "llm/", "modelproxy", "egress", "gitproxy", "gh",
	}},
	// The agents: the contract, each kind, the registry that wires a box
	// for them.
	{"agent", []string{"agent", "agent/"}},
	// Sessions, the environments they start from, and who may see and
	// steer them (authz).
	{"session", []string{"session", "environment", "authz"}},
	// The edges: the HTTP API and what several nodes add to it, the API
	// client, the GitHub app, metrics and traces, the web UI; and the
	// test stacks that start all of it.
	{"edge", []string{
		"server", "server/", "client", "ghbot", "slackbot", "telemetry", "web",
		"internal/stacktest", "internal/stacktest/", "internal/browsertest",
	}},
	// The top: the command line, the binaries, the developer commands,
	// the end-to-end tests, the docs' test (internal/doctest, with the
	// docs/ rewrite), the separate machines of the several-node tests
	// (internal/netlab) and this test.
	{"top", []string{"internal/cli", "cmd/", "internal/cmd/", "internal/deptest", "internal/doctest", "internal/netlab", "e2e/"}},
}

// cliImporters may import internal/cli: the binary that runs it.
var cliImporters = []string{"cmd/"}

// pkgImports is one package's imports of the module's packages
// (module-relative), in its files and in its tests.
type pkgImports struct {
	imports []string // non-test files
	tests   []string // _test.go files, in the package and outside it
}

// floorOf returns the index of p's floor in fs, -1 if none.
func floorOf(fs []floor, p string) int {
	at, best := -1, -1
	for i, f := range fs {
		for _, e := range f.pkgs {
			if (p == e || (strings.HasSuffix(e, "/") && strings.HasPrefix(p, e))) && len(e) > best {
				at, best = i, len(e)
			}
		}
	}
	return at
}

// checkFloors returns what breaks the layering in graph (module-relative
// package paths): a package on no floor, an import from a floor above the
// importer's, and an import of internal/cli from anywhere but
// cliImporters.
func checkFloors(fs []floor, cli []string, graph map[string]pkgImports) []string {
	var bad []string
	pkgs := make([]string, 0, len(graph))
	for p := range graph {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	for _, p := range pkgs {
		at := floorOf(fs, p)
		if at < 0 {
			bad = append(bad, fmt.Sprintf("%s is on no floor: add it to floors (internal/deptest) where its imports put it", p))
			continue
		}
		for _, d := range graph[p].imports {
			if to := floorOf(fs, d); to > at {
				bad = append(bad, fmt.Sprintf("%s (floor %s) imports %s (floor %s, above it): move the code, or what it needs, down", p, fs[at].name, d, fs[to].name))
			}
		}
		if p == "internal/cli" {
			continue
		}
		for _, d := range slices.Concat(graph[p].imports, graph[p].tests) {
			if d == "internal/cli" && !slices.ContainsFunc(cli, func(e string) bool {
				return p == e || (strings.HasSuffix(e, "/") && strings.HasPrefix(p, e))
			}) {
				bad = append(bad, fmt.Sprintf("%s imports internal/cli, which only %v may: what it needs belongs in a package below the CLI", p, cli))
				break
			}
		}
	}
	return bad
}

// moduleGraph lists the module's packages and their imports of each
// other.
func moduleGraph(t *testing.T) map[string]pkgImports {
	t.Helper()
	const sep = "\x1f"
	out, err := exec.Command("go", "list", "-e", "-f",
		`{{.ImportPath}}`+sep+`{{join .Imports " "}}`+sep+`{{join .TestImports " "}} {{join .XTestImports " "}}`,
		module+"/...").Output()
	if err != nil {
		t.Fatalf("go list %s/...: %v", module, err)
	}
	rel := func(list string) []string {
		var r []string
		for _, p := range strings.Fields(list) {
			if q, ok := strings.CutPrefix(p, module+"/"); ok {
				r = append(r, q)
			}
		}
		return r
	}
	graph := map[string]pkgImports{}
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), sep)
		if len(f) != 3 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		p, ok := strings.CutPrefix(f[0], module+"/")
		if !ok {
			continue // the module's root, which has no package
		}
		graph[p] = pkgImports{imports: rel(f[1]), tests: rel(f[2])}
	}
	if len(graph) < 50 {
		t.Fatalf("go list listed %d packages of the module", len(graph))
	}
	return graph
}

// TestFloors holds the module to its floors.
func TestFloors(t *testing.T) {
	for _, b := range checkFloors(floors, cliImporters, moduleGraph(t)) {
		t.Error(b)
	}
}

// TestFloorsRules shows each rule of checkFloors failing on an import
// graph made for it, so that TestFloors cannot pass by accident (the real
// graph is clean only while the rules hold).
func TestFloorsRules(t *testing.T) {
	clean := map[string]pkgImports{
		"base/procutil":      {},
		"sandbox":            {imports: []string{"base/procutil", "sandbox/proto"}},
		"sandbox/proto":      {},
		"session":            {imports: []string{"sandbox", "store"}, tests: []string{"internal/stacktest"}},
		"store":              {imports: []string{"event"}},
		"event":              {},
		"internal/cli":       {imports: []string{"session", "server"}},
		"internal/stacktest": {imports: []string{"store", "sandbox"}},
		"server":             {imports: []string{"session"}},
		"cmd/harvest":        {imports: []string{"internal/cli"}},
	}
	if bad := checkFloors(floors, cliImporters, clean); len(bad) > 0 {
		t.Fatalf("a graph that keeps the floors: %q", bad)
	}
	with := func(p string, imp pkgImports) map[string]pkgImports {
		g := map[string]pkgImports{}
		for k, v := range clean {
			g[k] = v
		}
		g[p] = imp
		return g
	}
	for _, c := range []struct {
		name  string
		graph map[string]pkgImports
		want  []string // each a substring of one problem, in order
	}{
		{"ground imports up", with("base/procutil", pkgImports{imports: []string{"session"}}),
			[]string{"base/procutil (floor ground) imports session (floor session, above it)"}},
		{"sandbox imports the store", with("sandbox/proto", pkgImports{imports: []string{"store"}}),
			[]string{"sandbox/proto (floor sandbox) imports store (floor infra, above it)"}},
		{"a package on no floor", with("newthing", pkgImports{imports: []string{"event"}}),
			[]string{"newthing is on no floor"}},
		{"the server imports the CLI", with("server", pkgImports{imports: []string{"session", "internal/cli"}}),
			[]string{"server (floor edge) imports internal/cli (floor top, above it)", "server imports internal/cli, which only"}},
		{"a test imports the CLI", with("session", pkgImports{imports: []string{"sandbox"}, tests: []string{"internal/cli"}}),
			[]string{"session imports internal/cli, which only"}},
		{"a developer command imports the CLI", with("internal/cmd/tool", pkgImports{imports: []string{"internal/cli"}}),
			[]string{"internal/cmd/tool imports internal/cli, which only"}},
	} {
		bad := checkFloors(floors, cliImporters, c.graph)
		ok := len(bad) == len(c.want)
		for i := 0; ok && i < len(bad); i++ {
			ok = strings.Contains(bad[i], c.want[i])
		}
		if !ok {
			t.Errorf("%s: problems %q; want %q", c.name, bad, c.want)
		}
	}
}
