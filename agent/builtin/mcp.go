package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/tools"
	"github.com/harvest-dev/harvest/netguard"
	"github.com/harvest-dev/harvest/sandbox"
)

// The builtin agent is an MCP client (the official Go SDK). Each server's
// tools are offered next to its own as mcp__SERVER__TOOL and go through
// the same loop: the definition's tools list (an MCP tool is offered when
// the list is empty or names it or its server, mcp__SERVER), plan mode
// (only a tool the server marks read-only runs there), the hooks, and
// ordinary tool.started and tool.finished events.
//
// A stdio server runs in the box (sandbox Start, its stdin and stdout
// piped to the SDK's IO transport): never on the host. A remote or host
// one is an http.Handler on the host (the registry's bridge, which adds
// the credentials there), called in-process (handlerTransport), or a URL
// with Headers reached from the host: the loop runs on the host, so the
// credentials never enter the box. Such a URL is dialed through the
// guard (netguard: no loopback, private or metadata addresses, checked
// at every connection) unless the operator listed it
// (agent.MCPServer.Operator); a redirect to another origin is not
// followed, and the Headers go to the server's origin only (mcphttp.go).

// maxMCPOutput bounds what the model gets of one MCP tool call.
const maxMCPOutput = 100 << 10

// mcpConnectTimeout bounds starting a server and listing its tools.
const mcpConnectTimeout = 60 * time.Second

// mcpServers are the agent's connected servers.
type mcpServers struct {
	conns []*mcpConn
	tools []tools.Tool
}

type mcpConn struct {
	name string
	sess *mcp.ClientSession
	// stdio: the process in the box and the goroutine that waits for it.
	proc   *sandbox.Process
	exited chan struct{}
	// http: in-process requests to a Handler, or a remote server's
	// connections.
	ht *handlerTransport
	rt *http.Transport
}

// withDefinitionMCP is the caller's servers and the definition's; the
// caller's win a name (the definition's is left out, said in the log).
func withDefinitionMCP(caller []agent.MCPServer, def *Definition, log *slog.Logger) []agent.MCPServer {
	if len(def.MCP) == 0 {
		return caller
	}
	out := slices.Clone(caller)
	for _, s := range def.MCP {
		if slices.ContainsFunc(caller, func(c agent.MCPServer) bool { return c.Name == s.Name }) {
			log.Warn("an MCP server of the agent definition is left out: the session's has its name", "name", s.Name, "definition", def.Source)
			continue
		}
		out = append(out, s)
	}
	return out
}

// connectMCP starts or reaches every server and lists its tools. On error
// what was started is closed.
func connectMCP(ctx context.Context, box *sandbox.Sandbox, servers []agent.MCPServer, guard *netguard.Guard, workdir string, env []string, log *slog.Logger) (*mcpServers, error) {
	m := &mcpServers{}
	if len(servers) == 0 {
		return m, nil
	}
	if err := agent.CheckMCP(servers); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, mcpConnectTimeout)
	defer cancel()
	for _, s := range servers {
		c, err := connectOne(ctx, box, s, guard, workdir, env, log)
		if err != nil {
			m.close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("MCP server %q (%s): %w", s.Name, s.Source, err)
		}
		m.conns = append(m.conns, c)
		for t, err := range c.sess.Tools(ctx, nil) {
			if err != nil {
				m.close(context.WithoutCancel(ctx))
				return nil, fmt.Errorf("MCP server %q: listing its tools: %w", s.Name, err)
			}
			schema, err := json.Marshal(t.InputSchema)
			if err != nil || t.InputSchema == nil {
				schema = json.RawMessage(`{"type":"object"}`)
			}
			ro := t.Annotations != nil && t.Annotations.ReadOnlyHint
			m.tools = append(m.tools, &mcpTool{name: agent.MCPToolName(s.Name, t.Name), tool: t.Name, server: s.Name,
				desc: t.Description, schema: schema, readOnly: ro, sess: c.sess})
		}
	}
	return m, nil
}

