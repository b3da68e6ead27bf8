package session

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/claudecode"
	"github.com/harvest-dev/harvest/agent/opencode"
	"github.com/harvest-dev/harvest/agent/terminal"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/netguard"
	"github.com/harvest-dev/harvest/sandbox/local"
	"github.com/harvest-dev/harvest/secrets"
	"github.com/harvest-dev/harvest/sim"
	"github.com/harvest-dev/harvest/store"
)

// mcpCanary is the remote MCP server's token: the bridge adds it on the
// host; it must be nowhere in the box nor in the session's events.
// teamCanary is the session's own remote server's, which that server
// echoes in its tool's result: the agent sees it (so a CLI's transcript
// in the box may hold it), the events never do.
const (
	mcpCanary  = "mcp-canary-5be1c07d93aa4f62-never-in-the-box"
	teamCanary = "team-canary-0c41d6e2b8f35a17-masked-in-events"
)

// boxMCPServer is a stdio MCP server, hand-written (JSON-RPC lines), that
// the repository lists in its .mcp.json: its one tool answers with its
// working directory, which is /workspace/... only inside the box.
const boxMCPServer = `import json, os, sys
for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    msg = json.loads(line)
    if "id" not in msg:
        continue
    m, res = msg.get("method"), None
    if m == "initialize":
        res = {"protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
               "capabilities": {"tools": {}}, "serverInfo": {"name": "box", "version": "1"}}
    elif m == "tools/list":
        res = {"tools": [{"name": "box_fact", "description": "Says where the server runs.",
                          "inputSchema": {"type": "object", "properties": {}}}]}
    elif m == "tools/call":
        res = {"content": [{"type": "text", "text": "box-fact cwd=" + os.getcwd()}]}
    elif m == "ping":
        res = {}
    if res is None:
        out = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no method " + str(m)}}
    else:
        out = {"jsonrpc": "2.0", "id": msg["id"], "result": res}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
`

// mcpScript: the model calls the box's tool, then the remote one, then
// the host one, then the session's own, then answers; each kind names MCP
// tools its own way (Claude Code's and the builtin's mcp__SERVER__TOOL,
// OpenCode's SERVER_TOOL).
const mcpScript = `
rules:
  - name: title
    when: {api: anthropic, system: "Generate a concise, sentence-case title"}
    reply: {text: '{"title": "Use MCP"}', usage: {input_tokens: 100, output_tokens: 10}}
  - name: done
    when: {last_user: "use the mcp tools", tool_result: "team-fact-5521"}
    reply: {text: "All MCP tools answered.", usage: {input_tokens: 100, output_tokens: 10}}
  - name: team
    when: {last_user: "use the mcp tools", tool_result: "notes-fact-4410", tools: [mcp__team__secret_fact]}
    reply:
      tool_calls: [{name: mcp__team__secret_fact, input: {}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: team-opencode
    when: {last_user: "use the mcp tools", tool_result: "notes-fact-4410", tools: [team_secret_fact]}
    reply:
      tool_calls: [{name: team_secret_fact, input: {}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: notes
    when: {last_user: "use the mcp tools", tool_result: "remote-fact-7781", tools: [mcp__notes__note_fact]}
    reply:
      tool_calls: [{name: mcp__notes__note_fact, input: {topic: "mcp"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: notes-opencode
    when: {last_user: "use the mcp tools", tool_result: "remote-fact-7781", tools: [notes_note_fact]}
    reply:
      tool_calls: [{name: notes_note_fact, input: {topic: "mcp"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: remote
    when: {last_user: "use the mcp tools", tool_result: "box-fact", tools: [mcp__remote__secret_fact]}
    reply:
      tool_calls: [{name: mcp__remote__secret_fact, input: {}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: remote-opencode
    when: {last_user: "use the mcp tools", tool_result: "box-fact", tools: [remote_secret_fact]}
    reply:
      tool_calls: [{name: remote_secret_fact, input: {}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: box
    when: {last_user: "use the mcp tools", tools: [mcp__box__box_fact]}
    reply:
      tool_calls: [{name: mcp__box__box_fact, input: {}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: box-opencode
    when: {last_user: "use the mcp tools", tools: [box_box_fact]}
    reply:
      tool_calls: [{name: box_box_fact, input: {}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

// notesMCP is an MCP server Harvest serves on the host (an
// agent.MCPServer Handler, as the per-repository memory is).
func notesMCP(t *testing.T) http.Handler {
	srv := mcp.NewServer(&mcp.Implementation{Name: "notes", Version: "1"}, nil)
	type in struct {
		Topic string `json:"topic"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "note_fact", Description: "A note on a topic."},
		func(ctx context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "notes-fact-4410 on " + a.Topic}}}, nil, nil
		})
	t.Cleanup(func() { closeSessions(srv) })
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
}

