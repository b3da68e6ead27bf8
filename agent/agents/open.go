package agents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/egress"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/providers"
	"github.com/harvest-dev/harvest/modelproxy"
	"github.com/harvest-dev/harvest/netguard"
	"github.com/harvest-dev/harvest/sandbox"
)

// Request is an agent to build: its kind, its box, and what the caller
// (a session, a run) decides — everything else Open wires.
type Request struct {
	// Kind names the agent kind ("" the default).
	Kind string
	// Box is started by the caller with Mounts(kind, CLIPrefix).
	Box *sandbox.Sandbox
	// Workspaces are the repositories in the box; the agent starts in the
	// first. Required.
	Workspaces []agent.Workspace
	// Model is Harvest's model name ("endpoint/model"); Models configures
	// its endpoint. ModelExplicit: the caller chose it, so an agent
	// definition's own model does not override it.
	Model         string
	ModelExplicit bool
	Models        providers.Config
	// Client opens a host-side client for a model (nil: providers.Open
	// on Models). A session passes its cache; a run, the client it made.
	Client func(model string) (*llm.Client, error)
	// Proxy returns the model proxy for a model's endpoint (nil: a new
	// one from Models). A server shares one per endpoint.
	Proxy func(model string) (*modelproxy.Proxy, error)
	// Egress, when set, lets the agent's commands reach the hosts it
	// allows (package registries); EgressAllow, when not nil, narrows it
	// for this agent. Nil: no way out of the box.
	Egress      *egress.Proxy
	EgressAllow []string
	// CLIPrefix is the npm prefix the CLIs are installed under
	// (DefaultCLIPrefix when empty).
	CLIPrefix string
	// Payer, when set, admits and pays for every model call of the agent
	// (pay.go): a turn during which it refused a call ends as a budget
	// failure with its message. Nil: the calls are only the session's
	// Limits'.
	Payer Payer
	// Limits bound the turns; BudgetUSD is also enforced by the model
	// proxy for an agent that calls the model from the box.
	Limits agent.Limits
	// Definition and AgentsDir: see agent.Deps.
	Definition, AgentsDir string
	Terminal              *agent.Terminal
	Instructions          string
	Audit                 io.Writer
	SessionID             string
	// Env is added to the environment of every command the agent runs
	// (KEY=VALUE: the secrets a session is given).
	Env []string
	// Git, when set, is the session's git endpoint, served in the box;
	// its environment is added to every command the agent runs. Open
	// takes it: the agent's Close (or a failed Open) closes it.
	Git GitEndpoint
	// State is what the previous agent's State returned.
	State []byte
	// MCP are the caller's MCP servers (the session's, the server's
	// config's), each with its Source; Open adds the workspaces'
	// .mcp.json ones (RepoMCP). A repository's server named like one of
	// these is left out (the caller's win); a name listed twice among
	// the caller's, or among a repository's, is an error naming both
	// places.
	MCP []agent.MCPServer
	// MCPGuard checks and dials every remote MCP server but the
	// operator's (agent.MCPServer.Operator): a session's, a repository's
	// .mcp.json (one it refuses is left out, said in the log). Nil is
	// netguard's default policy: no allowances.
	MCPGuard *netguard.Guard
	Logger   *slog.Logger
}

// Open builds the agent req asks for, with everything wired (see the
// package doc). The caller closes the agent; the box stays the caller's.
// Errors say what to fix; a cancelled ctx's error is ctx's.
func Open(ctx context.Context, req Request) (agent.Agent, error) {
	gitTaken := false // by the bridge, which closes it
	defer func() {
		if req.Git != nil && !gitTaken {
			req.Git.Close()
		}
	}()
	k, err := Lookup(req.Kind)
	if err != nil {
		return nil, err
	}
	if req.Box == nil || len(req.Workspaces) == 0 {
		return nil, errors.New("agents.Open: a box and a workspace are required")
	}
	if req.Logger == nil {
		req.Logger = slog.New(slog.DiscardHandler)
	}
	if req.CLIPrefix == "" {
		req.CLIPrefix = DefaultCLIPrefix
	}
	d := agent.Deps{
		Box: req.Box, Workspaces: req.Workspaces, Limits: req.Limits,
		Definition: req.Definition, AgentsDir: req.AgentsDir, Terminal: req.Terminal,
		Instructions: req.Instructions, Audit: req.Audit, SessionID: req.SessionID,
		State: req.State, Logger: req.Logger, MCPGuard: req.MCPGuard,
	}
	if d.Instructions == "" {
		if d.Instructions, err = agent.ComposeInstructions(ctx, req.Box, req.Workspaces); err != nil {
			return nil, fmt.Errorf("the agent's instructions: %w", err)
		}
	}
	ownCommand := k.Caps.TakesCommand && req.Terminal != nil && len(req.Terminal.Command) > 0
	if k.Caps.CLI != "" && !ownCommand {
		d.CLI = CLIPath(req.CLIPrefix, k.Caps.CLI)
		if err := checkLoader(ctx, req.Box, d.CLI, k.Name); err != nil {
			return nil, err
		}
	}
	_, id, err := llm.ParseModel(req.Model)
	if err != nil {
		return nil, err
	}
	d.Model = agent.Model{Name: req.Model, ID: id, API: APIOf(req.Models, req.Model), Explicit: req.ModelExplicit}

	w := &wired{}
	if req.Payer != nil {
		w.payer, w.refused = req.Payer, &refusals{}
	}
	if k.Caps.ModelInBox {
		p, err := req.proxy()
		if err != nil {
			return nil, err
		}
		if w.model, d.Model.URL, d.Model.Token, err = bridgeModel(ctx, req, p, k.Caps.ProxyMeters, w.refused); err != nil {
			return nil, err
		}
	} else {
		open := req.Client
		if open == nil {
			open = func(m string) (*llm.Client, error) { return providers.Open(req.Models, m) }
		}
		if req.Payer != nil {
			open = paying(open, req.Payer, w.refused)
		}
		if d.Model.Client, err = open(req.Model); err != nil {
			return nil, fmt.Errorf("model %s: %w", req.Model, err)
		}
		d.Model.OpenClient = open
	}
	if req.Egress != nil {
		if w.egress, d.CommandEnv, err = BridgeEgress(ctx, req.Box, req.Egress, req.EgressAllow, req.SessionID, req.Logger); err != nil {
			w.stop()
			return nil, err
		}
	}
	d.CommandEnv = append(d.CommandEnv, req.Env...)
	if req.Git != nil {
		var env []string
		gitTaken = true
		if w.git, env, err = bridgeGit(ctx, req.Box, req.Git, req.SessionID, req.Logger); err != nil {
			w.stop()
			return nil, err
		}
		d.CommandEnv = append(d.CommandEnv, env...)
	}
	if w.mcp, d.MCP, err = wireMCP(ctx, req, k); err != nil {
		w.stop()
		return nil, err
	}
	ag, err := k.Open(ctx, d)
	if err != nil {
		w.stop()
		return nil, err
	}
	w.stuck = !k.Caps.ReportsStuck
	w.box, w.ws = req.Box, req.Workspaces
	if w.model == nil && w.egress == nil && w.git == nil && w.mcp == nil && !w.stuck && w.payer == nil {
		return ag, nil
	}
	w.Agent = ag
	return w, nil
}

