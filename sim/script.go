package sim

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Modes of a script.
const (
	ModeMatch    = "match"    // each request gets the first rule that holds and has uses left
	ModeSequence = "sequence" // rules are used in order; each must hold for its request
)

// APIs the sim speaks; also Request.API.
const (
	APIAnthropic = "anthropic"
	APIOpenAI    = "openai"
)

// Script is a parsed script: which reply to give to which request.
type Script struct {
	Name     string   // the file name errors and logs use
	Mode     string   // ModeMatch or ModeSequence
	Models   []string // listed by GET /v1/models
	Defaults Defaults
	Rules    []*Rule
}

// Defaults apply to every reply that does not say otherwise.
type Defaults struct {
	Usage      Usage
	Delay      time.Duration
	ChunkDelay time.Duration
}

// Rule is one entry of rules:.
type Rule struct {
	Name  string
	Line  int // where the rule starts in the script
	When  Conditions
	Times int // uses; 0 is unlimited (match mode only)
	Reply Reply
}

// Conditions must all hold for a rule to answer a request. Zero values are
// "any".
type Conditions struct {
	API            string
	Model          string // a path.Match glob
	Turn           int    // 1 + the number of assistant messages in the request
	LastUser       string // substring of the newest user message the user typed
	LastUserRegexp *regexp.Regexp
	ToolResult     string   // substring of the newest tool result(s)
	Tools          []string // all must be offered
	System         string   // substring of the system prompt
	Stream         *bool    // the request asked for a stream (or did not)
	MaxTokens      int      // the request's max_tokens is at most this

	lines map[string]int // condition name → line, for explanations
}

// Reply is what a rule answers: content, or an injected error.
type Reply struct {
	Thinking    string
	HasThinking bool
	Text        string
	HasText     bool
	ToolCalls   []ToolCall
	StopReason  string // as written; mapped per API
	Usage       Usage
	Delay       time.Duration
	ChunkDelay  time.Duration
	Error       *ErrorReply
}

// ToolCall is one tool call in a reply.
type ToolCall struct {
	ID    string // optional; generated when empty
	Name  string
	Input []byte // a JSON object, keys in script order
}

// Usage is token usage in Anthropic's terms; a nil field is unset (then the
// defaults, then an estimate, are used). OpenAI replies map it: prompt_tokens
// = input + cache read + cache creation, completion_tokens = output,
// prompt_tokens_details.cached_tokens = cache read.
type Usage struct {
	InputTokens              *int
	OutputTokens             *int
	CacheReadInputTokens     *int
	CacheCreationInputTokens *int
}

// ErrorReply is an error status given instead of a reply.
type ErrorReply struct {
	Status     int
	Type       string // the API's error type; default from the status
	Message    string
	RetryAfter time.Duration
	hasRetry   bool
}

// stopReasons maps every accepted stop_reason to its Anthropic and OpenAI
// spelling, so a script can be written in either vocabulary and serve both.
var stopReasons = map[string][2]string{
	"end_turn":       {"end_turn", "stop"},
	"max_tokens":     {"max_tokens", "length"},
	"stop_sequence":  {"stop_sequence", "stop"},
	"tool_use":       {"tool_use", "tool_calls"},
	"pause_turn":     {"pause_turn", "stop"},
	"refusal":        {"refusal", "content_filter"},
	"stop":           {"end_turn", "stop"},
	"length":         {"max_tokens", "length"},
	"tool_calls":     {"tool_use", "tool_calls"},
	"content_filter": {"refusal", "content_filter"},
}

var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)

// LoadScript reads and parses the script at path.
func LoadScript(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading script: %w", err)
	}
	return ParseScript(path, data)
}

// ParseScript parses a script; name is used in errors, which read
// "NAME:LINE: reason".
func ParseScript(name string, data []byte) (*Script, error) {
	d := &decoder{file: name}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if err.Error() == "EOF" {
			return nil, &loadError{file: name, msg: "the script is empty: it needs at least rules:"}
		}
		return nil, d.syntaxError(data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, d.errf(&extra, "a script is one YAML document; remove the second one (---)")
	}
	root := resolve(&doc)
	fields, err := d.mapping(root, "the script", "mode", "models", "defaults", "rules")
	if err != nil {
		return nil, err
	}
	s := &Script{Name: filepath.Base(name), Mode: ModeMatch}
	var rulesNode *yaml.Node
	for _, f := range fields {
		switch f.key {
		case "mode":
			m, err := d.str(f)
			if err != nil {
				return nil, err
			}
			if m != ModeMatch && m != ModeSequence {
				return nil, d.errf(f.value, "mode %q: use match or sequence", m)
			}
			s.Mode = m
		case "models":
			if s.Models, err = d.strings(f); err != nil {
				return nil, err
			}
		case "defaults":
			if err := d.defaults(f.value, &s.Defaults); err != nil {
				return nil, err
			}
		case "rules":
			rulesNode = f.value
		}
	}
	if rulesNode == nil {
		return nil, d.errf(root, "no rules: a script needs rules: with at least one rule")
	}
	if rulesNode.Kind != yaml.SequenceNode || len(rulesNode.Content) == 0 {
		return nil, d.errf(rulesNode, "rules must be a list with at least one rule (each starting with -)")
	}
	names := map[string]int{}
	for i, rn := range rulesNode.Content {
		r, err := d.rule(resolve(rn), i+1, s.Mode)
		if err != nil {
			return nil, err
		}
		if prev, dup := names[r.Name]; dup {
			return nil, d.errf(rn, "rule name %q is already used by the rule at line %d", r.Name, prev)
		}
		names[r.Name] = r.Line
		s.Rules = append(s.Rules, r)
	}
	return s, nil
}