// remoteMCP is a streamable-HTTP MCP server on the host that answers only
// with auth as its Authorization header; its one tool answers fact, and,
// with echo, the Authorization header it got (a server that echoes its
// credentials); calls counts its tool's calls.
func remoteMCP(t *testing.T, auth, fact string, echo bool) (*httptest.Server, *atomic.Int32) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	var calls atomic.Int32
	mcp.AddTool(srv, &mcp.Tool{Name: "secret_fact", Description: "A fact only the remote server knows."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			calls.Add(1)
			text := fact
			if echo {
				text += " auth=" + req.Extra.Header.Get("Authorization")
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != auth {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		ts.Close()
		closeSessions(srv)
	})
	return ts, &calls
}

// The acceptance: a stdio MCP server from the repository's
// .mcp.json runs inside the box, and a remote one from the server's config,
// one the session's request lists and one Harvest serves on the host (a
// Handler, like the memory) are reached through the bridge, from every
// kind of agent; their calls are ordinary tool.started and tool.finished
// events. The remote servers' tokens are Harvest secrets the headers name
// (${secret:NAME}), resolved on the host: the server config's is nowhere
// in the box nor in the events; the session's server echoes its own, and
// the event shows it masked. The repository's .mcp.json also lists a
// "team", which the session's server of that name replaces.
func TestMCPEveryAgent(t *testing.T) {
	for _, kind := range []string{AgentBuiltin, claudecode.Kind.Name, opencode.Kind.Name, terminal.Kind.Name} {
		t.Run(kind, func(t *testing.T) { testMCPAgent(t, kind) })
	}
}

func testMCPAgent(t *testing.T, kind string) {
	switch kind {
	case opencode.Kind.Name:
		testbin.OpenCode(t)
	case claudecode.Kind.Name, terminal.Kind.Name:
		testbin.Claude(t)
	}
	remote, calls := remoteMCP(t, "Bearer "+mcpCanary, "remote-fact-7781", false)
	team, teamCalls := remoteMCP(t, "Bearer "+teamCanary, "team-fact-5521", true)
	// The session's server is on loopback: the operator allows its
	// address and port (harvest serve --mcp-allow); the config's is the
	// operator's own, dialed as given.
	e := newEnv(t, withKey(canaryKey), withDisks, withMCP(agent.MCPServer{
		Name: "remote", URL: remote.URL, Headers: map[string]string{"Authorization": "Bearer ${secret:MCP_TOKEN}"},
		Source: "the server's --mcp-config", Operator: true,
	}, agent.MCPServer{Name: "notes", Handler: notesMCP(t), Source: "Harvest"}),
		withMCPGuard(mcpGuard(t, nil, team.Listener.Addr().String())))
	const owner = "tok-aaaaaaaaaaaa"
	e.m.cfg.MCPSecrets = ownerSecrets(t, e, owner, map[string]string{"MCP_TOKEN": mcpCanary, "TEAM_MCP": "Bearer " + teamCanary})
	s, err := sim.ParseScript("mcp.yaml", []byte(mcpScript))
	if err != nil {
		t.Fatal(err)
	}
	e.Sim.Store(sim.New(s))
	mcpJSON := `{"mcpServers": {"box": {"command": "python3", "args": ["mcp_box.py"]}, "team": {"command": "false"}}}`
	for name, body := range map[string]string{".mcp.json": mcpJSON, "mcp_box.py": boxMCPServer} {
		if err := os.WriteFile(filepath.Join(e.Repo, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	v, err := e.m.Create(testbin.Context(t), owner, CreateRequest{
		Repos: []RepoSpec{{Source: e.Repo}}, Prompt: "Please use the mcp tools.", Agent: kind, Backend: local.Name,
		MCPServers: []store.MCPServer{{Name: "team", URL: team.URL, Headers: map[string]string{"Authorization": "${secret:TEAM_MCP}"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	w := e.watch(v.ID)
	if f := w.Finished("t1"); f.Result != "All MCP tools answered." {
		t.Fatalf("t1 finished with %+v", f)
	}
	started := map[string]bool{}
	var outputs []string
	for _, ev := range w.Seen {
		switch p := ev.Data.(type) {
		case event.ToolStarted:
			started[p.Tool] = true
		case event.ToolFinished:
			if p.IsError {
				t.Errorf("tool %s failed: %s", p.Tool, p.Output)
			}
			outputs = append(outputs, p.Tool+": "+p.Output)
		}
	}
	all := strings.Join(outputs, "\n")
	if !strings.Contains(all, "box-fact cwd=/workspace/") || !strings.Contains(all, "remote-fact-7781") ||
		!strings.Contains(all, "notes-fact-4410 on mcp") || !strings.Contains(all, "team-fact-5521 auth="+secrets.Mask) {
		t.Fatalf("the tools' results (started %v):\n%s", started, all)
	}
	if calls.Load() != 1 || teamCalls.Load() != 1 {
		t.Fatalf("the remote servers' tools ran %d and %d times, want 1 each", calls.Load(), teamCalls.Load())
	}

	// While the agent (and its stdio server) runs: the server config's
	// canary is nowhere in the box.
	mustSee := []string{"mcp_box.py"}
	if kind != AgentBuiltin {
		mustSee = append(mustSee, "harvest-mcp-") // the bridge's session token, in the CLI's config
	}
	scanBoxFor(t, e, v.ID, []string{mcpCanary, mcpCanary[:24]}, mustSee...)
	w.State(store.StateIdle)
	evs, err := e.st.Events(testbin.Context(t), v.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		b, _ := json.Marshal(ev)
		if strings.Contains(string(b), mcpCanary[:24]) || strings.Contains(string(b), teamCanary[:24]) {
			t.Fatalf("event %d carries a remote server's token: %s", ev.Seq, b)
		}
	}
}

// ownerSecrets stores vals as owner's secrets (not for sessions: only the
// MCP servers' headers get them) and returns the Config.MCPSecrets that
// resolves them, as harvest serve's does.
func ownerSecrets(t *testing.T, e *env, owner string, vals map[string]string) func(ctx context.Context, repo, owner string) ([]string, error) {
	key := secrets.GenerateKey()
	scope, err := secrets.UserScope(owner)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range vals {
		if _, err := secrets.Put(testbin.Context(t), e.st, key, scope, k, v, false, "test"); err != nil {
			t.Fatal(err)
		}
	}
	return func(ctx context.Context, repo, owner string) ([]string, error) {
		all, _, err := secrets.Resolve(ctx, e.st, key, repo, owner)
		return all, err
	}
}

// closeSessions ends what a client that left without ending its session
// (a CLI killed with its box) left open on srv.
func closeSessions(srv *mcp.Server) {
	for ss := range srv.Sessions() {
		ss.Close()
	}
}

// A request's MCP servers are validated at create, every problem in one
// 400: CheckMCP's (names, kinds), a name the server's config uses, a
// header that is not exactly ${secret:NAME}; then a secret the owner does
// not have. A valid list is stored with the session.
func TestCreateMCPServers(t *testing.T) {
	e := newEnv(t, withMCP(agent.MCPServer{Name: "docs", Command: []string{"true"}, Source: "--mcp-config /etc/harvest/mcp.yaml"}),
		withMCPGuard(mcpGuard(t, &resolver{names: map[string][]string{"h": {"203.0.113.7"}}})))
	const owner = "tok-bbbbbbbbbbbb"
	e.m.cfg.MCPSecrets = ownerSecrets(t, e, owner, map[string]string{"GH_MCP": "Bearer gh-1"})
	ctx := testbin.Context(t)
	create := func(servers ...store.MCPServer) (*View, error) {
		return e.m.Create(ctx, owner, CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, MCPServers: servers})
	}
	_, err := create(
		store.MCPServer{Name: "docs", Command: []string{"python3", "d.py"}},
		store.MCPServer{Name: "Bad Name", Command: []string{"x"}},
		store.MCPServer{Name: "both", Command: []string{"x"}, URL: "https://h/mcp"},
		store.MCPServer{Name: "gh", URL: "https://h/mcp", Headers: map[string]string{"Authorization": "Bearer ghp_literal"}},
		store.MCPServer{Name: "gh2", URL: "https://h/mcp", Headers: map[string]string{"Authorization": "Bearer ${secret:GH_MCP}"}},
	)
	var ie *InputError
	if !errors.As(err, &ie) {
		t.Fatalf("got %v, want an InputError", err)
	}
	msg := err.Error()
	for _, want := range []string{
		`"docs" is taken by the server's MCP config (--mcp-config /etc/harvest/mcp.yaml)`,
		`MCP server "Bad Name" (the session's mcp_servers): the name must be`,
		`MCP server "both" (the session's mcp_servers): give exactly one of command`,
		`mcp_servers[3] ("gh"): header Authorization: a request carries no credentials: store the value with ` + "`harvest secret set`",
		`mcp_servers[4] ("gh2"): header Authorization`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the 400 lacks %q:\n%s", want, msg)
		}
	}
	if len(ie.Problems) != 5 {
		t.Errorf("%d problems, want 5: %q", len(ie.Problems), ie.Problems)
	}
	if _, err := create(store.MCPServer{Name: "gh", URL: "https://h/mcp", Headers: map[string]string{"Authorization": "${secret:NOT_SET}"}}); !IsInput(err) ||
		!strings.Contains(err.Error(), "the secret NOT_SET is not set for this session's repository nor for you") {
		t.Fatalf("an unset secret: %v", err)
	}
	want := []store.MCPServer{
		{Name: "gh", URL: "https://h/mcp", Headers: map[string]string{"Authorization": "${secret:GH_MCP}"}},
		{Name: "lint", Command: []string{"python3", "lint.py"}, Env: map[string]string{"MODE": "strict"}, Dir: "/workspace/repo"},
	}
	v, err := create(want...)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.st.GetSession(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.MCPServers, want) {
		t.Fatalf("stored %+v, want %+v", got.MCPServers, want)
	}
}

// mcpGuard is a guard with the operator's allowances allow, resolving
// with res (nil: the system's).
func mcpGuard(t *testing.T, res *resolver, allow ...string) *netguard.Guard {
	t.Helper()
	cfg := netguard.Config{Allow: allow}
	if res != nil {
		cfg.Resolver = res
	}
	g, err := netguard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// resolver answers from names, counting lookups; a name in flips
// resolves to its ips from its lookup number from on (DNS rebinding).
type resolver struct {
	mu    sync.Mutex
	names map[string][]string
	flips map[string]flip
	calls map[string]int
}

type flip struct {
	from int
	ips  []string
}

func (r *resolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[string]int{}
	}
	r.calls[host]++
	ips := r.names[host]
	if f, ok := r.flips[host]; ok && r.calls[host] >= f.from {
		ips = f.ips
	}
	if len(ips) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, s := range ips {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

func (r *resolver) lookups(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[host]
}

// A request's remote server whose host is, or resolves to, an address of
// the host's network is a 400 at create, with the request's other
// problems, and nothing is stored or dialed; the 400 does not say what a
// name resolved to. A name that passed at create and resolves to loopback
// when the agent starts, or only when the bridge dials it (rebinding), is
// refused there: the session fails, and the listener saw nothing.
func TestCreateMCPAddresses(t *testing.T) {
	wire := testbin.NewTripwire(t)
	port := strconv.Itoa(wire.Port())
	res := &resolver{
		names: map[string][]string{"localhost": {"127.0.0.1", "::1"}, "db.internal": {"10.0.0.7"}, "flip.test": {"203.0.113.9"}, "late.test": {"203.0.113.9"}},
		flips: map[string]flip{
			"flip.test": {2, []string{"127.0.0.1"}}, // create passes; the agent's start refuses
			"late.test": {3, []string{"127.0.0.1"}}, // create and the start pass; the bridge's dial refuses
		},
	}
	e := newEnv(t, withMCPGuard(mcpGuard(t, res, "192.168.7.7")))
	ctx := testbin.Context(t)
	const owner = "tok-cccccccccccc"
	_, err := e.m.Create(ctx, owner, CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Prompt: "msg hi", MCPServers: []store.MCPServer{
		{Name: "lo", URL: "http://127.0.0.1:" + port + "/mcp"},
		{Name: "named", URL: "http://localhost:" + port + "/mcp"},
		{Name: "meta", URL: "http://169.254.169.254/latest/meta-data/"},
		{Name: "private", URL: "https://10.1.2.3/mcp"},
		{Name: "internal", URL: "https://db.internal/mcp"},
		{Name: "nowhere", URL: "https://nowhere.test/mcp"},
		{Name: "allowed", URL: "http://192.168.7.7:8080/mcp"},
		{Name: "Bad Name", Command: []string{"x"}},
	}})
	var ie *InputError
	if !errors.As(err, &ie) {
		t.Fatalf("got %v, want an InputError", err)
	}
	msg := err.Error()
	for _, want := range []string{
		`mcp_servers[0] ("lo"): url http://127.0.0.1:` + port + `/mcp: 127.0.0.1 is a loopback address, which Harvest does not dial`,
		"harvest serve --mcp-allow 127.0.0.1:" + port,
		`mcp_servers[1] ("named"): url http://localhost:` + port + `/mcp: localhost does not resolve to public addresses only`,
		`mcp_servers[2] ("meta")`, "169.254.169.254 is a link-local address",
		`mcp_servers[3] ("private")`, "10.1.2.3 is a private address",
		`mcp_servers[4] ("internal")`, "db.internal does not resolve to public addresses only",
		`mcp_servers[5] ("nowhere")`, "nowhere.test does not resolve to public addresses only",
		`MCP server "Bad Name" (the session's mcp_servers): the name must be`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the 400 lacks %q:\n%s", want, msg)
		}
	}
	if len(ie.Problems) != 7 || strings.Contains(msg, `"allowed"`) || strings.Contains(msg, "10.0.0.7") {
		t.Errorf("%d problems, want 6 addresses and the name (not the allowed one, nor what db.internal resolves to): %q", len(ie.Problems), ie.Problems)
	}
	if list, err := e.st.ListSessions(ctx, store.SessionFilter{Owner: owner}); err != nil || len(list) != 0 {
		t.Fatalf("stored %d sessions (%v), want none", len(list), err)
	}
	if n := wire.Conns(t); n != 0 {
		t.Fatalf("the refused server's listener saw %d connections", n)
	}

	for _, c := range []struct{ host, says string }{
		{"flip.test", "flip.test does not resolve to public addresses only"},
		{"late.test", "Bad Gateway"}, // the bridge's 502 (its log says why)
	} {
		v, err := e.m.Create(ctx, owner, CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Prompt: "msg hi", MCPServers: []store.MCPServer{
			{Name: "rebound", URL: "http://" + c.host + ":" + port + "/mcp"},
		}})
		if err != nil {
			t.Fatalf("%s, public at create: %v", c.host, err)
		}
		e.watch(v.ID).State(store.StateFailed)
		got := e.get(v.ID).Error
		if !strings.Contains(got, `MCP server "rebound"`) || !strings.Contains(got, c.says) {
			t.Errorf("%s: the session failed with %q, want it to say %q", c.host, got, c.says)
		}
		if n, want := res.lookups(c.host), res.flips[c.host].from; n < want {
			t.Errorf("%s was looked up %d times, want %d or more (create, the start, the dials)", c.host, n, want)
		}
		if n := wire.Conns(t); n != 0 {
			t.Fatalf("%s: the rebound name was dialed: %d connections", c.host, n)
		}
	}
}

// The names of the host's MCP servers (Config.HostMCPNames: the Slack
// app's "slack") are reserved for every session: a request's server with
// one is a 400 that says so, and so is the operator's config at start.
func TestHostMCPNamesReserved(t *testing.T) {
	e := newEnv(t)
	e.m.cfg.HostMCPNames = []string{"slack"}
	ctx := testbin.Context(t)
	_, err := e.m.Create(ctx, "tok-bbbbbbbbbbbb", CreateRequest{Repos: []RepoSpec{{Source: e.Repo}},
		MCPServers: []store.MCPServer{{Name: "slack", Command: []string{"python3", "s.py"}}}})
	if !IsInput(err) || !strings.Contains(err.Error(), `mcp_servers[0]: the name "slack" is taken by a server Harvest itself gives sessions on the host`) {
		t.Fatalf("a request's server named slack: %v, want a 400 saying the name is taken", err)
	}
	if _, err := e.m.Create(ctx, "tok-bbbbbbbbbbbb", CreateRequest{Repos: []RepoSpec{{Source: e.Repo}},
		MCPServers: []store.MCPServer{{Name: "slacker", Command: []string{"python3", "s.py"}}}}); err != nil {
		t.Fatalf("another name: %v", err)
	}
	cfg := Config{Store: e.st, Journal: e.j, DataDir: t.TempDir(), HostMCPNames: []string{"slack"},
		MCP: []agent.MCPServer{{Name: "slack", Command: []string{"true"}, Source: "--mcp-config /etc/harvest/mcp.yaml"}}}
	if err := cfg.check(); err == nil || !strings.Contains(err.Error(), `"slack" (--mcp-config /etc/harvest/mcp.yaml) has a name Harvest's own host MCP server takes`) {
		t.Fatalf("the operator's server named slack: %v", err)
	}
}