// hostMCPProtocol is the MCP version spoken to Harvest's in-process servers.
const hostMCPProtocol = "2025-11-25"

func connectOne(ctx context.Context, box *sandbox.Sandbox, s agent.MCPServer, guard *netguard.Guard, workdir string, env []string, log *slog.Logger) (*mcpConn, error) {
	c := &mcpConn{name: s.Name}
	var tr mcp.Transport
	switch s.Kind() {
	case agent.MCPStdio:
		for k, v := range s.Env {
			env = append(slices.Clip(env), k+"="+v)
		}
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		p, err := box.Start(ctx, &sandbox.Cmd{Args: s.MCPArgv(workdir), Env: env, Dir: workdir,
			Stdin: inR, Stdout: outW, Stderr: &logWriter{log: log, server: s.Name}})
		if err != nil {
			return nil, fmt.Errorf("starting %q in the box: %w", s.Command[0], err)
		}
		c.proc, c.exited = p, make(chan struct{})
		go func() {
			defer close(c.exited)
			<-p.Done()
			outW.Close()
			inR.Close()
		}()
		tr = &mcp.IOTransport{Reader: outR, Writer: inW}
	case agent.MCPHost:
		c.ht = newHandlerTransport(s.Handler)
		tr = &mcp.StreamableClientTransport{Endpoint: "http://harvest-mcp.invalid/mcp/" + s.Name,
			HTTPClient: &http.Client{Transport: c.ht}, MaxRetries: -1}
	default:
		if s.Operator {
			c.rt = http.DefaultTransport.(*http.Transport).Clone() // the operator's environment's proxy, if any
		} else {
			c.rt = guard.Transport()
		}
		hc, err := remoteClient(s, c.rt)
		if err != nil {
			return nil, err
		}
		tr = &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: hc, MaxRetries: -1}
	}
	var opts *mcp.ClientSessionOptions
	if s.Kind() == agent.MCPHost {
		// Harvest's own servers, in this process: the protocol before
		// 2026-07-28, whose client does not keep a copy of every tool list
		// it was sent. That cache saves round trips to a remote server, none
		// to a handler called in-process, and it held ~80 KB per idle
		// session (the memory server's tool schemas, decoded) in harvest
		// serve (a heap profile at 200 idle sessions, issue 23).
		opts = &mcp.ClientSessionOptions{ProtocolVersion: hostMCPProtocol}
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "harvest", Version: "1"}, nil)
	sess, err := cl.Connect(ctx, tr, opts)
	if err != nil {
		c.close(context.WithoutCancel(ctx))
		return nil, err
	}
	c.sess = sess
	return c, nil
}

// close ends the session; a stdio server gets EOF on its stdin, then is
// killed if it does not exit.
func (c *mcpConn) close(ctx context.Context) error {
	var err error
	if c.sess != nil {
		err = c.sess.Close()
	}
	if c.proc != nil {
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
			kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if kerr := c.proc.Kill(kctx); kerr != nil {
				err = errors.Join(err, fmt.Errorf("killing MCP server %q in the box: %w", c.name, kerr))
			}
			cancel()
			<-c.exited
		}
	}
	if c.ht != nil {
		c.ht.close()
	}
	if c.rt != nil {
		c.rt.CloseIdleConnections()
	}
	return err
}

func (m *mcpServers) close(ctx context.Context) error {
	var errs []error
	for _, c := range m.conns {
		if err := c.close(ctx); err != nil && !errors.Is(err, io.EOF) {
			errs = append(errs, err)
		}
	}
	m.conns = nil
	return errors.Join(errs...)
}

// mcpTool is a server's tool as the loop sees it.
type mcpTool struct {
	name, tool, server, desc string
	schema                   json.RawMessage
	readOnly                 bool
	sess                     *mcp.ClientSession
}

func (t *mcpTool) Name() string            { return t.name }
func (t *mcpTool) Description() string     { return t.desc }
func (t *mcpTool) Schema() json.RawMessage { return t.schema }
func (t *mcpTool) ReadOnly() bool          { return t.readOnly }

func (t *mcpTool) Run(ctx context.Context, _ *tools.Env, input json.RawMessage) tools.Result {
	args := json.RawMessage(`{}`)
	if len(strings.TrimSpace(string(input))) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(input, &obj); err != nil {
			return tools.Result{IsError: true, Output: fmt.Sprintf("invalid input for %s: give a JSON object (%v)", t.name, err)}
		}
		args = input
	}
	res, err := t.sess.CallTool(ctx, &mcp.CallToolParams{Name: t.tool, Arguments: args})
	if err != nil {
		return tools.Result{IsError: true, Output: fmt.Sprintf("MCP server %q failed the call of %s: %v", t.server, t.tool, err)}
	}
	var b strings.Builder
	for _, c := range res.Content {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		switch c := c.(type) {
		case *mcp.TextContent:
			b.WriteString(c.Text)
		case *mcp.ImageContent:
			fmt.Fprintf(&b, "[image %s, %d bytes]", c.MIMEType, len(c.Data))
		case *mcp.AudioContent:
			fmt.Fprintf(&b, "[audio %s, %d bytes]", c.MIMEType, len(c.Data))
		default:
			j, _ := json.Marshal(c)
			b.Write(j)
		}
	}
	if len(res.Content) == 0 && res.StructuredContent != nil {
		j, _ := json.Marshal(res.StructuredContent)
		b.Write(j)
	}
	out := tools.Result{Output: b.String(), IsError: res.IsError}
	if len(out.Output) > maxMCPOutput {
		out.Output = out.Output[:maxMCPOutput] + fmt.Sprintf("\n[output cut at %d bytes]", maxMCPOutput)
		out.Truncated = true
	}
	return out
}

// splitMCPNames splits a definition's tools list into the registry's
// names and MCP ones (mcp__SERVER or mcp__SERVER__TOOL).
func splitMCPNames(names []string) (own, mcpNames []string) {
	for _, n := range names {
		if strings.HasPrefix(n, "mcp__") {
			mcpNames = append(mcpNames, n)
		} else {
			own = append(own, n)
		}
	}
	return own, mcpNames
}

// withMCPTools is reg with the MCP tools the definition offers: all when
// its tools list is empty, else those it names (or whose server it
// names). A name that matches no tool is an error listing them.
func withMCPTools(reg *tools.Registry, mt []tools.Tool, list, mcpNames []string) (*tools.Registry, error) {
	if len(mt) == 0 && len(mcpNames) == 0 {
		return reg, nil
	}
	picked := mt
	if len(list) > 0 {
		picked = nil
		used := map[string]bool{}
		for _, t := range mt {
			server := "mcp__" + t.(*mcpTool).server
			if slices.Contains(mcpNames, t.Name()) || slices.Contains(mcpNames, server) {
				picked = append(picked, t)
				used[t.Name()], used[server] = true, true
			}
		}
		for _, n := range mcpNames {
			if !used[n] {
				var have []string
				for _, t := range mt {
					have = append(have, t.Name())
				}
				return nil, fmt.Errorf("no MCP tool or server %q; the MCP tools are: %s", n, strings.Join(have, ", "))
			}
		}
	}
	return tools.NewRegistry(append(reg.Tools(), picked...)...)
}

// logWriter logs a stdio server's stderr, a line at a time.
type logWriter struct {
	log    *slog.Logger
	server string
	mu     sync.Mutex
	buf    []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := slices.Index(w.buf, '\n')
		if i < 0 {
			break
		}
		w.log.Debug("MCP server stderr", "server", w.server, "line", string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 4096 {
		w.buf = w.buf[:0]
	}
	return len(p), nil
}
