package builtin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/sandbox"
)

// The system prompt is, in order (seed 004, DESIGN.md): Harvest's own
// instructions, the agent definition's instructions, then for each workspace
// its AGENTS.md (or else CLAUDE.md) and its FORK.md. Repository files are read
// inside the box, through the sandbox, like everything in a workspace.

const harvestInstructions = `You are a coding agent run by Harvest. You work alone, in the background, inside a sandbox: nobody is watching to answer questions, so make reasonable decisions and keep going until the task is done.

How to work:
- The repositories are checked out under /workspace (listed below). Work inside them.
- Use the tools to read code before changing it, make focused changes, and run the project's tests or build to check your work.
- Prefer small, verifiable steps. If a command fails, read the error and change your approach instead of repeating it.
- Do not try to reach the network or other machines: the sandbox has no network.
- When you are done, answer with a short summary of what you changed and how you checked it.

If you are blocked — the task cannot be done as asked, or something outside your control stops you — write STUCK.md at the root of the repository you were working in, explaining in plain language: the problem that blocks you, what you tried, and the current state of the work. Then stop.`

// Workspace is a repository as the agent sees it.
type Workspace = agent.Workspace

// maxInstructionFile bounds AGENTS.md / CLAUDE.md / FORK.md.
const maxInstructionFile = 64 << 10

func buildSystemPrompt(ctx context.Context, box *sandbox.Sandbox, def *Definition, ws []Workspace) (string, error) {
	var b strings.Builder
	b.WriteString(harvestInstructions)
	if len(ws) > 0 {
		b.WriteString("\n\nWorkspaces:\n")
		for _, w := range ws {
			fmt.Fprintf(&b, "- %s: %s\n", w.Name, w.Path)
		}
	}
	if def.Prompt != "" {
		fmt.Fprintf(&b, "\n\n# Instructions for this agent (%s)\n\n%s", def.Name, def.Prompt)
	}
	for _, w := range ws {
		for _, group := range [][]string{{"AGENTS.md", "CLAUDE.md"}, {"FORK.md"}} {
			for _, name := range group {
				text, err := readSmall(ctx, box, path.Join(w.Path, name))
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if err != nil {
					return "", fmt.Errorf("reading %s in %s: %w", name, w.Name, err)
				}
				fmt.Fprintf(&b, "\n\n# %s of %s\n\n%s", name, w.Name, text)
				break // AGENTS.md wins over CLAUDE.md
			}
		}
	}
	return b.String(), nil
}

func readSmall(ctx context.Context, box *sandbox.Sandbox, p string) (string, error) {
	data, size, err := box.ReadAt(ctx, p, 0, maxInstructionFile)
	if err != nil {
		return "", err
	}
	text := string(data)
	if size > maxInstructionFile {
		text += fmt.Sprintf("\n\n[truncated: the file has %d bytes]", size)
	}
	return strings.TrimSpace(text), nil
}

// stuckState remembers each workspace's STUCK.md at the start of a turn, so
// that only a new or changed one ends the turn.
type stuckState map[string]string // workspace name → content ("" when absent)

func readStuck(ctx context.Context, box *sandbox.Sandbox, ws []Workspace) stuckState {
	st := stuckState{}
	for _, w := range ws {
		text, err := readSmall(ctx, box, path.Join(w.Path, "STUCK.md"))
		if err == nil {
			st[w.Name] = text
		}
	}
	return st
}

// newStuck returns the workspace and text of a STUCK.md written since before.
func newStuck(ctx context.Context, box *sandbox.Sandbox, ws []Workspace, before stuckState) (string, string, bool) {
	for name, text := range readStuck(ctx, box, ws) {
		if text != "" && text != before[name] {
			return name, text, true
		}
	}
	return "", "", false
}

// LoadDefinition finds agent name: a workspace's .harvest/agents/NAME.md
// (read inside the box), else userDir/NAME.md on the host (the operator's
// own). "default" falls back to the built-in default agent.
func LoadDefinition(ctx context.Context, box *sandbox.Sandbox, ws []Workspace, userDir, name string) (*Definition, error) {
	if name == "" {
		name = "default"
	}
	if !namePattern.MatchString(name) {
		return nil, fmt.Errorf("agent %q: use letters, digits, '.', '-' or '_'", name)
	}
	for _, w := range ws {
		p := path.Join(w.Path, ".harvest/agents", name+".md")
		data, err := box.ReadFile(ctx, p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading agent %s: %w", p, err)
		}
		return ParseDefinition(name, w.Name+":.harvest/agents/"+name+".md", data)
	}
	if userDir != "" {
		p := filepath.Join(userDir, name+".md")
		data, err := os.ReadFile(p)
		if err == nil {
			return ParseDefinition(name, p, data)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("reading agent %s: %w", p, err)
		}
	}
	if name == "default" {
		return &Definition{Name: "default", Source: "built in"}, nil
	}
	where := []string{}
	for _, w := range ws {
		where = append(where, w.Name+"/.harvest/agents/")
	}
	if userDir != "" {
		where = append(where, userDir)
	}
	return nil, fmt.Errorf("agent %q not found: add %s.md to %s", name, name, strings.Join(where, " or "))
}

// contextWindows are the input token limits of model families (prefix match,
// longest first wins). An agent definition's context_window overrides them.
var contextWindows = []struct {
	prefix string
	tokens int
}{
	{"claude-", 200_000},
	{"gpt-4.1", 1_047_576},
	{"gpt-4o", 128_000},
	{"gpt-5", 400_000},
	{"o3", 200_000},
	{"o4", 200_000},
}

// defaultContextWindow is assumed for models not in the table.
const defaultContextWindow = 128_000

func contextWindowOf(model string) int {
	best, n := 0, defaultContextWindow
	for _, c := range contextWindows {
		if strings.HasPrefix(model, c.prefix) && len(c.prefix) > best {
			best, n = len(c.prefix), c.tokens
		}
	}
	return n
}
