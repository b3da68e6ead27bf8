package session

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/environment"

	"github.com/harvest-dev/harvest/egress"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/netguard"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/objstore"
)

// The tests run the real thing (internal/stacktest): SQLite in a temporary
// directory (PostgreSQL for storeTests in TestOnPostgres, and for all with
// $HARVEST_TEST_STORE=postgres), the real journal, real local sandboxes
// (their own run dir), the real builtin agent and harvest sim over real
// HTTP on loopback. Time is a stacktest.Clock the tests move, so idle
// timeouts, lifetimes and the watchdog cost no waiting.

// script is the sim's script for most tests. Rules are tried in order:
//
//	"msg ..."           a plain answer
//	"remember ..."      an answer with a word to find in later requests
//	after "released"    the long task's answer
//	"long task"         a bash call that waits for the file "go" in the
//	                    workspace (the test creates it to end the turn)
//	"tree task"         a bash call that starts a process tree that never ends
//	"step task"         a bash call that prints step-one-output, then one
//	                    that sleeps forever
//	"write a", "write b" a bash call that commits a.txt or b.txt, then
//	                    "committed on {branch}"
//	"look for credentials" a bash call that shows the workspace's git
//	                    config and environment, and greps for a canary
//	"merge"             a bash call that merges workflow wf's parallel branches
//	                    (from /runs) into the workspace
const script = `
rules:
  - name: looked
    when: {tool_result: "looked-for-it"}
    reply: {text: "done looking", usage: {input_tokens: 100, output_tokens: 10}}
  - name: look
    when: {last_user: "look for credentials"}
    reply:
      tool_calls: [{name: bash, input: {command: "git remote -v; git config --list; cat .git/config; env; grep -rl ghp_sessioncanary /workspace /tmp $HOME 2>/dev/null; echo looked-for-it"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: committed
    when: {tool_result: "committed on"}
    reply: {text: "written", usage: {input_tokens: 100, output_tokens: 10}}
  - name: merged
    when: {tool_result: "merged:"}
    reply: {text: "merge done", usage: {input_tokens: 100, output_tokens: 10}}
  - name: write a
    when: {last_user: "write a"}
    reply:
      tool_calls: [{name: bash, input: {command: "echo A > a.txt && git add a.txt && git -c user.name=t -c user.email=t@t commit -qm 'add a' && echo committed on $(git branch --show-current)"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: write b
    when: {last_user: "write b"}
    reply:
      tool_calls: [{name: bash, input: {command: "echo B > b.txt && git add b.txt && git -c user.name=t -c user.email=t@t commit -qm 'add b' && echo committed on $(git branch --show-current)"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: merge
    when: {last_user: "merge"}
    reply:
      tool_calls: [{name: bash, input: {command: "for d in /runs/*/repo; do s=${d#/runs/}; s=${s%/repo}; git fetch -q $d harvest/wf/$s && git -c user.name=t -c user.email=t@t merge -q --no-edit FETCH_HEAD || exit 1; done; echo merged: $(ls *.txt)"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: msg
    when: {last_user_regexp: "^msg"}
    reply: {text: "ok", usage: {input_tokens: 100, output_tokens: 10}}
  - name: remember
    when: {last_user_regexp: "^remember"}
    reply: {text: "I will remember the word pineapple.", usage: {input_tokens: 100, output_tokens: 10}}
  - name: released
    when: {tool_result: "released"}
    reply: {text: "long task done", usage: {input_tokens: 100, output_tokens: 10}}
  - name: long
    when: {last_user: "long task"}
    reply:
      tool_calls: [{name: bash, input: {command: "until [ -e go ]; do sleep 0.01; done; echo released", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: step two
    when: {tool_result: "step-one-output"}
    reply:
      tool_calls: [{name: bash, input: {command: "sleep 31339", timeout: 600000}}]
      usage: {input_tokens: 200, output_tokens: 20}
  - name: step one
    when: {last_user: "step task"}
    reply:
      tool_calls: [{name: bash, input: {command: "echo step-one-output"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: tree
    when: {last_user: "tree task"}
    reply:
      tool_calls: [{name: bash, input: {command: "sh -c 'sleep 31337' & sleep 31338; echo never", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

// env is one server's worth of session machinery: a stacktest.Stack (the
// store's file, dirs, providers, sim, clock) and the store, journal and
// Manager opened on it.
type env struct {
	*stacktest.Stack
	envs   func(e *env) Environments
	egress *egress.Proxy
	mcp    []agent.MCPServer
	guard  *netguard.Guard
	node   *NodeConfig
	shared bool // withSharedData
	stop   bool // withStopBoxes
	// minFree is Config.MinFree (withMinFree).
	minFree MinFree
	// diskPool is Config.DiskPool (withDiskPool).
	diskPool int
	tracer   trace.TracerProvider
	jopt     journal.Options // withJournal
	// retention is Config.EventRetention (withRetention).
	retention time.Duration
	// checkpoints is Config.Checkpoints of every node (withCheckpoints;
	// by default a directory all the env's nodes share).
	checkpoints objstore.Store
	st          store.Store
	j           *journal.Journal
	m           *Manager
	// backends, when set, is Config.Backends instead of the stack's (a
	// test opening the Manager itself: withoutManager).
	backends func(name string) (sandbox.Provider, error)
}

type envConfig struct {
	stack  []stacktest.Option
	egress *egress.Proxy
	noOpen bool
	envs   func(e *env) Environments
	mcp    []agent.MCPServer
	guard  *netguard.Guard
	node   *NodeConfig
	shared bool
	stop   bool
	// minFree is Config.MinFree.
	minFree MinFree
	// diskPool is Config.DiskPool.
	diskPool int
	tracer   trace.TracerProvider
	jopt     journal.Options
	// retention is Config.EventRetention.
	retention time.Duration
	// script replaces the sim's script (withScript).
	script string
	// checkpoints is Config.Checkpoints (withCheckpoints).
	checkpoints func(testing.TB) objstore.Store
}

// withCheckpoints makes every node carry workspaces to the object store
// open returns (Config.Checkpoints).
func withCheckpoints(open func(testing.TB) objstore.Store) envOpt {
	return func(c *envConfig) { c.checkpoints = open }
}

// checkpointStore is Config.Checkpoints of the env's nodes: the one
// withCheckpoints gives, else a directory they share (one machine, or a
// shared filesystem), made at the first call.
func (e *env) checkpointStore() objstore.Store {
	e.T.Helper()
	if e.checkpoints == nil {
		d, err := objstore.NewDir(filepath.Join(testbin.TempDir(e.T), "checkpoints"))
		if err != nil {
			e.T.Fatal(err)
		}
		e.checkpoints = d
	}
	return e.checkpoints
}

// withScript makes the sim play s instead of the package's script.
func withScript(s string) envOpt { return func(c *envConfig) { c.script = s } }

// withRetention sets the Manager's event retention (Config.EventRetention).
func withRetention(d time.Duration) envOpt { return func(c *envConfig) { c.retention = d } }

// withJournal opens the journal with opt.
func withJournal(opt journal.Options) envOpt { return func(c *envConfig) { c.jopt = opt } }

// withDiskPool keeps n disks of the default size ready (Config.DiskPool).
func withDiskPool(n int) envOpt { return func(c *envConfig) { c.diskPool = n } }

// withMinFree sets the Manager's floor of free space (Config.MinFree).
func withMinFree(f MinFree) envOpt { return func(c *envConfig) { c.minFree = f } }

// withSharedData: the nodes share the data directory (Config.CarryMax -1:
// no workspace is carried, another node's box is reattached).
func withSharedData() envOpt { return func(c *envConfig) { c.shared = true } }

// withNode makes the Manager a node of several (Config.Node).
func withNode(id string, ttl time.Duration) envOpt {
	return func(c *envConfig) { c.node = &NodeConfig{ID: id, Addr: "http://" + id + ".invalid", TTL: ttl} }
}

// withStopBoxes: Close takes the boxes with it (Config.StopBoxesOnExit).
func withStopBoxes(c *envConfig) { c.stop = true }

type envOpt func(*envConfig)

func stackOpt(o stacktest.Option) envOpt {
	return func(c *envConfig) { c.stack = append(c.stack, o) }
}

func withPool(n int) envOpt { return stackOpt(stacktest.WithPool(n)) }

// withEgress gives the Manager an egress proxy.
func withEgress(p *egress.Proxy) envOpt { return func(c *envConfig) { c.egress = p } }

// withKey gives the model endpoint the API key k (default "sk-test").
func withKey(k string) envOpt { return stackOpt(stacktest.WithKey(k)) }

// withDocker gives the Manager the docker backend too (stacktest.WithDocker).
func withDocker(c *envConfig) { stackOpt(stacktest.WithDocker)(c) }

// withDisks turns Config.Disks on (stacktest.WithDisks).
func withDisks(c *envConfig) { stackOpt(stacktest.WithDisks)(c) }

// withBuilder gives the Manager an environment Builder on the env's data
// directory, store and backends, stored in *b; mod, if not nil, adds to
// its Config (a clock, an egress proxy).
func withBuilder(b **environment.Builder, mod func(e *env, c *environment.Config)) envOpt {
	return func(c *envConfig) {
		c.envs = func(e *env) Environments {
			cfg := environment.Config{Dir: filepath.Join(e.DataDir, "environments"), Store: e.st,
				Provider: e.Backends, Version: "test", Logger: e.Logger()}
			if mod != nil {
				mod(e, &cfg)
			}
			var err error
			if *b, err = environment.NewBuilder(cfg); err != nil {
				e.T.Fatal(err)
			}
			return *b
		}
	}
}

// withTracer traces the Manager's turns with tp (Config.Tracer).
func withTracer(tp trace.TracerProvider) envOpt { return func(c *envConfig) { c.tracer = tp } }

// withoutManager leaves opening the store and the Manager to the test
// (env.open).
func withoutManager(c *envConfig) { c.noOpen = true }

// withMCP gives the Manager the server's MCP servers (Config.MCP).
func withMCP(s ...agent.MCPServer) envOpt { return func(c *envConfig) { c.mcp = s } }

// withMCPGuard gives the Manager its Config.MCPGuard (the operator's
// allowances, a resolver).
func withMCPGuard(g *netguard.Guard) envOpt { return func(c *envConfig) { c.guard = g } }

// The tests' repositories are temporary directories, as are their data
// directories (never copyable all the same): the one source root is the
// temporary directory.
var tempRoots = stacktest.SourceRoots(os.TempDir())

func newEnv(t testing.TB, opts ...envOpt) *env {
	t.Helper()
	var c envConfig
	for _, o := range opts {
		o(&c)
	}
	sc := script
	if c.script != "" {
		sc = c.script
	}
	e := &env{Stack: stacktest.New(t, sc, append([]stacktest.Option{tempRoots}, c.stack...)...), egress: c.egress, envs: c.envs, mcp: c.mcp, guard: c.guard, node: c.node, shared: c.shared, minFree: c.minFree, stop: c.stop, diskPool: c.diskPool, tracer: c.tracer, jopt: c.jopt, retention: c.retention}
	if c.checkpoints != nil {
		e.checkpoints = c.checkpoints(t)
	}
	if !c.noOpen {
		e.open()
	}
	return e
}

// open opens the store, the journal and a Manager (the state of a server
// that just started; Recover is the test's to call).
func (e *env) open() {
	e.T.Helper()
	e.st, e.j = e.Open(e.jopt)
	var envs Environments
	if e.envs != nil {
		envs = e.envs(e)
	}
	backends := e.Backends
	if e.backends != nil {
		backends = e.backends
	}
	m, err := NewManager(Config{
		Environments: envs,
		Store:        e.st, Journal: e.j, Egress: e.egress, StopBoxesOnExit: e.stop,
		Backends:       backends,
		DataDir:        e.DataDir,
		Sources:        e.Sources,
		Models:         e.Models(),
		DefaultModel:   stacktest.Model,
		Disks:          e.Disks,
		Clock:          e.Clock,
		Logger:         e.Logger(),
		MCP:            e.mcp,
		MCPGuard:       e.guard,
		Node:           e.node,
		CarryMax:       carryMax(e.shared),
		Checkpoints:    e.checkpointStore(),
		MinFree:        e.minFree,
		DiskPool:       e.diskPool,
		OwnersDir:      filepath.Join(e.DataDir, "owners"),
		Tracer:         e.tracer,
		EventRetention: e.retention,
	})
	if err != nil {
		e.T.Fatal(err)
	}
	e.m = m
	e.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			e.T.Errorf("closing the manager: %v", err)
		}
	})
}

// closeAndReopen is a graceful restart. (A crash, dropping everything
// without closing it, needs another process: see TestCrashRecovery.)
func (e *env) closeAndReopen() {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.m.Close(ctx); err != nil {
		e.T.Fatal(err)
	}
	if err := e.j.Close(ctx); err != nil {
		e.T.Fatal(err)
	}
	if err := e.st.Close(); err != nil {
		e.T.Fatal(err)
	}
	e.open()
}

// create makes a session on the test repository.
func (e *env) create(prompt string, mod ...func(*CreateRequest)) *View {
	e.T.Helper()
	req := CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Prompt: prompt}
	for _, f := range mod {
		f(&req)
	}
	v, err := e.m.Create(testbin.Context(e.T), "owner-1", req)
	if err != nil {
		e.T.Fatal(err)
	}
	return v
}

func (e *env) send(id, text, mode string) *store.Message {
	e.T.Helper()
	msg, err := e.m.Send(testbin.Context(e.T), "owner-1", id, text, mode)
	if err != nil {
		e.T.Fatal(err)
	}
	return msg
}

func (e *env) get(id string) *View {
	e.T.Helper()
	v, err := e.m.Get(testbin.Context(e.T), "", id)
	if err != nil {
		e.T.Fatal(err)
	}
	return v
}

// watch reads a session's events as they are committed, through the
// Manager (its current one: a watch opened before closeAndReopen keeps
// the old).
func (e *env) watch(id string) *stacktest.Watcher {
	e.T.Helper()
	m := e.m
	return stacktest.Watch(e.T, id, func(after int64) (*journal.Subscription, error) {
		return m.Subscribe(context.Background(), "", id, after)
	})
}

// release ends the "long task" turn of a session.
func release(t testing.TB, v *View) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(v.Repos[0].Path, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func envInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}

// carryMax is Config.CarryMax for nodes that share the data directory or not.
func carryMax(shared bool) int64 {
	if shared {
		return -1
	}
	return 0
}
