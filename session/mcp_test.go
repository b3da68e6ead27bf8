package session

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/claudecode"
	"github.com/harvest-dev/harvest/agent/opencode"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox/local"
	"github.com/harvest-dev/harvest/sim"
	"github.com/harvest-dev/harvest/store"
)

// mcpCanary is the remote MCP server's token: the bridge adds it on the
// host; it must be nowhere in the box nor in the session's events.
const mcpCanary = "mcp-canary-5be1c07d93aa4f62-never-in-the-box"

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
// answers; each kind names MCP tools its own way (Claude Code's and the
// builtin's mcp__SERVER__TOOL, OpenCode's SERVER_TOOL).
const mcpScript = `
rules:
  - name: title
    when: {api: anthropic, system: "Generate a concise, sentence-case title"}
    reply: {text: '{"title": "Use MCP"}', usage: {input_tokens: 100, output_tokens: 10}}
  - name: done
    when: {last_user: "use the mcp tools", tool_result: "notes-fact-4410"}
    reply: {text: "All MCP tools answered.", usage: {input_tokens: 100, output_tokens: 10}}
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
// with the canary token; calls counts its tool's calls.
func remoteMCP(t *testing.T) (*httptest.Server, *atomic.Int32) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	var calls atomic.Int32
	mcp.AddTool(srv, &mcp.Tool{Name: "secret_fact", Description: "A fact only the remote server knows."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			calls.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "remote-fact-7781"}}}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+mcpCanary {
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
// .mcp.json runs inside the box, and a remote one from the server's config
// and one Harvest serves on the host (a Handler, like the memory) are
// reached through the bridge, from every kind of agent; their calls
// are ordinary tool.started and tool.finished events; the remote server's
// token is nowhere in the box nor in the events.
func TestMCPEveryAgent(t *testing.T) {
	for _, kind := range []string{AgentBuiltin, claudecode.Kind.Name, opencode.Kind.Name} {
		t.Run(kind, func(t *testing.T) { testMCPAgent(t, kind) })
	}
}

func testMCPAgent(t *testing.T, kind string) {
	switch kind {
	case opencode.Kind.Name:
		testbin.OpenCode(t)
	case claudecode.Kind.Name:
		testbin.Claude(t)
	}
	remote, calls := remoteMCP(t)
	e := newEnv(t, withKey(canaryKey), withDisks, withMCP(agent.MCPServer{
		Name: "remote", URL: remote.URL, Headers: map[string]string{"Authorization": "Bearer " + mcpCanary},
		Source: "the server's --mcp-config",
	}, agent.MCPServer{Name: "notes", Handler: notesMCP(t), Source: "Harvest"}))
	s, err := sim.ParseScript("mcp.yaml", []byte(mcpScript))
	if err != nil {
		t.Fatal(err)
	}
	e.Sim.Store(sim.New(s))
	mcpJSON := `{"mcpServers": {"box": {"command": "python3", "args": ["mcp_box.py"]}}}`
	for name, body := range map[string]string{".mcp.json": mcpJSON, "mcp_box.py": boxMCPServer} {
		if err := os.WriteFile(filepath.Join(e.Repo, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	v := e.create("Please use the mcp tools.", func(r *CreateRequest) { r.Agent, r.Backend = kind, local.Name })
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
		!strings.Contains(all, "notes-fact-4410 on mcp") {
		t.Fatalf("the tools' results (started %v):\n%s", started, all)
	}
	if calls.Load() != 1 {
		t.Fatalf("the remote server's tool ran %d times, want 1", calls.Load())
	}

	// While the agent (and its stdio server) runs: the canary is nowhere
	// in the box.
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
		if strings.Contains(string(b), mcpCanary[:24]) {
			t.Fatalf("event %d carries the remote server's token: %s", ev.Seq, b)
		}
	}
}

// closeSessions ends what a client that left without ending its session
// (a CLI killed with its box) left open on srv.
func closeSessions(srv *mcp.Server) {
	for ss := range srv.Sessions() {
		ss.Close()
	}
}
