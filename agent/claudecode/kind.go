package claudecode

import (
	"context"

	"github.com/harvest-dev/harvest/agent"
)

// Kind is the Claude Code agent as the registry (agent/agents) lists it.
var Kind = agent.Kind{
	Name:    "claudecode",
	Summary: "the real Claude Code CLI in the box, driven through stream-json",
	Caps: agent.Capabilities{
		ModelInBox: true,
		CLI:        "claude",
		Backends:   []string{"local", "docker"},
		APIs:       []string{"anthropic"},
	},
	Open: func(ctx context.Context, d agent.Deps) (agent.Agent, error) {
		return New(ctx, Config{
			Box: d.Box, Workdir: d.Workspaces[0].Path, CLI: d.CLI,
			ModelURL: d.Model.URL, ModelKey: d.Model.Token, Model: d.Model.ID, Env: d.CommandEnv,
			SessionID: d.SessionID, Logger: d.Logger, Instructions: d.Instructions, MCP: d.MCP,
		}, d.State)
	},
}
