package openai_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/llmtest"
	"github.com/harvest-dev/harvest/llm/openai"
	"github.com/harvest-dev/harvest/sim"
)

var backend = llmtest.Backend{
	API:   sim.APIOpenAI,
	Model: "gpt-4.1",
	New: func(t testing.TB, url string) llm.Provider {
		p, err := openai.New(openai.Config{APIKey: "sk-test", BaseURL: url + "/v1"})
		if err != nil {
			t.Fatal(err)
		}
		return p
	},
}

func TestConformance(t *testing.T) { llmtest.Run(t, backend) }

func TestRequestShape(t *testing.T) {
	for _, tc := range []struct {
		field, want, not string
	}{
		{"", `"max_tokens":1024`, "max_completion_tokens"}, // not api.openai.com
		{"max_completion_tokens", `"max_completion_tokens":1024`, `"max_tokens"`},
	} {
		s := llmtest.StartSim(t, "rules:\n  - {name: any, reply: {text: ok}}\n")
		p, err := openai.New(openai.Config{APIKey: "sk-test", BaseURL: s.URL + "/v1", MaxTokensField: tc.field})
		if err != nil {
			t.Fatal(err)
		}
		temp := 0.25
		req := llm.Request{Model: "gpt-4.1", MaxTokens: 1024, Temperature: &temp, StopSequences: []string{"END"},
			Thinking: &llm.ThinkingConfig{Effort: "low"}, Tools: []llm.Tool{llmtest.BashTool},
			Messages: []llm.Message{llm.UserText("hi")}}
		if _, err := (&llm.Client{Provider: p}).Complete(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		body := string(s.Log()[0].Body)
		for _, want := range []string{tc.want, `"stream":true`, `"stream_options":{"include_usage":true}`,
			`"temperature":0.25`, `"stop":["END"]`, `"reasoning_effort":"low"`,
			// The schema is sent verbatim.
			`"parameters":{"type":"object","properties":{"command":{"type":"string"},"timeout":{"type":"integer"}},"required":["command"]}`} {
			if !strings.Contains(body, want) {
				t.Errorf("field %q: body lacks %s: %s", tc.field, want, body)
			}
		}
		if strings.Contains(body, tc.not) {
			t.Errorf("field %q: body has %s: %s", tc.field, tc.not, body)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := openai.New(openai.Config{}); err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Errorf("no key for api.openai.com: %v", err)
	}
	if _, err := openai.New(openai.Config{BaseURL: "localhost:11434"}); err == nil || !strings.Contains(err.Error(), "absolute URL") {
		t.Errorf("relative base URL: %v", err)
	}
	if _, err := openai.New(openai.Config{BaseURL: "http://localhost:11434/v1"}); err != nil {
		t.Errorf("a local server needs no key: %v", err)
	}
	if _, err := openai.New(openai.Config{BaseURL: "http://localhost:11434/v1", MaxTokensField: "n_predict"}); err == nil {
		t.Errorf("unknown MaxTokensField accepted")
	}
}

func TestCountTokensUnsupported(t *testing.T) {
	s := llmtest.StartSim(t, "rules:\n  - {name: any, reply: {text: ok}}\n")
	c, _ := llmtest.Client(t, backend, s)
	_, err := c.CountTokens(context.Background(), llm.Request{Messages: []llm.Message{llm.UserText("hi")}})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("err %v, want ErrUnsupported", err)
	}
}
