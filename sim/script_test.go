package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBadScripts: every mistake fails at load with "file:line: reason", the
// line being where the mistake is.
func TestBadScripts(t *testing.T) {
	cases := []struct {
		name, script, want string
	}{
		{"empty", "", "bad.yaml: the script is empty"},
		{"syntax", "rules:\n  - reply: {text: hi}\n   bad: [", "bad.yaml:3: YAML syntax:"},
		{"indent", "rules:\n  - reply:\n      text: hi\n     delay: 1s\n", "bad.yaml:4: YAML syntax: did not find expected key"},
		{"unclosed flow", "rules:\n  - reply: {text: hi}\n  - reply: {text: ho\n", "bad.yaml:3: YAML syntax:"},
		{"tabs", "rules:\n\t- reply: {text: hi}\n", "bad.yaml:2: YAML syntax: found character that cannot start any token"},
		{"not a mapping", "- a\n- b\n", "bad.yaml:1: the script must be a mapping"},
		{"unknown top field", "mode: match\nrule:\n  - reply: {text: hi}\n", `bad.yaml:2: unknown field "rule" in the script (known: mode, models, defaults, rules)`},
		{"no rules", "mode: match\n", "bad.yaml:1: no rules: a script needs rules:"},
		{"empty rules", "rules: []\n", "bad.yaml:1: rules must be a list with at least one rule"},
		{"bad mode", "mode: random\nrules:\n  - reply: {text: hi}\n", `bad.yaml:1: mode "random": use match or sequence`},
		{"unknown rule field", "rules:\n  - reply: {text: hi}\n    wen: {turn: 1}\n", `bad.yaml:3: unknown field "wen" in rule 1 (known: name, when, times, reply)`},
		{"missing reply", "rules:\n  - name: a\n    when: {turn: 1}\n", `bad.yaml:2: rule "a" has no reply`},
		{"empty reply", "rules:\n  - reply: {delay: 1s}\n", "bad.yaml:2: reply says nothing: give it text, thinking, tool_calls or error"},
		{"unknown condition", "rules:\n  - when: {last_usr: hi}\n    reply: {text: hi}\n", `bad.yaml:2: unknown field "last_usr" in when`},
		{"bad api", "rules:\n  - when:\n      api: gemini\n    reply: {text: hi}\n", `bad.yaml:3: api "gemini": use anthropic or openai`},
		{"bad glob", "rules:\n  - when:\n      model: \"claude-[\"\n    reply: {text: hi}\n", `bad.yaml:3: model: bad glob "claude-["`},
		{"bad regexp", "rules:\n  - when:\n      last_user_regexp: \"(unclosed\"\n    reply: {text: hi}\n", "bad.yaml:3: last_user_regexp: error parsing regexp: missing closing )"},
		{"turn zero", "rules:\n  - when: {turn: 0}\n    reply: {text: hi}\n", "bad.yaml:2: turn must be at least 1, not 0"},
		{"turn text", "rules:\n  - when: {turn: two}\n    reply: {text: hi}\n", `bad.yaml:2: turn must be a whole number, not "two"`},
		{"tools not list", "rules:\n  - when: {tools: {a: b}}\n    reply: {text: hi}\n", "bad.yaml:2: tools must be a list of strings"},
		{"stream not bool", "rules:\n  - when: {stream: maybe}\n    reply: {text: hi}\n", "bad.yaml:2: stream must be true or false"},
		{"bad duration", "rules:\n  - reply:\n      text: hi\n      delay: 50\n", `bad.yaml:4: delay: "50" is not a duration: write it like 50ms`},
		{"bad chunk delay", "defaults:\n  chunk_delay: fast\nrules:\n  - reply: {text: hi}\n", `bad.yaml:2: chunk_delay: "fast" is not a duration`},
		{"negative delay", "rules:\n  - reply: {text: hi, delay: -5ms}\n", "bad.yaml:2: delay must not be negative"},
		{"bad stop reason", "rules:\n  - reply: {text: hi, stop_reason: done}\n", `bad.yaml:2: stop_reason "done": use end_turn`},
		{"tool_use without calls", "rules:\n  - reply: {text: hi, stop_reason: tool_use}\n", "bad.yaml:2: stop_reason tool_use needs tool_calls"},
		{"tool call no name", "rules:\n  - reply:\n      tool_calls:\n        - input: {a: 1}\n", "bad.yaml:4: a tool call needs a name"},
		{"tool call bad name", "rules:\n  - reply:\n      tool_calls: [{name: \"read file\"}]\n", `bad.yaml:3: tool name "read file": use 1-128 letters`},
		{"tool input not map", "rules:\n  - reply:\n      tool_calls: [{name: Bash, input: ls}]\n", `bad.yaml:3: input must be a mapping of the tool's arguments, not "ls"`},
		{"tool calls empty", "rules:\n  - reply:\n      tool_calls: []\n", "bad.yaml:3: tool_calls must be a list"},
		{"duplicate tool id", "rules:\n  - reply:\n      tool_calls: [{name: a, id: x}, {name: b, id: x}]\n", `bad.yaml:3: tool call id "x" is used twice`},
		{"error and text", "rules:\n  - reply:\n      error: {status: 429}\n      text: hi\n", "bad.yaml:4: reply has both error and text"},
		{"error no status", "rules:\n  - reply:\n      error: {message: boom}\n", "bad.yaml:3: error needs a status"},
		{"error status 200", "rules:\n  - reply:\n      error: {status: 200}\n", "bad.yaml:3: status must be at least 400, not 200"},
		{"error status 700", "rules:\n  - reply:\n      error: {status: 700}\n", "bad.yaml:3: status 700: use an HTTP error status"},
		{"bad usage field", "rules:\n  - reply:\n      text: hi\n      usage: {prompt_tokens: 3}\n", `bad.yaml:4: unknown field "prompt_tokens" in usage`},
		{"negative usage", "rules:\n  - reply:\n      text: hi\n      usage: {input_tokens: -3}\n", "bad.yaml:4: input_tokens must be at least 0"},
		{"duplicate field", "rules:\n  - reply: {text: hi}\n    reply: {text: ho}\n", `bad.yaml:3: field "reply" appears twice in rule 1`},
		{"duplicate rule name", "rules:\n  - name: a\n    reply: {text: hi}\n  - name: a\n    reply: {text: ho}\n", `bad.yaml:4: rule name "a" is already used by the rule at line 2`},
		{"sequence times 0", "mode: sequence\nrules:\n  - times: 0\n    reply: {text: hi}\n", "bad.yaml:3: times must be at least 1"},
		{"two documents", "rules:\n  - reply: {text: hi}\n---\nrules: []\n", "bad.yaml:3: a script is one YAML document"},
		{"text not string", "rules:\n  - reply:\n      text: [a, b]\n", "bad.yaml:3: text must be a string, not a list"},
	}
	for _, c := range cases {
		_, err := ParseScript("testdata/bad.yaml", []byte(c.script))
		if err == nil {
			t.Errorf("%s: loaded without error", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n  got  %q\n  want %q", c.name, err, c.want)
		}
		if !strings.HasPrefix(err.Error(), "testdata/bad.yaml") {
			t.Errorf("%s: error %q does not start with the file name", c.name, err)
		}
	}
}

func TestLoadScript(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s.yaml")
	os.WriteFile(p, []byte(`# comment
mode: sequence
models: [claude-sonnet-4-5, gpt-4.1]
defaults:
  usage: {input_tokens: 7}
  chunk_delay: 2ms
  delay: 1ms
rules:
  - name: first
    when:
      api: anthropic
      model: "claude-*"
      turn: 1
      last_user: hello
      last_user_regexp: "^hel+o"
      tools: [Write, Bash]
      system: "You are"
      stream: true
      max_tokens: 1000
    times: 2
    reply:
      thinking: hmm
      text: hi
      tool_calls:
        - name: Write
          input: {file_path: /x, content: "a\nb", mode: 420, exec: true, tags: [a, 1], none: null, f: 1.5}
          id: toolu_fixed
      stop_reason: tool_calls
      usage: {output_tokens: 3, cache_read_input_tokens: 4, cache_creation_input_tokens: 5}
      delay: 50ms
      chunk_delay: 5ms
  - reply:
      error: {status: 429, message: slow down, retry_after: 1s, type: rate_limit_error}
`), 0o644)
	s, err := LoadScript(p)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "s.yaml" || s.Mode != ModeSequence || len(s.Models) != 2 || len(s.Rules) != 2 {
		t.Fatalf("%+v", s)
	}
	if *s.Defaults.Usage.InputTokens != 7 || s.Defaults.ChunkDelay != 2*time.Millisecond || s.Defaults.Delay != time.Millisecond {
		t.Errorf("defaults %+v", s.Defaults)
	}
	r := s.Rules[0]
	w := r.When
	if r.Name != "first" || r.Line != 9 || r.Times != 2 || w.API != "anthropic" || w.Model != "claude-*" || w.Turn != 1 ||
		w.LastUser != "hello" || w.LastUserRegexp.String() != "^hel+o" || strings.Join(w.Tools, ",") != "Write,Bash" ||
		w.System != "You are" || !*w.Stream || w.MaxTokens != 1000 {
		t.Errorf("rule 1: %+v", r)
	}
	rep := r.Reply
	if rep.Thinking != "hmm" || rep.Text != "hi" || rep.StopReason != "tool_calls" || rep.Delay != 50*time.Millisecond || rep.ChunkDelay != 5*time.Millisecond {
		t.Errorf("reply: %+v", rep)
	}
	tc := rep.ToolCalls[0]
	// Arguments keep the script's key order and YAML types.
	if tc.ID != "toolu_fixed" || tc.Name != "Write" || string(tc.Input) != `{"file_path":"/x","content":"a\nb","mode":420,"exec":true,"tags":["a",1],"none":null,"f":1.5}` {
		t.Errorf("tool call: %s %s %s", tc.ID, tc.Name, tc.Input)
	}
	u := rep.Usage.merge(s.Defaults.Usage)
	if *u.InputTokens != 7 || *u.OutputTokens != 3 || *u.CacheReadInputTokens != 4 || *u.CacheCreationInputTokens != 5 {
		t.Errorf("merged usage: %+v", u)
	}
	if s.Rules[1].Name != "rule 2" || s.Rules[1].Times != 1 { // sequence mode: times defaults to 1
		t.Errorf("rule 2: %+v", s.Rules[1])
	}
	e := s.Rules[1].Reply.Error
	if e.Status != 429 || e.Message != "slow down" || e.RetryAfter != time.Second || e.Type != "rate_limit_error" {
		t.Errorf("error: %+v", e)
	}
	if _, err := LoadScript(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: %v", err)
	}
}

func TestSplitText(t *testing.T) {
	for _, s := range []string{
		"Hello, world! This is a longer sentence that should be cut into several pieces.",
		"one",
		"  leading and trailing  ",
		"line one\nline two\n\nline four",
		strings.Repeat("x", 200),
		"héllo wörld ünïcode 日本語のテキスト " + strings.Repeat("語", 40),
	} {
		parts := splitText(s)
		if strings.Join(parts, "") != s {
			t.Errorf("splitText(%q) = %q: does not join back", s, parts)
		}
		for _, p := range parts {
			if p == "" {
				t.Errorf("splitText(%q): empty piece", s)
			}
			if len(p) > maxChunkBytes+8 && strings.Contains(s, " ") {
				t.Errorf("splitText(%q): piece %q too long", s, p)
			}
		}
		if strings.Count(strings.TrimSpace(s), " ") > 3 && len(parts) < 2 {
			t.Errorf("splitText(%q) = %q: one piece for many words", s, parts)
		}
	}
	if got := splitText("Hello big world out there"); got[1][0] != ' ' {
		t.Errorf("pieces start with their space, like the APIs': %q", got)
	}
	in := `{"file_path":"/tmp/ünïcode.txt","content":"日本語\nsecond line"}`
	parts := splitJSON(in)
	if strings.Join(parts, "") != in || len(parts) < 3 {
		t.Errorf("splitJSON: %q", parts)
	}
	for _, p := range parts {
		if !strings.HasPrefix(p, "") || !isValidUTF8(p) {
			t.Errorf("splitJSON cut a rune: %q", p)
		}
	}
}

func isValidUTF8(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }
