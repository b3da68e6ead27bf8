package session

import (
	"context"
	"fmt"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/external"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/modelproxy"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local"
)

// External agents (Claude Code, OpenCode, a CLI in a terminal) run their
// CLI in the session's box and call the model through the Manager's model
// proxy, bridged into the box (package agent/external). The proxy holds
// the real keys; the box gets a per-session token.

// checkAgent validates a request's agent kind against the model and
// backend it would run with, returning the kind to store.
func (m *Manager) checkAgent(kind, model, backend string) (string, []string) {
	switch {
	case kind == "" || kind == AgentBuiltin:
		return AgentBuiltin, nil
	case !external.IsKind(kind):
		return kind, []string{fmt.Sprintf("agent %q: use %q (Harvest's own loop, the default) or one of %v", kind, AgentBuiltin, external.Kinds)}
	}
	var problems []string
	if err := external.CheckCLI(m.cfg.cliPrefix(), kind); err != nil {
		problems = append(problems, "agent: "+err.Error())
	}
	if backend != local.Name {
		problems = append(problems, fmt.Sprintf("agent %q runs on the %q backend only for now (its CLI needs the host's Node.js); leave backend empty or use %q", kind, local.Name, local.Name))
	}
	if api := m.endpointAPI(model); api != "" {
		if err := external.CheckModel(kind, api); err != nil {
			problems = append(problems, fmt.Sprintf("model %q: %v", model, err))
		}
	}
	return kind, problems
}

// endpointAPI is the wire API of model's endpoint, "" when it has none
// configured.
func (m *Manager) endpointAPI(model string) string {
	name, _, err := llm.ParseModel(model)
	if err != nil {
		return ""
	}
	e, ok := m.cfg.Models.Endpoints[name]
	if !ok {
		return ""
	}
	if e.API != "" {
		return e.API
	}
	return name
}

// proxy returns the model proxy for model's endpoint, made on first use.
func (m *Manager) proxy(model string) (*modelproxy.Proxy, error) {
	name, _, err := llm.ParseModel(model)
	if err != nil {
		return nil, err
	}
	m.pmu.Lock()
	defer m.pmu.Unlock()
	if p, ok := m.proxies[name]; ok {
		return p, nil
	}
	p, _, err := external.NewProxy(m.cfg.Models, model, m.log)
	if err != nil {
		return nil, err
	}
	m.proxies[name] = p
	return p, nil
}

// boxMounts is what the session's agent needs in its box besides the
// workspaces.
func (m *Manager) boxMounts(kind string) []sandbox.Mount {
	if !external.IsKind(kind) {
		return nil
	}
	return external.Mounts(m.cfg.cliPrefix(), kind)
}

// newExternal opens the session's external agent in sb.
func (r *runner) newExternal(ctx context.Context, sb *sandbox.Sandbox) (agent.Agent, error) {
	s := r.s
	p, err := r.m.proxy(s.Model)
	if err != nil {
		return nil, fatal(err)
	}
	_, id, err := llm.ParseModel(s.Model)
	if err != nil {
		return nil, fatal(err)
	}
	ag, err := external.Open(ctx, external.Spec{
		Kind: s.Agent, Box: sb, Workdir: sb.WorkspacePath(s.Repos[0].Name),
		CLIPrefix: r.m.cfg.cliPrefix(), Model: id, API: r.m.endpointAPI(s.Model), Proxy: p, BudgetUSD: s.Limits.BudgetUSD,
		SessionID: s.ID, State: s.AgentState, Logger: r.log, Egress: r.m.cfg.Egress,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, fatal(fmt.Errorf("starting the %s agent: %w", s.Agent, err))
	}
	return ag, nil
}
