package session

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/agents"
	"github.com/harvest-dev/harvest/egress"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/modelproxy"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/secrets"
	"github.com/harvest-dev/harvest/store"
)

// Agents are built in one place, agent/agents (the composition root
// shared with harvest run): the session layer gives it the box, the
// session's model, limits, egress and saved state, and asks the kind's
// capabilities (agent.Capabilities) where it must, never its name. The
// Manager keeps one model proxy per endpoint for the agents that call
// their model from inside the box.

// checkAgent validates a request's agent kind against the model and
// backend it would run with, returning the kind to store. command: the
// request gives the terminal agent a CLI of its own.
func (m *Manager) checkAgent(kind, model, backend string, command bool) (string, []string) {
	k, problems := agents.Check(kind, model, agents.APIOf(m.cfg.Models, model), backend, m.cfg.cliPrefix(), command)
	if k.Name == "" {
		return kind, problems
	}
	return k.Name, problems
}

// kindOf is the session's agent kind (a stored kind this Harvest no longer
// knows has the zero Kind: no capabilities).
func kindOf(name string) agent.Kind {
	k, _ := agents.Lookup(name)
	return k
}

// checkEgress validates a request's egress list against the server's
// allowlist, expanding "registries".
func (m *Manager) checkEgress(req *[]string) (*[]string, []string) {
	if req == nil {
		return nil, nil
	}
	hosts := egress.Expand(*req)
	if len(hosts) == 0 {
		return &hosts, nil // no way out, whatever the server allows
	}
	if m.cfg.Egress == nil {
		return nil, []string{"egress: this server has no egress proxy, so its boxes have no way out; leave egress out (or [] for none), or have the operator start harvest serve with --egress-allow"}
	}
	if len(hosts) > maxEgressHosts {
		return nil, []string{fmt.Sprintf("egress has %d hosts: at most %d", len(hosts), maxEgressHosts)}
	}
	if err := m.cfg.Egress.CheckNarrow(hosts); err != nil {
		return nil, []string{err.Error()}
	}
	return &hosts, nil
}

// egressAllow is the session's narrowing of the egress allowlist (nil:
// all of it) and whether its box gets the egress proxy at all.
func (m *Manager) egressAllow(s *store.Session) (allow []string, bridge bool) {
	switch {
	case m.cfg.Egress == nil:
		return nil, false
	case s.Egress == nil:
		return nil, true
	case len(*s.Egress) == 0:
		return nil, false
	}
	return *s.Egress, true
}

const maxEgressHosts = 256

// Bounds of a request's terminal CLI.
const (
	maxTerminalArgs    = 64
	maxTerminalBytes   = 16 << 10
	maxTerminalPattern = 1 << 10
	minTerminalIdle    = time.Second
	maxTerminalIdle    = 24 * time.Hour
)

// CheckTerminal validates a request's terminal CLI: only for the terminal
// agent; a command of printable arguments; patterns that compile; and a way
// for a turn to end (a done pattern or an idle timeout), since without
// either a turn would wait out the 30-minute default after every answer.
func CheckTerminal(kind string, t *store.TerminalCLI) (*store.TerminalCLI, []string) {
	if t == nil {
		return nil, nil
	}
	var problems []string
	if !kindOf(kind).Caps.TakesCommand {
		var takers []string
		for _, k := range agents.Kinds() {
			if k.Caps.TakesCommand {
				takers = append(takers, k.Name)
			}
		}
		problems = append(problems, fmt.Sprintf("terminal is for agent %q (a CLI in a PTY); remove it or set agent to %q", strings.Join(takers, `" or "`), strings.Join(takers, `" or "`)))
	}
	size := 0
	switch {
	case len(t.Command) == 0:
		problems = append(problems, `terminal.command is empty: give the CLI and its arguments, like ["python3", "-i"]`)
	case len(t.Command) > maxTerminalArgs:
		problems = append(problems, fmt.Sprintf("terminal.command has %d arguments: at most %d", len(t.Command), maxTerminalArgs))
	}
	for i, a := range t.Command {
		size += len(a)
		switch {
		case i == 0 && strings.TrimSpace(a) == "":
			problems = append(problems, "terminal.command[0] is empty: it is the program to run, looked up in the box's PATH")
		case strings.ContainsRune(a, 0):
			problems = append(problems, fmt.Sprintf("terminal.command[%d] contains a NUL byte", i))
		}
	}
	if size > maxTerminalBytes {
		problems = append(problems, fmt.Sprintf("terminal.command is %d bytes: keep it under %d", size, maxTerminalBytes))
	}
	for _, p := range []struct{ name, re string }{{"done_pattern", t.DonePattern}, {"ready_pattern", t.ReadyPattern}} {
		if n := utf8.RuneCountInString(p.re); n > maxTerminalPattern {
			problems = append(problems, fmt.Sprintf("terminal.%s is %d characters: at most %d", p.name, n, maxTerminalPattern))
		} else if _, err := regexp.Compile(p.re); err != nil {
			problems = append(problems, fmt.Sprintf("terminal.%s: %v (Go regular expression syntax)", p.name, err))
		}
	}
	switch {
	case t.IdleTimeout < 0 || t.IdleTimeout > maxTerminalIdle || (t.IdleTimeout > 0 && t.IdleTimeout < minTerminalIdle):
		problems = append(problems, fmt.Sprintf("terminal.idle_timeout %s: give a duration between %s and %s", t.IdleTimeout, minTerminalIdle, maxTerminalIdle))
	case t.DonePattern == "" && t.IdleTimeout == 0:
		problems = append(problems, "terminal: give done_pattern (what the CLI prints when it is ready for more, typically its prompt) or idle_timeout (quiet that ends a turn, like 20s); without either a turn ends only after 30 minutes of silence")
	}
	c := *t
	c.Command = slices.Clone(t.Command)
	return &c, problems
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
	p, err := agents.NewProxy(m.cfg.Models, model, m.log, m.cfg.proxyObserver())
	if err != nil {
		return nil, err
	}
	m.proxies[name] = p
	return p, nil
}

