package opencode

import (
	"context"

	"github.com/harvest-dev/harvest/agent"
)

// Kind is the OpenCode agent as the registry (agent/agents) lists it.
var Kind = agent.Kind{
	Name:    "opencode",
	Summary: "an OpenCode server in the box, driven through its HTTP API",
	Caps: agent.Capabilities{
		ModelInBox: true,
		CLI:        "opencode",
		Backends:   []string{"local", "docker"},
	},
	Open: func(ctx context.Context, d agent.Deps) (agent.Agent, error) {
		return New(ctx, Config{
			Box: d.Box, Workdir: d.Workspaces[0].Path, CLI: d.CLI,
			ModelURL: d.Model.URL, ModelKey: d.Model.Token, Model: d.Model.ID, API: d.Model.API, Env: d.CommandEnv,
			SessionID: d.SessionID, Logger: d.Logger, Instructions: d.Instructions, MCP: d.MCP,
		}, d.State)
	},
}
