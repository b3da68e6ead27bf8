package builtin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/harvest-dev/harvest/agent"
)

// An agent definition is a markdown file with YAML frontmatter (seed 004):
//
//	---
//	description: Fixes failing tests
//	model: anthropic/claude-sonnet-4-5
//	harness_config:
//	  max_steps: 50
//	  doom_loop_threshold: 3
//	  timeout: 10m
//	  budget_usd: 2
//	  max_output_tokens: 8192
//	  context_window: 200000
//	  compaction: {threshold: 0.85, protect_tokens: 40000}
//	tools: [read, write, edit, bash, glob, grep, git_status, git_diff, git_log, todo]
//	permissions:
//	  mode: default            # or plan: read-only tools only
//	  external_directory: deny # paths outside /workspace
//	  bash:                    # glob on each simple command; a matching deny always wins
//	    "rm -rf /workspace*": deny
//	    "*": allow
//	hooks:
//	  pre_tool:  [{matcher: bash, command: "./hooks/check.sh", timeout: 10s}]
//	  post_tool: [...]
//	  turn_start: [...]
//	  stop: [...]
//	mcp_servers:               # stdio MCP servers, run in the box
//	  lint:
//	    command: [python3, tools/lint_mcp.py]
//	    env: {LINT_MODE: strict}
//	    dir: /workspace/app    # default: the definition's repository (the first workspace for the user's)
//	---
//	You are a careful engineer who ...   (the agent's own instructions)
//
// Definitions come from the repo's .harvest/agents/NAME.md (read inside the box)
// or the user's config dir. Unknown fields are errors, reported with file and
// line, so a typo never silently changes an agent.
//
// A definition's MCP servers are stdio ones only: it is a file of the
// repository (or of the user's directory), so it can hold no credentials,
// and a remote server without them is what a session's request or the
// server's config is for. They run in the box like the caller's, and their
// tools (mcp__NAME__TOOL) go through the definition's tools list and plan
// mode. The caller's servers (the server's config, the session's, the
// repositories' .mcp.json) win a name: the definition's is then left out.

// Definition is a parsed agent definition.
type Definition struct {
	Name        string
	Source      string // where it was read from
	Description string
	Model       string
	Harness     HarnessConfig
	Tools       []string // empty: the default set
	Permissions PermissionConfig
	Hooks       HookConfig
	// MCP are the definition's stdio MCP servers, by name.
	MCP []agent.MCPServer
	// Prompt is the markdown body: the agent's own instructions.
	Prompt string
}

// HarnessConfig limits and tunes the loop.
type HarnessConfig struct {
	MaxSteps          int              `yaml:"max_steps"`
	DoomLoopThreshold int              `yaml:"doom_loop_threshold"`
	Timeout           Duration         `yaml:"timeout"`
	BudgetUSD         float64          `yaml:"budget_usd"`
	MaxOutputTokens   int              `yaml:"max_output_tokens"`
	ContextWindow     int              `yaml:"context_window"`
	Compaction        CompactionConfig `yaml:"compaction"`
	Thinking          int              `yaml:"thinking_budget"`
}

// CompactionConfig tunes compaction (see compact.go).
type CompactionConfig struct {
	Disabled      bool    `yaml:"disabled"`
	Threshold     float64 `yaml:"threshold"`
	ProtectTokens int     `yaml:"protect_tokens"`
}

// PermissionConfig is the definition's permissions section.
type PermissionConfig struct {
	Mode              string     // default | plan
	ExternalDirectory string     // deny | allow
	AllowPaths        []string   // extra paths tools may touch
	Bash              []BashRule // in file order
}

type permYAML struct {
	Mode              string    `yaml:"mode"`
	ExternalDirectory string    `yaml:"external_directory"`
	AllowPaths        []string  `yaml:"allow_paths"`
	Bash              yaml.Node `yaml:"bash"` // ordered: read by bashRules
}