// newAgent makes the session's agent in sb, continuing its saved
// conversation, through the one constructor every agent comes from.
func (r *runner) newAgent(ctx context.Context, sb *sandbox.Sandbox) (agent.Agent, error) {
	s := r.s
	req := agents.Request{
		Kind: s.Agent, Box: sb, Model: s.Model, ModelExplicit: true, Models: r.d.cfg.Models,
		Client: r.d.host.client, Proxy: r.d.host.proxy, CLIPrefix: r.d.cfg.cliPrefix(),
		Limits:    agent.Limits{MaxSteps: s.Limits.MaxSteps, BudgetUSD: s.Limits.BudgetUSD},
		AgentsDir: r.d.cfg.AgentsDir, SessionID: s.ID, State: s.AgentState, Logger: r.log,
		MCPGuard: r.d.cfg.MCPGuard,
	}
	if s.User != "" {
		req.Payer = &payer{st: r.d.st, clock: r.d.clock, user: s.User, log: r.log}
	}
	mcpSecrets, err := r.mcpServers(ctx, &req)
	if err != nil {
		return nil, err
	}
	for _, repo := range s.Repos {
		ws := agent.Workspace{Name: repo.Name, Path: sb.WorkspacePath(repo.Name)}
		if repo.GitHub != "" {
			ws.Branch = repo.Branch
		}
		req.Workspaces = append(req.Workspaces, ws)
	}
	if err := r.withMemory(ctx, sb, &req); err != nil {
		return nil, err
	}
	if allow, ok := r.d.host.egressAllow(s); ok {
		req.Egress, req.EgressAllow = r.d.cfg.Egress, allow
	}
	if r.d.cfg.SessionSecrets != nil {
		repo := ""
		if len(s.Repos) > 0 {
			repo = s.Repos[0].GitHub
		}
		env, err := r.d.cfg.SessionSecrets(ctx, repo, s.Owner)
		if err != nil {
			return nil, fmt.Errorf("the session's secrets: %w", err)
		}
		req.Env = env
	}
	// What the agent prints of a secret it was given, or an MCP server
	// echoes of its credentials, is masked in the events.
	if len(req.Env) > 0 || len(mcpSecrets) > 0 {
		values := mcpSecrets
		for _, kv := range req.Env {
			if _, v, ok := strings.Cut(kv, "="); ok {
				values = append(values, v)
			}
		}
		r.redact = secrets.NewRedactor(values...)
	}
	if f := r.d.cfg.Forge; f != nil && hasForgeRepo(s) {
		ep, err := f.Endpoint(ctx, s, r.forgeEmit)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			return nil, fmt.Errorf("the git endpoint for GitHub: %w", err)
		}
		req.Git = ep
	}
	if t := s.Terminal; t != nil {
		// Validated at create; a stored pattern that no longer compiles
		// fails the session rather than running without its end signal.
		req.Terminal = &agent.Terminal{Command: t.Command, IdleTimeout: t.IdleTimeout}
		var err error
		if req.Terminal.DonePattern, err = compileOptional(t.DonePattern); err != nil {
			return nil, fatal(fmt.Errorf("terminal.done_pattern: %w", err))
		}
		if req.Terminal.ReadyPattern, err = compileOptional(t.ReadyPattern); err != nil {
			return nil, fatal(fmt.Errorf("terminal.ready_pattern: %w", err))
		}
	}
	ag, err := agents.Open(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, fatal(fmt.Errorf("starting the %s agent: %w", s.Agent, err))
	}
	return ag, nil
}

func compileOptional(re string) (*regexp.Regexp, error) {
	if re == "" {
		return nil, nil
	}
	return regexp.Compile(re)
}
