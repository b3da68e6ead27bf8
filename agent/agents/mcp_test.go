package agents

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/harvest-dev/harvest/agent"
)

// The bridge's host side: the session's token is required and dropped,
// the server's credentials are added on the host, unknown servers are
// refused with the known ones, and a streamed response flows event by
// event (the second is sent only once the client has read the first).
func TestMCPBridge(t *testing.T) {
	const real = "Bearer real-credential"
	release := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); got != real {
			http.Error(w, "upstream saw Authorization "+got, http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/v1/mcp" || r.URL.RawQuery != "x=1" {
			http.Error(w, "upstream saw "+r.URL.String(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: two\n\n")
	}))
	defer upstream.Close()
	// The upstream is on loopback: the operator allows it (its port only).
	b, err := newMCPBridge([]agent.MCPServer{{Name: "up", URL: upstream.URL + "/v1/mcp", Headers: map[string]string{"Authorization": real}}},
		allowing(t, upstream.Listener.Addr().String()), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer b.stop()
	box := httptest.NewServer(b)
	defer box.Close()

	get := func(path, token string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", box.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, tok := range []string{"", "harvest-mcp-wrong", "real-credential"} {
		resp := get("/mcp/up", tok)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "session's token") {
			t.Errorf("token %q: %d %s", tok, resp.StatusCode, body)
		}
	}
	resp := get("/mcp/nope", b.token)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "/mcp/up") {
		t.Errorf("unknown server: %d %s", resp.StatusCode, body)
	}

	resp = get("/mcp/up?x=1", b.token)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("through the bridge: %d %s", resp.StatusCode, body)
	}
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || line != "data: one\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	close(release)
	rest, _ := io.ReadAll(r)
	if !strings.Contains(string(rest), "data: two") {
		t.Fatalf("second event: %q", rest)
	}

	// forKind: a CLI gets the bridge and the session's token, never the
	// credential; the host loop gets a Handler.
	servers := []agent.MCPServer{{Name: "box", Command: []string{"python3", "s.py"}}, {Name: "up", URL: upstream.URL, Headers: map[string]string{"Authorization": real}}}
	cli := b.forKind(servers, "http://127.0.0.1:7")
	if cli[0].Command[0] != "python3" || cli[1].URL != "http://127.0.0.1:7/mcp/up" || cli[1].Headers["Authorization"] != "Bearer "+b.token {
		t.Errorf("for a CLI: %+v", cli)
	}
	host := b.forKind(servers, "")
	if host[1].Handler == nil || host[1].URL != "" || len(host[1].Headers) != 0 {
		t.Errorf("for the host loop: %+v", host)
	}
}

// A host server (a Handler, like the memory) answers an MCP client that
// comes through the bridge with the session's token.
func TestMCPBridgeHandler(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "notes", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "hello"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hi from the host"}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	b, err := newMCPBridge([]agent.MCPServer{{Name: "notes", Handler: h}}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer b.stop()
	box := httptest.NewServer(b)
	defer box.Close()
	hc := &http.Client{Transport: tokenTransport(b.token)}
	cl := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := cl.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: box.URL + "/mcp/notes", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "hello", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if txt := res.Content[0].(*mcp.TextContent).Text; txt != "hi from the host" {
		t.Fatalf("tool said %q", txt)
	}
}

type tokenTransport string

func (tok tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(tok))
	return http.DefaultTransport.RoundTrip(r)
}