// BashRule is one bash permission: a glob on the command and allow or deny.
type BashRule struct {
	Pattern string
	Action  string // allow | deny
	Line    int
}

// HookConfig lists the definition's command hooks per event.
type HookConfig struct {
	PreTool   []HookSpec `yaml:"pre_tool"`
	PostTool  []HookSpec `yaml:"post_tool"`
	TurnStart []HookSpec `yaml:"turn_start"`
	Stop      []HookSpec `yaml:"stop"`
}

// HookSpec is one command hook.
type HookSpec struct {
	// Matcher is a regexp on the tool name ("" or "*": every tool).
	Matcher string   `yaml:"matcher"`
	Command string   `yaml:"command"`
	Timeout Duration `yaml:"timeout"`
}

// Duration is a time.Duration written like "10m" in YAML.
type Duration time.Duration

// UnmarshalYAML parses Go duration syntax.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: want a duration like 10m", n.Line)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: duration %q: use a positive value like 30s, 10m or 1h", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

type frontmatter struct {
	Name        string        `yaml:"name"`
	Description string        `yaml:"description"`
	Model       string        `yaml:"model"`
	Harness     HarnessConfig `yaml:"harness_config"`
	// harness: agentic is seed 004's switch; accepted and ignored (every
	// Harvest agent definition is agentic).
	HarnessKind string                  `yaml:"harness"`
	Tools       []string                `yaml:"tools"`
	Permissions permYAML                `yaml:"permissions"`
	Hooks       HookConfig              `yaml:"hooks"`
	MCPServers  map[string]defMCPServer `yaml:"mcp_servers"`
}

