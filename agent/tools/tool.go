package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
)

// Tool is one capability offered to the model.
//
// Run never returns a Go error: everything that can go wrong (bad input, a
// denied path, a missing file, a failing command, a lost sandbox) is a Result
// with IsError set and a message written for the model, because the loop
// sends it back as the tool's result and lets the model correct itself.
type Tool interface {
	// Name is what the model calls the tool by.
	Name() string
	// Description is what the model reads to decide when and how to use it.
	Description() string
	// Schema is the JSON Schema of the input object.
	Schema() json.RawMessage
	// ReadOnly tools change nothing in the workspace: the loop may run several
	// of them at once, and they are the only tools allowed in plan mode.
	ReadOnly() bool
	// Run runs the tool. Call it through Registry.Run, which checks plan mode
	// and recovers panics; tools check paths and bash rules themselves.
	Run(ctx context.Context, env *Env, input json.RawMessage) Result
}

// Result is what a tool run produced.
type Result struct {
	// Output is the text the model sees (bounded; see the package doc).
	Output string
	// IsError marks a failed run: bad input, a denial, a missing file, a
	// command that exited non-zero or timed out.
	IsError bool
	// Denied marks a run the Policy refused (plan mode, a path outside the
	// workspace, a bash rule). Denied implies IsError.
	Denied bool
	// Truncated reports that Output was cut to fit a cap.
	Truncated bool
	// Paths lists the files the tool changed (write, edit), absolute box paths.
	Paths []string
	// ExitCode is the shell status of a foreground bash command (128+N when
	// signal N killed it); nil for other tools and background starts.
	ExitCode *int
	// BackgroundID is the id of a process bash started in the background.
	BackgroundID string
}

func errorf(format string, args ...any) Result {
	return Result{Output: fmt.Sprintf(format, args...), IsError: true}
}

func deniedf(format string, args ...any) Result {
	return Result{Output: fmt.Sprintf(format, args...), IsError: true, Denied: true}
}

// Registry is a set of tools with unique names, in a fixed order (the order
// they are offered to the model in).
type Registry struct {
	list   []Tool
	byName map[string]Tool
}

// NewRegistry builds a registry; names must be unique and non-empty.
func NewRegistry(tools ...Tool) (*Registry, error) {
	r := &Registry{byName: make(map[string]Tool, len(tools))}
	for _, t := range tools {
		n := t.Name()
		if n == "" {
			return nil, fmt.Errorf("tools: a tool has no name")
		}
		if _, dup := r.byName[n]; dup {
			return nil, fmt.Errorf("tools: two tools named %q", n)
		}
		if !json.Valid(t.Schema()) {
			return nil, fmt.Errorf("tools: the schema of %q is not valid JSON", n)
		}
		r.byName[n] = t
		r.list = append(r.list, t)
	}
	return r, nil
}

// Builtin returns Harvest's built-in tools, in the order they are offered.
func Builtin() []Tool {
	return []Tool{
		readTool, writeTool, editTool,
		bashTool, bashOutputTool, bashKillTool,
		globTool, grepTool,
		gitStatusTool, gitDiffTool, gitLogTool,
		todoTool,
	}
}

// Default returns a registry of every built-in tool.
func Default() *Registry {
	r, err := NewRegistry(Builtin()...)
	if err != nil {
		panic(err) // the built-in set is fixed; a test covers it
	}
	return r
}

// Select returns a registry of the named tools only, for an agent definition's
// tools list. Naming bash also brings bash_output and bash_kill, which only
// make sense with it. An unknown name is an error listing the known ones.
func (r *Registry) Select(names ...string) (*Registry, error) {
	want := map[string]bool{}
	for _, n := range names {
		if _, ok := r.byName[n]; !ok {
			return nil, fmt.Errorf("unknown tool %q; the tools are: %s", n, strings.Join(r.Names(), ", "))
		}
		want[n] = true
		if n == "bash" {
			for _, c := range []string{"bash_output", "bash_kill"} {
				if _, ok := r.byName[c]; ok {
					want[c] = true
				}
			}
		}
	}
	var sel []Tool
	for _, t := range r.list {
		if want[t.Name()] {
			sel = append(sel, t)
		}
	}
	return NewRegistry(sel...)
}

// Lookup finds a tool by name.
func (r *Registry) Lookup(name string) (Tool, bool) {
	t, ok := r.byName[name]
	return t, ok
}

// Tools lists the tools in order.
func (r *Registry) Tools() []Tool { return slices.Clone(r.list) }

// Names lists the tool names in order.
func (r *Registry) Names() []string {
	out := make([]string, len(r.list))
	for i, t := range r.list {
		out[i] = t.Name()
	}
	return out
}

// Run runs the named tool with the model's input. It is the one entry point
// the loop uses: an unknown tool, plan mode, a cancelled context and a panic
// in a tool all become error Results, never a crash of the loop.
func (r *Registry) Run(ctx context.Context, env *Env, name string, input json.RawMessage) (res Result) {
	t, ok := r.byName[name]
	if !ok {
		return errorf("there is no tool named %q. The tools are: %s.", name, strings.Join(r.Names(), ", "))
	}
	if env == nil {
		return errorf("internal error: tool %s was called without an environment", name)
	}
	if !t.ReadOnly() && env.Mode() == ModePlan {
		return deniedf("%s is not available: the agent is in plan mode, where only read-only tools run (%s). "+
			"Investigate with them and present your plan; changes happen after plan mode ends.",
			name, strings.Join(r.readOnlyNames(), ", "))
	}
	if err := ctx.Err(); err != nil {
		return errorf("%s was not run: the turn was cancelled (%v).", name, err)
	}
	defer func() {
		if p := recover(); p != nil {
			env.logger().Error("tool panicked", "tool", name, "panic", p, "stack", string(debug.Stack()))
			res = errorf("internal error in tool %s (%v). This is a bug in Harvest, not in your input; try a different approach.", name, p)
		}
	}()
	res = t.Run(ctx, env, input)
	if res.Denied {
		res.IsError = true
	}
	return res
}

func (r *Registry) readOnlyNames() []string {
	var out []string
	for _, t := range r.list {
		if t.ReadOnly() {
			out = append(out, t.Name())
		}
	}
	return out
}

// builtin is the shape every built-in tool shares: a typed input decoded and
// checked against the schema before run sees it.
type builtin[In any] struct {
	name        string
	description string
	schema      json.RawMessage
	readOnly    bool
	run         func(ctx context.Context, env *Env, in *In) Result
}

func (b *builtin[In]) Name() string            { return b.name }
func (b *builtin[In]) Description() string     { return b.description }
func (b *builtin[In]) Schema() json.RawMessage { return b.schema }
func (b *builtin[In]) ReadOnly() bool          { return b.readOnly }

func (b *builtin[In]) Run(ctx context.Context, env *Env, input json.RawMessage) Result {
	in := new(In)
	if msg := decodeInput(b.name, b.schema, input, in); msg != "" {
		return Result{Output: msg, IsError: true}
	}
	if v, ok := any(in).(interface{ validate(*Env) string }); ok {
		if msg := v.validate(env); msg != "" {
			return errorf("invalid input for %s: %s", b.name, msg)
		}
	}
	return b.run(ctx, env, in)
}