// A repository's .mcp.json in Claude Code's format: stdio servers run in
// the repository; remote ones keep only literal headers; what Harvest
// cannot bridge is left out with a warning; a malformed file is refused
// saying where and what shape is expected.
func TestParseMCPJSON(t *testing.T) {
	servers, warnings, err := ParseMCPJSON([]byte(`{"mcpServers": {
		"docs": {"command": "python3", "args": ["d.py"], "env": {"K": "v"}},
		"api": {"type": "http", "url": "https://api.example.com/mcp", "headers": {"X-Team": "a", "Authorization": "Bearer ${API_KEY}"}},
		"old": {"type": "sse", "url": "https://old.example.com/sse"}
	}}`), ".mcp.json of repo", "/workspace/repo")
	if err != nil {
		t.Fatal(err)
	}
	if len(servers) != 2 || servers[0].Name != "api" || servers[1].Name != "docs" {
		t.Fatalf("servers %+v", servers)
	}
	if api := servers[0]; api.URL != "https://api.example.com/mcp" || api.Headers["X-Team"] != "a" || api.Headers["Authorization"] != "" || api.Source != ".mcp.json of repo" || api.Operator {
		t.Errorf("api %+v", api)
	}
	if docs := servers[1]; strings.Join(docs.Command, " ") != "python3 d.py" || docs.Dir != "/workspace/repo" || docs.Env["K"] != "v" {
		t.Errorf("docs %+v", docs)
	}
	if w := strings.Join(warnings, "\n"); !strings.Contains(w, `"old" uses the legacy SSE transport`) || !strings.Contains(w, "header Authorization names a variable") {
		t.Errorf("warnings %q", warnings)
	}
	for body, want := range map[string]string{
		`{"mcpServers": `:                                        "is not valid JSON",
		`{"mcpServers": {"a": {"comand": "x"}}}`:                 `server "a": json: unknown field "comand"`,
		`{"mcpServers": {"a": {"args": ["x"]}}}`:                 `server "a" has no command`,
		`{"mcpServers": {"a": {"type": "ws", "url": "ws://h"}}}`: `has type "ws"`,
		`{"mcpServers": {"A b": {"command": "x"}}}`:              "the name must be",
	} {
		if _, _, err := ParseMCPJSON([]byte(body), ".mcp.json of repo", "/w"); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), ".mcp.json of repo") {
			t.Errorf("%s: %v, want an error with %q", body, err, want)
		}
	}
}

// The server's MCP config: YAML, unknown fields refused, ${file:PATH}
// read at load, ${secret:NAME} kept for each session
// (ExpandMCPSecrets), any other reference refused.
func TestLoadMCPConfig(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(body string) string {
		p := filepath.Join(dir, "mcp.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	servers, err := LoadMCPConfig(write(`servers:
  docs: {command: [python3, /opt/d.py], env: {K: v}}
  gh:
    url: https://mcp.example.com/mcp
    headers: {Authorization: "Bearer ${secret:GH_MCP}", X-File: "${file:` + tokenFile + `}"}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(servers) != 2 || servers[0].Name != "docs" || servers[1].Headers["X-File"] != "file-token" || !strings.HasPrefix(servers[1].Source, "--mcp-config ") || !servers[1].Operator {
		t.Fatalf("servers %+v", servers)
	}
	got, used, err := ExpandMCPSecrets(servers, []string{"OTHER=x", "GH_MCP=s3cret"})
	if err != nil || got[1].Headers["Authorization"] != "Bearer s3cret" || servers[1].Headers["Authorization"] != "Bearer ${secret:GH_MCP}" {
		t.Fatalf("expanded %+v, %v (the loaded list must stay as it was)", got, err)
	}
	if !slices.Equal(used, []string{"s3cret"}) {
		t.Fatalf("the values put in: %q, want only the secret's (to mask it in events)", used)
	}
	if _, _, err := ExpandMCPSecrets(servers, nil); err == nil || !strings.Contains(err.Error(), "names the secret GH_MCP") || !strings.Contains(err.Error(), "harvest secret set") {
		t.Fatalf("a missing secret: %v", err)
	}
	for body, want := range map[string]string{
		"servers: {a: {comand: [x]}}": "field comand not found",
		"servers: {}":                 "lists no servers",
		"servers: {a: {url: https://h/, headers: {A: '${env:X}'}}}":                     "${env:...} is not known",
		"servers: {a: {url: https://h/, headers: {A: '${file:/nonexistent-harvest}'}}}": "${file:/nonexistent-harvest}",
		"servers: {a: {url: 'ftp://h/'}}":                                               "absolute http:// or https:// URL",
	} {
		if _, err := LoadMCPConfig(write(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", body, err, want)
		}
	}
}
