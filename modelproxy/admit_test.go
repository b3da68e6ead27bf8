package modelproxy

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/harvest-dev/harvest/llm"
)

// TestGrantAdmit: a grant's Admit is asked before each model call, with
// the request's context; its error refuses the call as a spent budget
// is (402 in the API's shape, not retried, nothing forwarded) with its
// text; calls that cost nothing (count_tokens, models) are not asked.
func TestGrantAdmit(t *testing.T) {
	h := newHarness(t, chatScript, nil)
	var asked atomic.Int32
	var refuse atomic.Bool
	tok := h.grant(Grant{Session: "sess-a", Admit: func(ctx context.Context) error {
		asked.Add(1)
		if ctx.Err() != nil {
			t.Error("Admit was asked with a context that is done")
		}
		if refuse.Load() {
			return errors.New("the daily model budget of user usr-ann is spent: $2.00 of $2.00 today (UTC)")
		}
		return nil
	}})
	ctx := context.Background()
	req := llm.Request{Messages: []llm.Message{llm.UserText("spend")}, MaxTokens: 1024}
	anth := h.llmClient(apiAnthropic, "claude-sonnet-4-5", tok)
	if _, err := anth.Complete(ctx, req); err != nil {
		t.Fatal(err)
	}
	refuse.Store(true)
	for _, api := range []string{apiAnthropic, apiOpenAI} {
		model := map[string]string{apiAnthropic: "claude-sonnet-4-5", apiOpenAI: "gpt-4.1"}[api]
		_, err := h.llmClient(api, model, tok).Complete(ctx, req)
		var e *llm.Error
		if !errors.As(err, &e) || e.Status != http.StatusPaymentRequired || e.Attempts != 1 ||
			!strings.Contains(e.Message, "harvest: the daily model budget of user usr-ann is spent") {
			t.Errorf("%s refused by Admit: %v (%+v), want a 402 not retried with Admit's message", api, err, e)
		}
	}
	if n := h.forwarded.Load(); n != 1 {
		t.Errorf("%d requests reached the upstream, want only the first", n)
	}
	if n := asked.Load(); n != 3 {
		t.Errorf("Admit asked %d times, want 3 (one a model call)", n)
	}
	status, _, _ := h.post("/v1/messages/count_tokens", anthHeader(tok), `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`)
	if status == http.StatusPaymentRequired || asked.Load() != 3 {
		t.Errorf("count_tokens: %d, Admit asked %d times; want it neither refused nor asked", status, asked.Load())
	}
}
