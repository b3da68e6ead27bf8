package builtin

import (
	"context"
	"fmt"

	"github.com/harvest-dev/harvest/agent"
)

// Kind is the builtin agent as the registry (agent/agents) lists it: the
// loop runs in Harvest and calls the model from the host (the key never
// enters the box); its conversation is checkpointed after every step.
var Kind = agent.Kind{
	Name:    "builtin",
	Summary: "Harvest's own agent loop: the model is called from the host, the tools act in the box",
	Caps: agent.Capabilities{
		StepCheckpoints: true,
		ReportsStuck:    true,
		Limits:          []string{"MaxSteps", "MaxOutputTokens", "Timeout"},
	},
	Open: open,
}

// open makes the agent from the registry's Deps: its definition (from the
// repositories or the operator's directory), with the session's limits
// over the definition's, and the definition's own model when the caller
// named none.
func open(ctx context.Context, d agent.Deps) (agent.Agent, error) {
	def, err := LoadDefinition(ctx, d.Box, d.Workspaces, d.AgentsDir, d.Definition)
	if err != nil {
		return nil, err
	}
	h := &def.Harness
	if d.Limits.MaxSteps > 0 {
		h.MaxSteps = d.Limits.MaxSteps
	}
	if d.Limits.Timeout > 0 {
		h.Timeout = Duration(d.Limits.Timeout)
	}
	if d.Limits.BudgetUSD > 0 {
		h.BudgetUSD = d.Limits.BudgetUSD
	}
	if d.Limits.MaxOutputTokens > 0 {
		h.MaxOutputTokens = d.Limits.MaxOutputTokens
	}
	client := d.Model.Client
	if def.Model != "" && !d.Model.Explicit && d.Model.OpenClient != nil {
		if client, err = d.Model.OpenClient(def.Model); err != nil {
			return nil, fmt.Errorf("agent %s: %w", def.Name, err)
		}
	}
	cfg := Config{
		Client: client, Box: d.Box, Definition: def, Workspaces: d.Workspaces,
		SessionID: d.SessionID, CommandEnv: d.CommandEnv, Logger: d.Logger, Instructions: d.Instructions,
		MCP: d.MCP, MCPGuard: d.MCPGuard,
	}
	if d.Audit != nil {
		cfg.Hooks = append(cfg.Hooks, AuditHook(d.Audit, d.SessionID))
	}
	return New(ctx, cfg, d.State)
}
