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

// The system prompt is the agent's instructions (agent.ComposeInstructions,
// composed by the registry for every kind) and then the agent
// definition's own.

// Workspace is a repository as the agent sees it.
type Workspace = agent.Workspace

func buildSystemPrompt(ctx context.Context, box *sandbox.Sandbox, instructions string, def *Definition, ws []Workspace) (string, error) {
	if instructions == "" {
		var err error
		if instructions, err = agent.ComposeInstructions(ctx, box, ws); err != nil {
			return "", err
		}
	}
	if def.Prompt != "" {
		instructions += fmt.Sprintf("\n\n# Instructions for this agent (%s)\n\n%s", def.Name, def.Prompt)
	}
	return instructions, nil
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
		def, err := ParseDefinition(name, w.Name+":.harvest/agents/"+name+".md", data)
		if err != nil {
			return nil, err
		}
		for i := range def.MCP {
			if def.MCP[i].Dir == "" {
				def.MCP[i].Dir = w.Path // the definition's repository
			}
		}
		return def, nil
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
