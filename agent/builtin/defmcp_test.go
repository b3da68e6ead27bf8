package builtin

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/event"
)

// lintMCPServer is a stdio MCP server (JSON-RPC lines) with two tools: a
// read-only check that says where it runs, and a fix.
const lintMCPServer = `import json, os, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    m, res = msg.get("method"), {}
    if m == "initialize":
        res = {"protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
               "capabilities": {"tools": {}}, "serverInfo": {"name": "lint", "version": "1"}}
    elif m == "tools/list":
        res = {"tools": [
            {"name": "check", "description": "Checks.", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
            {"name": "fix", "description": "Fixes.", "inputSchema": {"type": "object"}}]}
    elif m == "tools/call":
        res = {"content": [{"type": "text", "text": "lint-ok cwd=" + os.getcwd() + " mode=" + os.environ.get("LINT_MODE", "")}]}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": res}) + "\n")
    sys.stdout.flush()
`

const lintDefinition = `---
description: Lints
tools: [read, mcp__lint__check]
permissions: {mode: plan}
mcp_servers:
  lint:
    command: [python3, tools/lint_mcp.py]
    env: {LINT_MODE: strict}
---
You lint.
`

const lintScript = `
rules:
  - name: done
    when: {tool_result: "lint-ok"}
    reply: {text: "Linted.", usage: {input_tokens: 10, output_tokens: 5}}
  - name: check
    when: {tools: [mcp__lint__check]}
    reply:
      tool_calls: [{name: mcp__lint__check, input: {}}]
      usage: {input_tokens: 10, output_tokens: 5}
`

// An agent definition's mcp_servers: a stdio server from the repository's
// definition runs in the box, in the definition's repository, with its
// env; its tools go through the definition's tools list (check offered,
// fix not) and plan mode (check is read-only, so it runs).
func TestDefinitionMCPServers(t *testing.T) {
	h := newHarness(t, lintScript)
	h.write("tools/lint_mcp.py", lintMCPServer)
	h.write(".harvest/agents/linter.md", lintDefinition)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	def, err := LoadDefinition(ctx, h.box, []Workspace{{Name: h.wsName, Path: h.ws()}}, "", "linter")
	if err != nil {
		t.Fatal(err)
	}
	if len(def.MCP) != 1 || def.MCP[0].Dir != h.ws() || def.MCP[0].Source != "agent definition w:.harvest/agents/linter.md" {
		t.Fatalf("the definition's servers: %+v", def.MCP)
	}
	a := h.agent(def)
	out, rec := h.turn(a, "lint it")
	if f := mustFinish(t, out); f.Result != "Linted." {
		t.Fatalf("finished with %q", f.Result)
	}
	fin := ofType[event.ToolFinished](rec.all())
	if len(fin) != 1 || fin[0].Tool != "mcp__lint__check" || fin[0].IsError || fin[0].Output != "lint-ok cwd="+h.ws()+" mode=strict" {
		t.Fatalf("tool calls: %+v", fin)
	}
	body := h.bodies()[0]
	if !strings.Contains(body, `"mcp__lint__check"`) || strings.Contains(body, "mcp__lint__fix") || strings.Contains(body, `"bash"`) {
		t.Fatalf("the tools offered are not the definition's: %s", body)
	}
}

// What a definition may list: stdio servers only, with valid names; and
// the caller's servers win a name.
func TestDefinitionMCPServersChecked(t *testing.T) {
	for text, want := range map[string]string{
		"---\nmcp_servers: {gh: {url: 'https://h/mcp'}}\n---\n":     "mcp_servers.gh: a definition lists stdio servers only",
		"---\nmcp_servers: {Lint: {command: [x]}}\n---\n":           `MCP server "Lint" (agent definition test.md): the name must be`,
		"---\nmcp_servers: {lint: {}}\n---\n":                       `give exactly one of command`,
		"---\nmcp_servers: {lint: {command: [x], hdrs: {}}}\n---\n": "field hdrs not found",
	} {
		if _, err := ParseDefinition("test", "test.md", []byte(text)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", text, err, want)
		}
	}
	def := parseDef(t, "---\nmcp_servers: {lint: {command: [python3, a.py]}, docs: {command: [d]}}\n---\n")
	caller := []agent.MCPServer{{Name: "lint", URL: "http://h/mcp", Source: "the session's mcp_servers"}}
	got := withDefinitionMCP(caller, def, slog.New(slog.DiscardHandler))
	if len(got) != 2 || got[0].URL == "" || got[1].Name != "docs" {
		t.Fatalf("merged: %+v", got)
	}
}
