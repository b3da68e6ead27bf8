package anthropic_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/anthropic"
	"github.com/harvest-dev/harvest/llm/llmtest"
	"github.com/harvest-dev/harvest/sim"
)

var backend = llmtest.Backend{
	API:   sim.APIAnthropic,
	Model: "claude-sonnet-4-5",
	New: func(t testing.TB, url string) llm.Provider {
		p, err := anthropic.New(anthropic.Config{APIKey: "sk-ant-test", BaseURL: url})
		if err != nil {
			t.Fatal(err)
		}
		return p
	},
}

func TestConformance(t *testing.T) { llmtest.Run(t, backend) }

// With Request.Cache the system prompt, the last tool and the last cacheable
// block of the last message carry cache_control, and nothing else does.
func TestCacheControl(t *testing.T) {
	s := llmtest.StartSim(t, "rules:\n  - {name: any, reply: {text: ok}}\n")
	c, _ := llmtest.Client(t, backend, s)
	req := llm.Request{
		System: "You are Harvest.",
		Tools:  []llm.Tool{llmtest.BashTool, llmtest.ReadTool},
		Cache:  true,
		Messages: []llm.Message{
			llm.UserText("first"),
			{Role: llm.RoleAssistant, Content: []llm.Block{llm.Text{Text: "ok"}}},
			{Role: llm.RoleUser, Content: []llm.Block{llm.Text{Text: "second"}, llm.Text{Text: "third"}}},
		},
	}
	if _, err := c.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	// Without Cache, none.
	req.Cache = false
	if _, err := c.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	log := s.Log()
	if body := string(log[1].Body); strings.Contains(body, "cache_control") {
		t.Errorf("cache_control sent without Request.Cache: %s", body)
	}
	body := string(log[0].Body)
	var sent struct {
		System []struct {
			CacheControl *struct{ Type string } `json:"cache_control"`
		}
		Tools []struct {
			Name         string
			CacheControl *struct{ Type string } `json:"cache_control"`
		}
		Messages []struct {
			Content []struct {
				Text         string
				CacheControl *struct{ Type string } `json:"cache_control"`
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &sent); err != nil {
		t.Fatal(err)
	}
	if len(sent.System) != 1 || sent.System[0].CacheControl == nil || sent.System[0].CacheControl.Type != "ephemeral" {
		t.Errorf("system prompt not marked: %s", body)
	}
	if len(sent.Tools) != 2 || sent.Tools[0].CacheControl != nil || sent.Tools[1].CacheControl == nil {
		t.Errorf("want only the last tool marked: %s", body)
	}
	last := sent.Messages[2].Content
	if last[0].CacheControl != nil || last[1].CacheControl == nil || last[1].Text != "third" {
		t.Errorf("want only the last block of the last message marked: %s", body)
	}
	if n := strings.Count(body, `"cache_control"`); n != 3 {
		t.Errorf("%d cache_control markers, want 3: %s", n, body)
	}

}

func TestCountTokens(t *testing.T) {
	s := llmtest.StartSim(t, "rules:\n  - {name: any, reply: {text: ok}}\n")
	c, _ := llmtest.Client(t, backend, s)
	req := llm.Request{System: "You are Harvest.", Tools: []llm.Tool{llmtest.BashTool},
		Messages: []llm.Message{llm.UserText(strings.Repeat("count these words ", 100))}}
	n, err := c.CountTokens(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	log := s.Log()
	if len(log) != 1 || log[0].Path != "/v1/messages/count_tokens" || log[0].Model != backend.Model {
		t.Fatalf("sim log %+v, want one count_tokens request", log)
	}
	var sent struct {
		Model    string
		System   json.RawMessage
		Tools    []struct{ Name string }
		Messages []json.RawMessage
	}
	if err := json.Unmarshal(log[0].Body, &sent); err != nil {
		t.Fatal(err)
	}
	if len(sent.Tools) != 1 || sent.Tools[0].Name != "bash" || len(sent.Messages) != 1 || !strings.Contains(string(sent.System), "Harvest") {
		t.Errorf("count_tokens body %s lacks the prompt", log[0].Body)
	}
	// The sim estimates a quarter token per byte of the request.
	if want := (len(log[0].Body) + 3) / 4; n != want {
		t.Errorf("counted %d tokens, want the sim's %d", n, want)
	}
}

func TestNoAPIKey(t *testing.T) {
	_, err := anthropic.New(anthropic.Config{})
	if err == nil || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY") {
		t.Errorf("err %v, want one saying to set ANTHROPIC_API_KEY", err)
	}
}
