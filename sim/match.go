package sim

import (
	"fmt"
	"path"
	"strings"
)

// exchange is what the sim understood of one model request: the facts rules
// match on, taken from the body the same way for both APIs.
type exchange struct {
	api          string
	model        string
	stream       bool
	turn         int    // 1 + assistant messages
	lastUser     string // text of the newest user message that is not only tool results
	toolResult   string // the newest tool result(s), joined by newlines
	hasResult    bool
	tools        []string // names of the tools offered
	system       string
	maxTokens    int
	includeUsage bool // OpenAI stream_options.include_usage
	inputTokens  int  // estimated, used when the script gives no usage
}

// failures lists the conditions of c that x does not meet, each saying what
// was wanted, what the request had, and the condition's line.
func (c *Conditions) failures(x *exchange) []string {
	var out []string
	add := func(name, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if line := c.lines[name]; line > 0 {
			msg += fmt.Sprintf(" (line %d)", line)
		}
		out = append(out, msg)
	}
	if c.API != "" && c.API != x.api {
		add("api", "api is %s, the request is %s", c.API, x.api)
	}
	if c.Model != "" {
		if ok, _ := path.Match(c.Model, x.model); !ok {
			add("model", "model %q does not match %q", c.Model, x.model)
		}
	}
	if c.Turn != 0 && c.Turn != x.turn {
		add("turn", "turn is %d, the request is turn %d", c.Turn, x.turn)
	}
	if c.LastUser != "" && !strings.Contains(x.lastUser, c.LastUser) {
		add("last_user", "last_user %q is not in the last user message", c.LastUser)
	}
	if c.LastUserRegexp != nil && !c.LastUserRegexp.MatchString(x.lastUser) {
		add("last_user_regexp", "last_user_regexp %q does not match the last user message", c.LastUserRegexp.String())
	}
	if c.ToolResult != "" {
		switch {
		case !x.hasResult:
			add("tool_result", "tool_result %q: the request has no tool result", c.ToolResult)
		case !strings.Contains(x.toolResult, c.ToolResult):
			add("tool_result", "tool_result %q is not in the newest tool result", c.ToolResult)
		}
	}
	if len(c.Tools) > 0 {
		var missing []string
		for _, t := range c.Tools {
			if !contains(x.tools, t) {
				missing = append(missing, t)
			}
		}
		if len(missing) > 0 {
			add("tools", "tools %s not offered", strings.Join(missing, ", "))
		}
	}
	if c.System != "" && !strings.Contains(x.system, c.System) {
		add("system", "system %q is not in the system prompt", c.System)
	}
	if c.Stream != nil && *c.Stream != x.stream {
		add("stream", "stream is %t, the request's is %t", *c.Stream, x.stream)
	}
	if c.MaxTokens != 0 && x.maxTokens > c.MaxTokens {
		add("max_tokens", "max_tokens at most %d, the request asks for %d", c.MaxTokens, x.maxTokens)
	}
	return out
}

// describe names a request for an error message: enough to see why no rule
// matched without opening the request log.
func (x *exchange) describe(seq int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s request #%d (model %q, turn %d, ", x.api, seq, x.model, x.turn)
	fmt.Fprintf(&b, "last user %q, ", clip(x.lastUser, 160))
	if x.hasResult {
		fmt.Fprintf(&b, "newest tool result %q, ", clip(x.toolResult, 160))
	} else {
		b.WriteString("no tool result, ")
	}
	if len(x.tools) == 0 {
		b.WriteString("no tools)")
	} else {
		fmt.Fprintf(&b, "tools [%s])", strings.Join(x.tools, " "))
	}
	return b.String()
}

// clip shortens s to about n bytes, keeping its end, where the newest text of a
// long prompt is.
func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	cut := len(s) - n
	for cut < len(s) && (s[cut]&0xC0) == 0x80 { // do not split a UTF-8 sequence
		cut++
	}
	return "…" + s[cut:]
}

// pick chooses the rule for x and consumes one of its uses, or explains why
// none fits. Callers hold s.mu.
func (s *Server) pick(x *exchange, seq int) (*Rule, error) {
	sc := s.script
	if sc == nil || len(sc.Rules) == 0 {
		return nil, fmt.Errorf("harvest sim: no script loaded; cannot answer %s", x.describe(seq))
	}
	if sc.Mode == ModeSequence {
		for s.next < len(sc.Rules) && s.uses[s.next] >= sc.Rules[s.next].Times {
			s.next++
		}
		if s.next >= len(sc.Rules) {
			return nil, fmt.Errorf("harvest sim: %s: the sequence is over (all %d rules used); unexpected %s",
				sc.Name, len(sc.Rules), x.describe(seq))
		}
		r := sc.Rules[s.next]
		if fails := r.When.failures(x); len(fails) > 0 {
			return nil, fmt.Errorf("harvest sim: %s: the next rule in the sequence, %q (%s:%d), does not match %s: %s",
				sc.Name, r.Name, sc.Name, r.Line, x.describe(seq), strings.Join(fails, "; "))
		}
		s.uses[s.next]++
		return r, nil
	}
	// The closest rule fails the fewest conditions; among those, the one
	// whose other conditions held is the more specific.
	best, bestFails, bestHeld := -1, []string(nil), 0
	for i, r := range sc.Rules {
		fails := r.When.failures(x)
		if r.Times > 0 && s.uses[i] >= r.Times {
			fails = append(fails, fmt.Sprintf("used up (times: %d)", r.Times))
		}
		if len(fails) == 0 {
			s.uses[i]++
			return r, nil
		}
		held := len(r.When.lines) - len(fails)
		if best < 0 || len(fails) < len(bestFails) || (len(fails) == len(bestFails) && held > bestHeld) {
			best, bestFails, bestHeld = i, fails, held
		}
	}
	r := sc.Rules[best]
	return nil, fmt.Errorf("harvest sim: %s: no rule matches %s; the closest rule is %q (%s:%d): %s",
		sc.Name, x.describe(seq), r.Name, sc.Name, r.Line, strings.Join(bestFails, "; "))
}
