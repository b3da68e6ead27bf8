package terminal

import (
	"encoding/json"
	"strings"
)

// toolSummary is a one-line description of a Claude Code tool call
// ("Bash: go test ./...").
func toolSummary(tool string, input json.RawMessage) string {
	var in map[string]any
	_ = json.Unmarshal(input, &in)
	for _, k := range []string{"command", "file_path", "pattern", "url", "path", "description", "prompt"} {
		if s, ok := in[k].(string); ok && s != "" {
			s = strings.ReplaceAll(s, "\n", " ")
			if len(s) > 120 {
				s = s[:120] + "…"
			}
			return tool + ": " + s
		}
	}
	return tool
}

// toolOutput is a readable form of a PostToolUse hook's tool_response (the
// tool's structured result; the exact text the model got is in the
// transcript): Bash's stdout and stderr, a read file's content, a string
// as is, anything else as JSON. Capped at toolOutputMx bytes.
func toolOutput(resp json.RawMessage) string {
	var out string
	var s string
	var obj struct {
		Stdout *string `json:"stdout"`
		Stderr string  `json:"stderr"`
		File   *struct {
			Content string `json:"content"`
		} `json:"file"`
	}
	switch {
	case json.Unmarshal(resp, &s) == nil:
		out = s
	case json.Unmarshal(resp, &obj) == nil && obj.Stdout != nil:
		out = *obj.Stdout
		if obj.Stderr != "" {
			out = strings.TrimRight(out, "\n") + "\n" + obj.Stderr
		}
	case obj.File != nil:
		out = obj.File.Content
	default:
		out = string(resp)
	}
	if len(out) > toolOutputMx {
		out = out[:toolOutputMx] + "\n[output cut]"
	}
	return out
}

// jsonText is a JSON value as text: a string unquoted, anything else as is.
func jsonText(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	return string(v)
}
