package openai

import (
	"testing"

	"github.com/harvest-dev/harvest/llm"
)

// Error codes and messages of OpenAI and of compatible servers (vLLM,
// llama.cpp), beyond what the sim sends.
func TestKind(t *testing.T) {
	for _, tc := range []struct {
		code, typ string
		status    int
		msg       string
		want      llm.Kind
	}{
		{"context_length_exceeded", "invalid_request_error", 400, "", llm.ErrContextTooLong},
		{"rate_limit_exceeded", "requests", 429, "", llm.ErrRateLimited},
		{"insufficient_quota", "insufficient_quota", 429, "You exceeded your current quota", llm.ErrAuth},
		{"invalid_api_key", "invalid_request_error", 401, "", llm.ErrAuth},
		{"", "server_error", 500, "", llm.ErrServer},
		{"", "server_error", 503, "The engine is currently overloaded", llm.ErrOverloaded},
		{"", "server_error", 529, "", llm.ErrOverloaded},
		{"", "BadRequestError", 400, "This model's maximum context length is 32768 tokens. However, you requested 40000 tokens", llm.ErrContextTooLong},
		{"", "", 400, "the request exceeds the available context size, try increasing it", llm.ErrContextTooLong},
		{"", "invalid_request_error", 404, "The model `x` does not exist", llm.ErrBadRequest},
		{"", "", 0, "received error while streaming", llm.ErrServer},
		{"", "", 502, "", llm.ErrServer},
	} {
		if got := kind(tc.code, tc.typ, tc.status, tc.msg); got != tc.want {
			t.Errorf("kind(%q, %q, %d, %q) = %v, want %v", tc.code, tc.typ, tc.status, tc.msg, got, tc.want)
		}
	}
}
