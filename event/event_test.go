package event

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestRoundTrip: every registered payload survives JSON with its Go type.
func TestRoundTrip(t *testing.T) {
	samples := []Payload{
		SessionState{State: "working"}, MessageQueued{MessageID: "m1", Text: "hi", Mode: "queue", Position: 2},
		MessageDelivered{MessageID: "m1"}, TurnStarted{Prompt: "fix it", Model: "anthropic/claude-sonnet-4-5"},
		AssistantDelta{Text: "Hel"}, AssistantMessage{Text: "Hello"}, ThinkingDelta{Text: "hm"}, Thinking{Text: "hmm"},
		ToolStarted{CallID: "c1", Tool: "bash", Input: json.RawMessage(`{"command":"ls"}`), Summary: "bash: ls"},
		ToolInputDelta{Index: 1, PartialJSON: `{"comm`}, ToolOutput{CallID: "c1", Stream: "stdout", Text: "a\n"},
		ToolFinished{CallID: "c1", Tool: "bash", Output: "a", DurationMS: 5, Blocked: "rule 3"},
		StepFinished{Step: 2, Usage: Usage{InputTokens: 10, OutputTokens: 5, CacheReadTokens: 3}, CostUSD: 0.01},
		TurnFinished{Result: "done", Steps: 3, Usage: Usage{InputTokens: 30}}, TurnCancelled{Reason: "user"},
		TurnFailed{Kind: "budget", Error: "over $1"}, TerminalOutput{Data: []byte{0x1b, '[', 'A', 0}},
		Compaction{BeforeTokens: 900, AfterTokens: 200, Pruned: 4, Summarized: true},
		LoopDetected{Pattern: "cycle", Detail: "A-B-A-B", Action: "stopped"},
		TodoUpdated{Items: []TodoItem{{Content: "x", Status: "pending"}}},
		GitCommitted{Repo: "r", Branch: "b", SHA: "abc", Message: "m", Author: "A <a@x>"}, GitPushed{Repo: "r", Branch: "b", Remote: "origin", From: "0", To: "1"},
		GitHubFailed{Repo: "r", What: "pushing", Error: "e"},
		PROpened{Repo: "r", Number: 4, URL: "u"}, PRMerged{Repo: "r", Number: 4, By: "ada", SHA: "abc"},
		PRClosed{Repo: "r", Number: 4, By: "ada", Branch: "harvest/x"}, Stuck{Text: "blocked"},
		ShellOpened{Shell: "sh1", By: "tok-1", ByName: "alice", Repo: "r"}, ShellClosed{Shell: "sh1", By: "tok-1", Code: 0, DurationMS: 9, Reason: "exited"},
		EventsCompacted{From: 3, To: 9, Reason: RetentionReason},
	}
	if len(samples) != len(registry) {
		t.Fatalf("%d samples for %d registered types: add the new type here", len(samples), len(registry))
	}
	for _, p := range samples {
		e := Event{Session: "s1", Seq: 9, Time: time.Unix(1700000000, 0).UTC(), Turn: "t2", Agent: "builtin", Data: p}
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"type":"`+string(p.EventType())+`"`) {
			t.Errorf("%T: no type tag in %s", p, b)
		}
		var back Event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%T: %v", p, err)
		}
		if !reflect.DeepEqual(back, e) {
			t.Errorf("%T: round trip\n got %#v\nwant %#v", p, back, e)
		}
	}
}

func TestUnknownType(t *testing.T) {
	var e Event
	err := json.Unmarshal([]byte(`{"session":"s","seq":1,"type":"nope","data":{}}`), &e)
	if err == nil || !strings.Contains(err.Error(), `unknown event type "nope"`) {
		t.Fatalf("got %v", err)
	}
	if _, err := json.Marshal(Event{Session: "s"}); err == nil {
		t.Fatal("an event without payload marshalled")
	}
}

func TestCoalescable(t *testing.T) {
	for _, ty := range []Type{TypeTurnFinished, TypeTurnFailed, TypeSessionState, TypeToolFinished, TypeMessageQueued} {
		if Coalescable(ty) {
			t.Errorf("%s must always be delivered", ty)
		}
	}
	for _, ty := range []Type{TypeAssistantDelta, TypeTerminalOutput, TypeToolOutput} {
		if !Coalescable(ty) {
			t.Errorf("%s may be coalesced", ty)
		}
	}
}
