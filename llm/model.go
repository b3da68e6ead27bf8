package llm

import (
	"fmt"
	"strings"
)

// ParseModel splits a model name "provider/model" at its first slash:
// "anthropic/claude-sonnet-4-5" gives ("anthropic", "claude-sonnet-4-5"), and
// "openai/meta-llama/llama-3.3-70b" gives ("openai", "meta-llama/llama-3.3-70b")
// (OpenRouter's own model ids contain slashes).
func ParseModel(name string) (provider, model string, err error) {
	provider, model, ok := strings.Cut(strings.TrimSpace(name), "/")
	switch {
	case name == "":
		return "", "", fmt.Errorf("no model name; use provider/model, e.g. anthropic/claude-sonnet-4-5 or openai/gpt-4.1")
	case !ok:
		return "", "", fmt.Errorf("model %q has no provider; write %s/%s", name, guessProvider(name), name)
	case provider == "":
		return "", "", fmt.Errorf("model %q has an empty provider before the slash; use provider/model, e.g. anthropic/claude-sonnet-4-5", name)
	case model == "":
		return "", "", fmt.Errorf("model %q has no model id after %q", name, provider+"/")
	}
	return provider, model, nil
}

// guessProvider suggests a prefix for an unprefixed model id, for the error.
func guessProvider(model string) string {
	m := strings.ToLower(model)
	switch {
	case strings.HasPrefix(m, "claude"):
		return "anthropic"
	case strings.HasPrefix(m, "gpt"), strings.HasPrefix(m, "o1"), strings.HasPrefix(m, "o3"), strings.HasPrefix(m, "o4"):
		return "openai"
	}
	return "<provider>"
}
