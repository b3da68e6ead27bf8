package builtin

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/llm"
)

// conversation builds: user task, then n steps of (assistant tool call, user
// tool result with big output), then a final assistant text.
func conversation(n, outputBytes int) []llm.Message {
	msgs := []llm.Message{llm.UserText("fix the failing test in ./calc")}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{llm.Text{Text: "step"}, llm.ToolUse{ID: id, Name: "bash", Input: json.RawMessage(`{"command":"go test"}`)}}},
			llm.Message{Role: llm.RoleUser, Content: []llm.Block{llm.ToolResult{ToolUseID: id, Content: []llm.Block{llm.Text{Text: strings.Repeat("x", outputBytes)}}}}},
		)
	}
	return msgs
}

func TestPruneKeepsTailAndPairs(t *testing.T) {
	c := newCompactor(10000, CompactionConfig{Threshold: 0.8, ProtectTokens: 1500})
	msgs := conversation(10, 4000) // ~1000 tokens per result
	before := estimateTokens("", msgs)
	out, pruned := c.prune(msgs)
	after := estimateTokens("", out)
	if pruned == 0 || after >= before {
		t.Fatalf("pruned %d, %d -> %d tokens", pruned, before, after)
	}
	// The protected tail is untouched, and every tool call still has its result.
	start := c.protectedStart(msgs)
	for i := start; i < len(msgs); i++ {
		if messageTokens(out[i]) != messageTokens(msgs[i]) {
			t.Errorf("message %d in the protected tail changed", i)
		}
	}
	if !pairsValid(out) {
		t.Error("pruning broke tool call / result pairs")
	}
	if msgs[2].Content[0].(llm.ToolResult).Content[0].(llm.Text).Text != strings.Repeat("x", 4000) {
		t.Error("prune modified its input")
	}
	// Pruning again changes nothing.
	if _, again := c.prune(out); again != 0 {
		t.Errorf("second prune pruned %d more", again)
	}
}

func TestSummaryCutNeverOrphansAResult(t *testing.T) {
	c := newCompactor(10000, CompactionConfig{Threshold: 0.8, ProtectTokens: 2500})
	for n := 1; n < 12; n++ {
		msgs := conversation(n, 4000)
		cut := c.summaryCut(msgs)
		if cut == 0 {
			continue
		}
		if msgs[cut].Role != llm.RoleAssistant {
			t.Fatalf("n=%d: the tail starts with a %s message", n, msgs[cut].Role)
		}
		tail := append([]llm.Message{llm.UserText("summary")}, msgs[cut:]...)
		if !pairsValid(tail) {
			t.Fatalf("n=%d: the kept tail has an orphaned tool result", n)
		}
	}
}

func TestNeeded(t *testing.T) {
	c := newCompactor(2000, CompactionConfig{})
	if c.limit() != 1700 || c.needed(1700) || !c.needed(1701) {
		t.Errorf("limit %d", c.limit())
	}
	if newCompactor(0, CompactionConfig{}).needed(1 << 30) {
		t.Error("an unknown window compacted")
	}
	if newCompactor(2000, CompactionConfig{Disabled: true}).needed(1 << 30) {
		t.Error("disabled compaction compacted")
	}
	// protect_tokens never exceeds half the usable window.
	if c := newCompactor(2000, CompactionConfig{ProtectTokens: 40000}); c.protect > 850 {
		t.Errorf("protect %d for a 2000-token window", c.protect)
	}
}

// pairsValid: every tool result answers a tool call of the message before.
func pairsValid(msgs []llm.Message) bool {
	for i, m := range msgs {
		for _, b := range m.Content {
			tr, ok := b.(llm.ToolResult)
			if !ok {
				continue
			}
			if i == 0 || msgs[i-1].Role != llm.RoleAssistant {
				return false
			}
			found := false
			for _, u := range msgs[i-1].ToolUses() {
				if u.ID == tr.ToolUseID {
					found = true
				}
			}
			if !found {
				return false
			}
		}
	}
	return true
}
