package cli

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/wire"
)

// memoryScript: "remember the build" stores a fact through the memory MCP
// server's create_entities; "recall the build" searches for it; both end
// once their tool answered. Claude Code and the builtin agent name the
// tools mcp__memory__TOOL.
const memoryScript = `
rules:
  - name: title
    when: {api: anthropic, system: "Generate a concise, sentence-case title"}
    reply: {text: '{"title": "Memory"}', usage: {input_tokens: 100, output_tokens: 10}}
  - name: stored
    when: {last_user: "remember the build", tool_result: "entities"}
    reply: {text: "Stored.", usage: {input_tokens: 100, output_tokens: 10}}
  - name: store
    when: {last_user: "remember the build", tools: [mcp__memory__create_entities]}
    reply:
      tool_calls: [{name: mcp__memory__create_entities, input: {entities: [{name: build, entityType: howto, observations: ["run make check-fast before pushing"]}]}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: recalled-with-digest
    when: {last_user: "recall the build", tool_result: "entities", system: "run make check-fast before pushing"}
    reply: {text: "Recalled; the digest had it.", usage: {input_tokens: 100, output_tokens: 10}}
  - name: recalled
    when: {last_user: "recall the build", tool_result: "entities"}
    reply: {text: "Recalled.", usage: {input_tokens: 100, output_tokens: 10}}
  - name: recall
    when: {last_user: "recall the build", tools: [mcp__memory__search_nodes]}
    reply:
      tool_calls: [{name: mcp__memory__search_nodes, input: {query: "check-fast"}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

// TestMemoryAcrossSessions is issue 14's memory acceptance: session A
// (Claude Code, the real CLI) stores a fact through the memory MCP tools;
// after a kill -9 of serve, session B on the same repository (the builtin
// agent) finds it by search, and its instructions carry it in the memory's
// digest;
// session C on another repository does not; deleting it with `harvest
// memory rm` removes it for the next session. The repository's README
// seeded the memory on its first session.
func TestMemoryAcrossSessions(t *testing.T) {
	testbin.Claude(t)
	e := newServeEnvWith(t, memoryScript)
	newRepo := func(name, readme string) string {
		dir := filepath.Join(testbin.TempDir(t), name)
		os.Mkdir(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "README.md"), []byte(readme), 0o644)
		testbin.Git(t, dir, "init", "-q", "-b", "main")
		testbin.Git(t, dir, "add", "-A")
		testbin.Git(t, dir, "commit", "-q", "-m", "first")
		resolved, _ := filepath.EvalSymlinks(dir)
		return resolved
	}
	repoA := newRepo("alpha", "# Alpha\n\nAlpha computes orbits for small satellites.\n")
	repoC := newRepo("gamma", "# Gamma\n\nGamma is another project.\n")
	s := e.start()
	c := e.client(s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// runSession runs prompt on repo with agent and returns its memory
	// tool's output and its final answer.
	runSession := func(repo, agentKind, prompt string) (string, string) {
		t.Helper()
		v, err := c.CreateSession(ctx, wire.CreateRequest{Agent: agentKind, Repos: []wire.RepoSpec{{Source: repo}}, Prompt: prompt})
		if err != nil {
			t.Fatal(err)
		}
		evs := follow(t, c, v.ID, 0, "the memory tool's answer", func(ev event.Event) bool {
			d, ok := ev.Data.(event.ToolFinished)
			return ok && strings.HasPrefix(d.Tool, "mcp__memory__")
		})
		d := evs[len(evs)-1].Data.(event.ToolFinished)
		if d.IsError || d.Blocked != "" {
			t.Fatalf("%s session %s: the memory tool failed (%s):\n%s", agentKind, v.ID, d.Blocked, d.Output)
		}
		evs = follow(t, c, v.ID, 0, "the turn's end", func(ev event.Event) bool { _, ok := ev.Data.(event.TurnFinished); return ok })
		return d.Output, evs[len(evs)-1].Data.(event.TurnFinished).Result
	}

	runSession(repoA, "claudecode", "remember the build")

	s.cmd.Process.Signal(syscall.SIGKILL)
	s.wait()
	s = e.start()
	c = e.client(s)

	out, answer := runSession(repoA, "builtin", "recall the build")
	if !strings.Contains(out, "run make check-fast before pushing") {
		t.Fatalf("session B on the same repository did not find the fact:\n%s", out)
	}
	if answer != "Recalled; the digest had it." {
		t.Errorf("session B's instructions lacked the memory's digest: it answered %q", answer)
	}
	if out, answer := runSession(repoC, "builtin", "recall the build"); strings.Contains(out, "check-fast") || answer != "Recalled." {
		t.Fatalf("session C on another repository found the fact (%q):\n%s", answer, out)
	}

	harvest := func(args ...string) string {
		t.Helper()
		env := append(slices.Clone(e.env), "HARVEST_SERVER="+s.url, "HARVEST_TOKEN=")
		code, out, errOut := runHarvest(t, env, "", args...)
		if code != 0 {
			t.Fatalf("harvest %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	// The fact records the Claude Code session and its turn; the README
	// seeded the repository's memory on its first session.
	out = harvest("memory", "search", "--repo", repoA, "check-fast")
	if !strings.Contains(out, "run make check-fast before pushing") || !strings.Contains(out, "turn 1") {
		t.Errorf("harvest memory search:\n%s", out)
	}
	if out := harvest("memory", "search", "--repo", repoA, "satellites"); !strings.Contains(out, "orbits for small satellites") {
		t.Errorf("the README did not seed the memory:\n%s", out)
	}
	harvest("memory", "rm", "--repo", repoA, "build")
	if out, _ := runSession(repoA, "builtin", "recall the build"); strings.Contains(out, "check-fast") {
		t.Fatalf("after harvest memory rm, a session still found the fact:\n%s", out)
	}
}