// checkCallerMCP refuses the agent when a caller's remote server that is
// not the operator's (a session's) leads to an address the policy
// refuses, saying which and why, rather than leaving the agent a server
// that answers only 502. A name that does not resolve now is left to the
// dial (it may be back by then); the bridge checks every dial anyway.
func checkCallerMCP(ctx context.Context, req Request) error {
	for _, s := range req.MCP {
		if s.Kind() != agent.MCPRemote || s.Operator {
			continue
		}
		err := req.MCPGuard.CheckURL(ctx, s.URL)
		if re, ok := errors.AsType[*netguard.RefusedError](err); ok && re.Lookup == nil {
			req.Logger.Warn("a session's MCP server leads to an address Harvest does not dial", "name", s.Name, "url", s.URL, "why", re.Detail())
			return fmt.Errorf("MCP server %q (%s): url %s: %w", s.Name, s.Source, s.URL, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

func (req *Request) proxy() (*modelproxy.Proxy, error) {
	if req.Proxy != nil {
		return req.Proxy(req.Model)
	}
	return NewProxy(req.Models, req.Model, req.Logger, nil)
}

// wireMCP gathers the agent's MCP servers (the caller's and the
// workspaces' .mcp.json), validates them, and bridges the remote and host
// ones: into the box for a kind whose model is there, in-process for one
// whose loop runs on the host.
func wireMCP(ctx context.Context, req Request, k agent.Kind) (*mcpBridge, []agent.MCPServer, error) {
	repo, err := RepoMCP(ctx, req.Box, req.Workspaces, req.Logger)
	if err != nil {
		return nil, nil, err
	}
	// The caller's servers (the operator's, Harvest's memory) win over a
	// repository's of the same name, which is left out, said in the log.
	all := slices.Clone(req.MCP)
	for _, r := range repo {
		if slices.ContainsFunc(req.MCP, func(m agent.MCPServer) bool { return m.Name == r.Name }) {
			req.Logger.Warn("an MCP server of the repository is left out: the server's has its name", "name", r.Name, "source", r.Source)
			continue
		}
		// A repository's remote server the address policy refuses (many
		// list a dev server on localhost) is left out, not the session
		// failed; the bridge checks the others again at every dial.
		if r.Kind() == agent.MCPRemote {
			if err := req.MCPGuard.CheckURL(ctx, r.URL); err != nil {
				if ctx.Err() != nil {
					return nil, nil, ctx.Err()
				}
				req.Logger.Warn("an MCP server of the repository is left out: Harvest does not dial its address (to dial it all the same, allow it with --mcp-allow)",
					"name", r.Name, "source", r.Source, "url", r.URL, "why", netguard.Detail(err))
				continue
			}
		}
		all = append(all, r)
	}
	if len(all) == 0 {
		return nil, nil, nil
	}
	if err := checkCallerMCP(ctx, req); err != nil {
		return nil, nil, err
	}
	if err := agent.CheckMCP(all); err != nil {
		return nil, nil, fmt.Errorf("MCP servers: %w", err)
	}
	b, err := newMCPBridge(all, req.MCPGuard, req.Logger)
	if err != nil || b == nil {
		return nil, all, err
	}
	base := ""
	if k.Caps.ModelInBox {
		if base, err = b.serveInBox(ctx, req.Box, req.SessionID, req.Logger); err != nil {
			b.stop()
			return nil, nil, err
		}
	}
	return b, b.forKind(all, base), nil
}