func (d *decoder) defaults(n *yaml.Node, out *Defaults) error {
	fields, err := d.mapping(n, "defaults", "usage", "delay", "chunk_delay")
	if err != nil {
		return err
	}
	for _, f := range fields {
		switch f.key {
		case "usage":
			err = d.usage(f.value, &out.Usage)
		case "delay":
			out.Delay, err = d.duration(f)
		case "chunk_delay":
			out.ChunkDelay, err = d.duration(f)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) rule(n *yaml.Node, index int, mode string) (*Rule, error) {
	fields, err := d.mapping(n, fmt.Sprintf("rule %d", index), "name", "when", "times", "reply")
	if err != nil {
		return nil, err
	}
	r := &Rule{Name: fmt.Sprintf("rule %d", index), Line: n.Line}
	hasReply := false
	for _, f := range fields {
		switch f.key {
		case "name":
			if r.Name, err = d.str(f); err != nil {
				return nil, err
			}
			if strings.TrimSpace(r.Name) == "" {
				return nil, d.errf(f.value, "name must not be empty")
			}
		case "when":
			if err := d.conditions(f.value, &r.When); err != nil {
				return nil, err
			}
		case "times":
			min := 0
			if mode == ModeSequence {
				min = 1
			}
			if r.Times, err = d.integer(f, min); err != nil {
				return nil, err
			}
		case "reply":
			if err := d.reply(f.value, &r.Reply); err != nil {
				return nil, err
			}
			hasReply = true
		}
	}
	if !hasReply {
		return nil, d.errf(n, "rule %q has no reply: give it reply: with text, tool_calls, thinking or error", r.Name)
	}
	if mode == ModeSequence && r.Times == 0 {
		r.Times = 1
	}
	return r, nil
}

func (d *decoder) conditions(n *yaml.Node, c *Conditions) error {
	fields, err := d.mapping(n, "when", "api", "model", "turn", "last_user", "last_user_regexp",
		"tool_result", "tools", "system", "stream", "max_tokens")
	if err != nil {
		return err
	}
	c.lines = map[string]int{}
	for _, f := range fields {
		c.lines[f.key] = f.kNode.Line
		switch f.key {
		case "api":
			if c.API, err = d.str(f); err != nil {
				return err
			}
			if c.API != APIAnthropic && c.API != APIOpenAI {
				return d.errf(f.value, "api %q: use anthropic or openai", c.API)
			}
		case "model":
			c.Model, err = d.glob(f)
		case "turn":
			c.Turn, err = d.integer(f, 1)
		case "last_user":
			c.LastUser, err = d.str(f)
		case "last_user_regexp":
			var s string
			if s, err = d.str(f); err != nil {
				return err
			}
			if c.LastUserRegexp, err = regexp.Compile(s); err != nil {
				return d.errf(f.value, "last_user_regexp: %v", err)
			}
		case "tool_result":
			c.ToolResult, err = d.str(f)
		case "tools":
			c.Tools, err = d.strings(f)
		case "system":
			c.System, err = d.str(f)
		case "stream":
			var b bool
			if f.value.Kind != yaml.ScalarNode || f.value.ShortTag() != "!!bool" {
				return d.errf(f.value, "stream must be true or false")
			}
			_ = f.value.Decode(&b)
			c.Stream = &b
		case "max_tokens":
			c.MaxTokens, err = d.integer(f, 1)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) reply(n *yaml.Node, r *Reply) error {
	fields, err := d.mapping(n, "reply", "thinking", "text", "tool_calls", "stop_reason", "usage", "delay", "chunk_delay", "error")
	if err != nil {
		return err
	}
	var content, errorNode *yaml.Node
	for _, f := range fields {
		switch f.key {
		case "thinking":
			r.Thinking, err = d.str(f)
			r.HasThinking = true
			content = f.kNode
		case "text":
			r.Text, err = d.str(f)
			r.HasText = true
			content = f.kNode
		case "tool_calls":
			err = d.toolCalls(f.value, r)
			content = f.kNode
		case "stop_reason":
			var s string
			if s, err = d.str(f); err != nil {
				return err
			}
			if _, ok := stopReasons[s]; !ok {
				return d.errf(f.value, "stop_reason %q: use end_turn, max_tokens, stop_sequence, tool_use, pause_turn or refusal (or OpenAI's stop, length, tool_calls, content_filter)", s)
			}
			r.StopReason = s
			content = f.kNode
		case "usage":
			err = d.usage(f.value, &r.Usage)
		case "delay":
			r.Delay, err = d.duration(f)
		case "chunk_delay":
			r.ChunkDelay, err = d.duration(f)
		case "error":
			r.Error = &ErrorReply{}
			err = d.errorReply(f.value, r.Error)
			errorNode = f.kNode
		}
		if err != nil {
			return err
		}
	}
	switch {
	case errorNode != nil && content != nil:
		return d.errf(content, "reply has both error and %s: an error replaces the reply, remove one", content.Value)
	case errorNode == nil && !r.HasText && !r.HasThinking && len(r.ToolCalls) == 0:
		return d.errf(n, "reply says nothing: give it text, thinking, tool_calls or error")
	}
	if sr := stopReasons[r.StopReason]; sr[0] == "tool_use" && len(r.ToolCalls) == 0 {
		return d.errf(n, "stop_reason %s needs tool_calls", r.StopReason)
	}
	return nil
}

func (d *decoder) toolCalls(n *yaml.Node, r *Reply) error {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return d.errf(n, "tool_calls must be a list of {name, input}, like [{name: Bash, input: {command: ls}}]")
	}
	ids := map[string]bool{}
	for _, cn := range n.Content {
		fields, err := d.mapping(cn, "a tool call", "name", "input", "id")
		if err != nil {
			return err
		}
		tc := ToolCall{Input: []byte("{}")}
		for _, f := range fields {
			switch f.key {
			case "name":
				if tc.Name, err = d.str(f); err != nil {
					return err
				}
				if !toolNameRE.MatchString(tc.Name) {
					return d.errf(f.value, "tool name %q: use 1-128 letters, digits, _ or -", tc.Name)
				}
			case "input":
				if resolve(f.value).Kind != yaml.MappingNode {
					return d.errf(f.value, "input must be a mapping of the tool's arguments, not %s", kindName(f.value))
				}
				if tc.Input, err = d.toJSON(f.value); err != nil {
					return err
				}
			case "id":
				if tc.ID, err = d.str(f); err != nil {
					return err
				}
				if ids[tc.ID] {
					return d.errf(f.value, "tool call id %q is used twice in this reply", tc.ID)
				}
				ids[tc.ID] = true
			}
		}
		if tc.Name == "" {
			return d.errf(cn, "a tool call needs a name")
		}
		r.ToolCalls = append(r.ToolCalls, tc)
	}
	return nil
}

func (d *decoder) usage(n *yaml.Node, u *Usage) error {
	fields, err := d.mapping(n, "usage", "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
	if err != nil {
		return err
	}
	for _, f := range fields {
		v, err := d.integer(f, 0)
		if err != nil {
			return err
		}
		switch f.key {
		case "input_tokens":
			u.InputTokens = &v
		case "output_tokens":
			u.OutputTokens = &v
		case "cache_read_input_tokens":
			u.CacheReadInputTokens = &v
		case "cache_creation_input_tokens":
			u.CacheCreationInputTokens = &v
		}
	}
	return nil
}

func (d *decoder) errorReply(n *yaml.Node, e *ErrorReply) error {
	fields, err := d.mapping(n, "error", "status", "type", "message", "retry_after")
	if err != nil {
		return err
	}
	for _, f := range fields {
		switch f.key {
		case "status":
			if e.Status, err = d.integer(f, 400); err != nil {
				return err
			}
			if e.Status > 599 {
				return d.errf(f.value, "status %d: use an HTTP error status, 400-599", e.Status)
			}
		case "type":
			e.Type, err = d.str(f)
		case "message":
			e.Message, err = d.str(f)
		case "retry_after":
			e.RetryAfter, err = d.duration(f)
			e.hasRetry = true
		}
		if err != nil {
			return err
		}
	}
	if e.Status == 0 {
		return d.errf(n, "error needs a status, like status: 429")
	}
	return nil
}

// merge returns u with unset fields taken from def.
func (u Usage) merge(def Usage) Usage {
	pick := func(a, b *int) *int {
		if a != nil {
			return a
		}
		return b
	}
	return Usage{
		InputTokens:              pick(u.InputTokens, def.InputTokens),
		OutputTokens:             pick(u.OutputTokens, def.OutputTokens),
		CacheReadInputTokens:     pick(u.CacheReadInputTokens, def.CacheReadInputTokens),
		CacheCreationInputTokens: pick(u.CacheCreationInputTokens, def.CacheCreationInputTokens),
	}
}
