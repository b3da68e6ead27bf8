package providers_test

import (
	"context"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/llmtest"
	"github.com/harvest-dev/harvest/llm/providers"
)

// Open selects the API and model from the name and reaches the sim over real
// HTTP, for the built-in endpoints (configured through the environment) and
// for an extra OpenAI-compatible one.
func TestOpen(t *testing.T) {
	s := llmtest.StartSim(t, `
rules:
  - {name: claude, when: {api: anthropic, model: claude-sonnet-4-5}, reply: {text: "from anthropic"}}
  - {name: gpt, when: {api: openai, model: gpt-4.1}, reply: {text: "from openai"}}
  - {name: local, when: {api: openai, model: "qwen/qwen3-coder:30b"}, reply: {text: "from ollama"}}
`)
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-test")
	t.Setenv("ANTHROPIC_BASE_URL", s.URL)
	t.Setenv("OPENAI_API_KEY", "sk-test")
	t.Setenv("OPENAI_BASE_URL", s.URL+"/v1")
	cfg := providers.FromEnv()
	cfg.Endpoints["ollama"] = providers.Endpoint{API: "openai", BaseURL: s.URL + "/v1", APIKey: "ollama"}
	for name, want := range map[string]string{
		"anthropic/claude-sonnet-4-5":     "from anthropic",
		"openai/gpt-4.1":                  "from openai",
		"ollama/qwen/qwen3-coder:30b":     "from ollama",
		" anthropic/claude-sonnet-4-5 \n": "from anthropic",
	} {
		c, err := providers.Open(cfg, name)
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		resp, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{llm.UserText("hi")}})
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		if resp.Message.Text() != want {
			t.Errorf("%q answered %q, want %q", name, resp.Message.Text(), want)
		}
	}
	if c, _ := providers.Open(cfg, "ollama/qwen/qwen3-coder:30b"); c.String() != "ollama/qwen/qwen3-coder:30b" || c.Provider.Name() != "ollama" {
		t.Errorf("client %s, provider %s", c, c.Provider.Name())
	}
}

func TestOpenErrors(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "")
	t.Setenv("ANTHROPIC_BASE_URL", "")
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	cfg := providers.FromEnv()
	cfg.Endpoints["weird"] = providers.Endpoint{API: "gemini"}
	for name, want := range map[string][]string{
		"":                            {"no model name", "anthropic/claude-sonnet-4-5"},
		"claude-sonnet-4-5":           {"has no provider", "anthropic/claude-sonnet-4-5"},
		"gpt-4.1":                     {"openai/gpt-4.1"},
		"anthropic/":                  {"no model id"},
		"/claude-sonnet-4-5":          {"empty provider"},
		"gemini/gemini-3-pro":         {`unknown provider "gemini"`, "anthropic, openai, weird"},
		"weird/x":                     {`API "gemini"`, "anthropic, openai"},
		"anthropic/claude-sonnet-4-5": {"no API key", "ANTHROPIC_API_KEY"},
		"openai/gpt-4.1":              {"no API key", "OPENAI_API_KEY"},
	} {
		_, err := providers.Open(cfg, name)
		if err == nil {
			t.Errorf("%q: no error", name)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not say %q", name, err, w)
			}
		}
	}
}
