package anthropic

import (
	"testing"

	"github.com/harvest-dev/harvest/llm"
)

// The error types of https://docs.claude.com/en/api/errors, including the ones
// the sim cannot send mid-stream (an "error" event inside a 200 response has
// status 0 here).
func TestKind(t *testing.T) {
	for _, tc := range []struct {
		typ    string
		status int
		msg    string
		want   llm.Kind
	}{
		{"overloaded_error", 0, "Overloaded", llm.ErrOverloaded},
		{"overloaded_error", 529, "Overloaded", llm.ErrOverloaded},
		{"api_error", 0, "Internal server error", llm.ErrServer},
		{"rate_limit_error", 429, "", llm.ErrRateLimited},
		{"invalid_request_error", 400, "prompt is too long: 210000 tokens > 200000 maximum", llm.ErrContextTooLong},
		{"invalid_request_error", 400, "input length and `max_tokens` exceed context limit: 190000 + 20000 > 200000", llm.ErrContextTooLong},
		{"invalid_request_error", 400, "messages.1: bad", llm.ErrBadRequest},
		{"request_too_large", 413, "", llm.ErrContextTooLong},
		{"authentication_error", 401, "", llm.ErrAuth},
		{"permission_error", 403, "", llm.ErrAuth},
		{"billing_error", 402, "", llm.ErrAuth},
		{"not_found_error", 404, "model: x", llm.ErrBadRequest},
		{"timeout_error", 504, "", llm.ErrTimeout},
		{"", 502, "Bad Gateway", llm.ErrServer},
		{"something_new", 0, "", llm.ErrServer},
		{"", 400, "prompt is too long", llm.ErrContextTooLong},
	} {
		if got := kind(tc.typ, tc.status, tc.msg); got != tc.want {
			t.Errorf("kind(%q, %d, %q) = %v, want %v", tc.typ, tc.status, tc.msg, got, tc.want)
		}
	}
}