// defMCPServer is a server in a definition's mcp_servers. URL is read
// only to refuse it with a clear error.
type defMCPServer struct {
	Command []string          `yaml:"command"`
	Env     map[string]string `yaml:"env"`
	Dir     string            `yaml:"dir"`
	URL     string            `yaml:"url"`
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ParseDefinition parses an agent definition. source names the file in errors.
func ParseDefinition(name, source string, data []byte) (*Definition, error) {
	fail := func(format string, args ...any) (*Definition, error) {
		return nil, fmt.Errorf("agent definition %s: "+format, append([]any{source}, args...)...)
	}
	if !namePattern.MatchString(name) {
		return fail("bad agent name %q", name)
	}
	text := string(bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n")))
	def := &Definition{Name: name, Source: source}
	body := text
	if strings.HasPrefix(text, "---\n") {
		end := strings.Index(text[4:], "\n---")
		if end < 0 {
			return fail("the frontmatter starting at line 1 has no closing ---")
		}
		head := text[4 : 4+end]
		body = strings.TrimPrefix(text[4+end+4:], "\n")
		var fm frontmatter
		dec := yaml.NewDecoder(strings.NewReader(head))
		dec.KnownFields(true)
		if err := dec.Decode(&fm); err != nil && err != io.EOF {
			return fail("%s", shiftLines(err.Error(), 1))
		}
		var node yaml.Node
		if err := yaml.Unmarshal([]byte(head), &node); err != nil {
			return fail("%s", shiftLines(err.Error(), 1))
		}
		rules, err := bashRules(&node)
		if err != nil {
			return fail("%s", err)
		}
		def.Description, def.Model, def.Harness, def.Tools, def.Hooks =
			fm.Description, fm.Model, fm.Harness, fm.Tools, fm.Hooks
		def.Permissions = PermissionConfig{
			Mode: fm.Permissions.Mode, ExternalDirectory: fm.Permissions.ExternalDirectory,
			AllowPaths: fm.Permissions.AllowPaths, Bash: rules,
		}
		names := make([]string, 0, len(fm.MCPServers))
		for n := range fm.MCPServers {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			c := fm.MCPServers[n]
			if c.URL != "" {
				return fail("mcp_servers.%s: a definition lists stdio servers only (command, run in the box); a remote server's credentials belong in the server's --mcp-config or a session's mcp_servers", n)
			}
			def.MCP = append(def.MCP, agent.MCPServer{Name: n, Command: c.Command, Env: c.Env, Dir: c.Dir, Source: "agent definition " + source})
		}
		if fm.HarnessKind != "" && fm.HarnessKind != "agentic" {
			return fail("harness %q: only \"agentic\" is supported (or leave it out)", fm.HarnessKind)
		}
	}
	def.Prompt = strings.TrimSpace(body)
	if err := def.validate(); err != nil {
		return fail("%s", err)
	}
	return def, nil
}

// shiftLines turns yaml's "line N" into the file's line (the frontmatter
// starts after the opening ---).
func shiftLines(msg string, by int) string {
	re := regexp.MustCompile(`line (\d+)`)
	return re.ReplaceAllStringFunc(msg, func(m string) string {
		var n int
		fmt.Sscanf(m, "line %d", &n)
		return fmt.Sprintf("line %d", n+by)
	})
}

// bashRules reads permissions.bash as an ordered mapping (YAML mappings keep
// their order in the node tree, not in Go maps).
func bashRules(doc *yaml.Node) ([]BashRule, error) {
	m := doc
	if m.Kind == yaml.DocumentNode && len(m.Content) > 0 {
		m = m.Content[0]
	}
	perms := mapValue(m, "permissions")
	if perms == nil {
		return nil, nil
	}
	bash := mapValue(perms, "bash")
	if bash == nil {
		return nil, nil
	}
	if bash.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: permissions.bash: want a mapping of command pattern to allow or deny", bash.Line+1)
	}
	var out []BashRule
	for i := 0; i+1 < len(bash.Content); i += 2 {
		k, v := bash.Content[i], bash.Content[i+1]
		if v.Value != "allow" && v.Value != "deny" {
			return nil, fmt.Errorf("line %d: permissions.bash %q: %q is not allow or deny", v.Line+1, k.Value, v.Value)
		}
		out = append(out, BashRule{Pattern: k.Value, Action: v.Value, Line: k.Line + 1})
	}
	return out, nil
}

func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func (d *Definition) validate() error {
	h := d.Harness
	var errs []string
	if h.MaxSteps < 0 {
		errs = append(errs, "harness_config.max_steps must be positive")
	}
	if h.DoomLoopThreshold == 1 || h.DoomLoopThreshold < 0 {
		errs = append(errs, "harness_config.doom_loop_threshold must be at least 2")
	}
	if h.BudgetUSD < 0 {
		errs = append(errs, "harness_config.budget_usd must be positive")
	}
	if c := h.Compaction; c.Threshold < 0 || c.Threshold > 1 {
		errs = append(errs, "harness_config.compaction.threshold is a fraction of the context window, between 0 and 1")
	}
	switch d.Permissions.Mode {
	case "", "default", "plan":
	default:
		errs = append(errs, fmt.Sprintf("permissions.mode %q: use default or plan", d.Permissions.Mode))
	}
	switch d.Permissions.ExternalDirectory {
	case "", "deny", "allow":
	default:
		errs = append(errs, fmt.Sprintf("permissions.external_directory %q: use deny or allow", d.Permissions.ExternalDirectory))
	}
	for _, hooks := range [][]HookSpec{d.Hooks.PreTool, d.Hooks.PostTool, d.Hooks.TurnStart, d.Hooks.Stop} {
		for _, hs := range hooks {
			if strings.TrimSpace(hs.Command) == "" {
				errs = append(errs, "a hook has no command")
			}
			if hs.Matcher != "" && hs.Matcher != "*" {
				if _, err := regexp.Compile(hs.Matcher); err != nil {
					errs = append(errs, fmt.Sprintf("hook matcher %q: %v", hs.Matcher, err))
				}
			}
		}
	}
	if err := agent.CheckMCP(d.MCP); err != nil {
		errs = append(errs, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}
