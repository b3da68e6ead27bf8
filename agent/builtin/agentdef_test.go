package builtin

import (
	"strings"
	"testing"
	"time"
)

const sampleDef = `---
description: Fixes failing tests
model: anthropic/claude-sonnet-4-5
harness: agentic
harness_config:
  max_steps: 50
  doom_loop_threshold: 4
  timeout: 10m
  budget_usd: 2.5
  context_window: 2000
  compaction: {threshold: 0.8, protect_tokens: 500}
tools: [read, edit, bash]
permissions:
  mode: plan
  external_directory: deny
  bash:
    "rm -rf /workspace*": deny
    "go test*": allow
    "*": deny
hooks:
  pre_tool:
    - {matcher: "bash|edit", command: "./check.sh", timeout: 5s}
---
You fix tests.

Be brief.
`

func TestParseDefinition(t *testing.T) {
	d, err := ParseDefinition("fixer", "fixer.md", []byte(sampleDef))
	if err != nil {
		t.Fatal(err)
	}
	h := d.Harness
	if d.Model != "anthropic/claude-sonnet-4-5" || h.MaxSteps != 50 || h.DoomLoopThreshold != 4 || time.Duration(h.Timeout) != 10*time.Minute ||
		h.BudgetUSD != 2.5 || h.ContextWindow != 2000 || h.Compaction.Threshold != 0.8 || h.Compaction.ProtectTokens != 500 {
		t.Errorf("harness: %+v model %q", h, d.Model)
	}
	if strings.Join(d.Tools, ",") != "read,edit,bash" || d.Permissions.Mode != "plan" || d.Prompt != "You fix tests.\n\nBe brief." {
		t.Errorf("tools %v mode %q prompt %q", d.Tools, d.Permissions.Mode, d.Prompt)
	}
	var rules []string
	for _, r := range d.Permissions.Bash {
		rules = append(rules, r.Pattern+"="+r.Action)
	}
	if strings.Join(rules, ";") != "rm -rf /workspace*=deny;go test*=allow;*=deny" || d.Permissions.Bash[0].Line != 17 {
		t.Errorf("bash rules (in file order): %v, first at line %d", rules, d.Permissions.Bash[0].Line)
	}
	if len(d.Hooks.PreTool) != 1 || d.Hooks.PreTool[0].Matcher != "bash|edit" || time.Duration(d.Hooks.PreTool[0].Timeout) != 5*time.Second {
		t.Errorf("hooks: %+v", d.Hooks)
	}
}

func TestParseDefinitionErrors(t *testing.T) {
	cases := map[string]string{
		"---\nmodel: x\nmax_step: 3\n---\nhi":                    "fixer.md: yaml: unmarshal errors:\n  line 3: field max_step not found",
		"---\nharness_config:\n  timeout: soon\n---\n":           "line 3: duration \"soon\"",
		"---\npermissions:\n  bash:\n    \"rm *\": maybe\n---\n": "line 4: permissions.bash \"rm *\": \"maybe\" is not allow or deny",
		"---\nmodel: x\n": "no closing ---",
		"---\nharness_config: {doom_loop_threshold: 1}\n---\n":          "doom_loop_threshold must be at least 2",
		"---\nhooks: {pre_tool: [{matcher: \"(\", command: x}]}\n---\n": "hook matcher \"(\"",
		"---\npermissions: {mode: yolo}\n---\n":                         "permissions.mode \"yolo\"",
		"---\nharness: genkit\n---\n":                                   "only \"agentic\"",
	}
	for text, want := range cases {
		_, err := ParseDefinition("fixer", "fixer.md", []byte(text))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q:\n got %v\nwant it to contain %q", text, err, want)
		}
	}
	if d, err := ParseDefinition("plain", "plain.md", []byte("Just instructions.")); err != nil || d.Prompt != "Just instructions." {
		t.Errorf("no frontmatter: %+v %v", d, err)
	}
}
