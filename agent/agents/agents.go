// Package agents is the registry of agent kinds and the one place that
// builds an agent (the composition root): sessions and `harvest run` both
// call Open, and adding a kind is one package exporting an agent.Kind plus
// one line in kinds below.
//
// Open wires what every agent needs, once, for every kind, as the kind's
// capabilities ask:
//
//   - the model: an llm.Client on the host for an agent whose loop runs in
//     Harvest; for an agent that runs a CLI in the box (Caps.ModelInBox),
//     a model proxy (package modelproxy) served on a loopback port inside
//     the box, which takes a per-session token and adds the real key on
//     the host, meters usage and enforces the turn's budget:
//
//     CLI in box ──► 127.0.0.1:N (box listener) ══ agentd ══► host: Proxy ──► model API (+ real key)
//
//   - the egress proxy (package egress), served the same way, and the
//     environment (HTTP(S)_PROXY and friends) that points every command
//     the agent runs at it;
//
//   - the instructions (agent.ComposeInstructions: Harvest's, the git
//     workflow on a session branch, the repositories' AGENTS.md or
//     CLAUDE.md and FORK.md), which every kind delivers its own way, and
//     for a kind that does not look for one itself (Caps.ReportsStuck), a
//     STUCK.md the agent wrote, reported as a stuck event at the turn's end;
//
//   - the session's git endpoint (GitEndpoint), served in the box, and its
//     secrets (Request.Env), in the environment of every command;
//
//   - the MCP servers (agent.MCPServer): the caller's and the
//     workspaces' .mcp.json ones (RepoMCP), validated together; stdio
//     ones run in the box, remote and host ones behind one bridge per
//     agent (mcp.go) that adds their credentials on the host and dials
//     every remote one but the operator's through the address policy
//     (Request.MCPGuard, package netguard): a repository's server it
//     refuses is left out, a session's fails the agent;
//
//   - the CLI, checked to be runnable in the box before anything starts;
//
//   - usage for an agent that reports none (Caps.ProxyMeters): the turn's
//     step.finished events are what the proxy measured;
//
//   - the payer (Request.Payer, pay.go), when the caller gives one: every
//     model call is admitted and paid for by it, whichever way it goes (the
//     proxy's Grant.Admit and OnUsage, or the host client's provider), and
//     a turn during which it refused a call ends failed, kind budget, with
//     its message.
//
// Check validates a kind against a model, a backend and the installed CLIs
// before a session is stored or a run starts; Mounts is what its box needs.
//
// # Goroutines
//
// An agent Open returns owns one goroutine per bridge (the model proxy's
// Serve on its listener, the egress proxy's, the git endpoint's, the MCP
// bridge's on their own); its Close stops them (closing the listeners)
// and waits for them.
package agents

import (
	"fmt"
	"slices"
	"strings"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/builtin"
	"github.com/harvest-dev/harvest/agent/claudecode"
	"github.com/harvest-dev/harvest/agent/opencode"
	"github.com/harvest-dev/harvest/agent/terminal"
)

// kinds is every agent kind this Harvest runs, the default first.
var kinds = []agent.Kind{
	builtin.Kind,
	claudecode.Kind,
	opencode.Kind,
	terminal.Kind,
}

// Default is the kind a session or run gets when it names none.
var Default = kinds[0].Name

// Kinds lists the kinds, the default first.
func Kinds() []agent.Kind { return slices.Clone(kinds) }

// Names lists the kinds' names, the default first.
func Names() []string {
	var n []string
	for _, k := range kinds {
		n = append(n, k.Name)
	}
	return n
}

// Lookup finds a kind by name ("" is the default).
func Lookup(name string) (agent.Kind, error) {
	if name == "" {
		name = Default
	}
	for _, k := range kinds {
		if k.Name == name {
			return k, nil
		}
	}
	return agent.Kind{}, fmt.Errorf("agent %q: use %q (Harvest's own loop, the default) or one of %v", name, Default, Names()[1:])
}

// Is reports whether name is a registered kind.
func Is(name string) bool {
	_, err := Lookup(name)
	return err == nil && name != ""
}

func hasLimit(k agent.Kind, name string) bool { return slices.Contains(k.Caps.Limits, name) }

func describeBackends(b []string) string { return strings.Join(b, " or ") }
