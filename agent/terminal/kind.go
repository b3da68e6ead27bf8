package terminal

import (
	"context"

	"github.com/harvest-dev/harvest/agent"
)

// Kind is the terminal agent as the registry (agent/agents) lists it:
// Claude Code's interactive TUI, or any interactive CLI (Deps.Terminal),
// in a PTY. Neither reports usage: the model proxy's metering is the
// turn's.
var Kind = agent.Kind{
	Name:    "terminal",
	Summary: "Claude Code's interactive TUI, or any interactive CLI, in a PTY",
	Caps: agent.Capabilities{
		ModelInBox:   true,
		ProxyMeters:  true,
		CLI:          "claude",
		TakesCommand: true,
		Backends:     []string{"local", "docker"},
		APIs:         []string{"anthropic"},
	},
	Open: func(ctx context.Context, d agent.Deps) (agent.Agent, error) {
		cfg := Config{
			Box: d.Box, Workdir: d.Workspaces[0].Path, CLI: d.CLI,
			ModelURL: d.Model.URL, ModelKey: d.Model.Token, Model: d.Model.ID, Env: d.CommandEnv,
			SessionID: d.SessionID, Logger: d.Logger, Instructions: d.Instructions, MCP: d.MCP,
		}
		if t := d.Terminal; t != nil && len(t.Command) > 0 {
			cfg.Command, cfg.DonePattern, cfg.ReadyPattern, cfg.IdleTimeout = t.Command, t.DonePattern, t.ReadyPattern, t.IdleTimeout
			cfg.Env = append(append([]string(nil), d.CommandEnv...), ModelEnv(d.Model)...)
		}
		return New(ctx, cfg, d.State)
	},
}

// ModelEnv is how a generic CLI finds the model: the bridged proxy's
// in-box URL and the session's token (never the real key) under Harvest's
// own names and the names the API's SDKs read.
func ModelEnv(m agent.Model) []string {
	env := []string{"HARVEST_MODEL_URL=" + m.URL, "HARVEST_MODEL_TOKEN=" + m.Token, "HARVEST_MODEL=" + m.ID, "HARVEST_MODEL_API=" + m.API}
	switch m.API {
	case "anthropic":
		env = append(env, "ANTHROPIC_BASE_URL="+m.URL, "ANTHROPIC_API_KEY="+m.Token)
	case "openai":
		env = append(env, "OPENAI_BASE_URL="+m.URL+"/v1", "OPENAI_API_KEY="+m.Token)
	}
	return env
}
