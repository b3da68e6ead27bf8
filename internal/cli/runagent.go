package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/agents"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/providers"
	"github.com/harvest-dev/harvest/sandbox"
)

// How harvest run picks, checks and builds its agent (through the registry,
// as sessions do).

// agentKind is the kind --agent names: an agent kind, else (a definition's
// name, or none) the default kind, Harvest's own loop.
func agentKind(name string) (agent.Kind, string) {
	if agents.Is(name) {
		k, _ := agents.Lookup(name)
		return k, ""
	}
	k, _ := agents.Lookup("")
	return k, name
}

// checkAgent says what stops the agent --agent names from running with
// these flags and this model.
func checkAgent(f agentRunFlags, model *modelSetup) (agent.Kind, error) {
	kind, _ := agentKind(f.agentName)
	if !kind.Caps.ModelInBox {
		return kind, nil // the default kind runs anywhere, on any model
	}
	command := f.terminal.command != "" && kind.Caps.TakesCommand
	switch {
	case model.demo && !command:
		return kind, fmt.Errorf("the %s agent needs a model: set ANTHROPIC_API_KEY (or give --model), or run it on harvest sim with --sim-script FILE (the bundled demo script is written for the builtin agent)", kind.Name)
	case agents.CheckBackend(kind, f.backend) != nil:
		return kind, fmt.Errorf("--agent %s: %v", kind.Name, agents.CheckBackend(kind, f.backend))
	case (f.maxSteps > 0 && !hasLimit(kind, "MaxSteps")) || (f.maxOutput > 0 && !hasLimit(kind, "MaxOutputTokens")):
		return kind, fmt.Errorf("--max-steps and --max-output-tokens are the builtin agent's; the %s agent's CLI has its own", kind.Name)
	case command:
		return kind, nil // its own CLI, in the box's PATH
	}
	if err := agents.CheckModel(kind, agents.APIOf(model.models, model.name)); err != nil {
		return kind, fmt.Errorf("--model %s: %w", model.name, err)
	}
	return kind, agents.CheckCLI(cliPrefix(), kind)
}

func hasLimit(k agent.Kind, name string) bool { return slices.Contains(k.Caps.Limits, name) }

// hasOwnTimeout: the kind enforces --timeout itself (its harness has a
// turn timeout, as the builtin loop's does); else the run's context does.
func hasOwnTimeout(k agent.Kind) bool { return hasLimit(k, "Timeout") }

// openAgent makes the agent through the one constructor every agent comes
// from (agent/agents), as sessions do.
func openAgent(ctx context.Context, f agentRunFlags, kind agent.Kind, model *modelSetup, box *sandbox.Sandbox, ws []agent.Workspace, runID string, audit io.Writer) (agent.Agent, error) {
	_, def := agentKind(f.agentName)
	req := agents.Request{
		Kind: kind.Name, Box: box, Workspaces: ws,
		Model: model.name, Models: model.models,
		// The agent definition may name its model unless the flags,
		// HARVEST_MODEL or the sim chose one.
		ModelExplicit: f.model != "" || os.Getenv("HARVEST_MODEL") != "" || model.notice != "",
		Client: func(name string) (*llm.Client, error) {
			if name == model.name {
				return model.client, nil
			}
			return providers.Open(providers.FromEnv(), name)
		},
		CLIPrefix:  cliPrefix(),
		Limits:     agent.Limits{MaxSteps: f.maxSteps, MaxOutputTokens: f.maxOutput, Timeout: f.timeout, BudgetUSD: f.budget},
		Definition: def, AgentsDir: agentsDir(), Audit: audit, SessionID: runID,
	}
	var err error
	if req.MCPGuard, err = f.mcpGuard(); err != nil { // validated with the flags
		return nil, err
	}
	if f.egress != "" {
		eg, err := openEgress(f.egress, nil, nil, nil)
		if err != nil {
			return nil, err
		}
		req.Egress = eg
	}
	if t, _ := f.terminal.spec(f.agentName); t != nil { // validated with the flags
		req.Terminal = &agent.Terminal{Command: t.Command, IdleTimeout: t.IdleTimeout}
		req.Terminal.DonePattern, req.Terminal.ReadyPattern = compiled(t)
	}
	return agents.Open(ctx, req)
}
