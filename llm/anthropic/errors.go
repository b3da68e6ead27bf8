package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go"

	"github.com/harvest-dev/harvest/llm"
)

// classify turns an SDK error into an *llm.Error.
//
// API errors are classified by the error type in the body
// ({"type":"error","error":{"type":"overloaded_error","message":"..."}}) and
// else by HTTP status. The same body arrives as an "error" event when the API
// fails mid-stream (typically overloaded_error after a 200), so the type, not
// the status, decides.
func (p *Provider) classify(ctx context.Context, err error) error {
	if ce := llm.ContextError(ctx, p.name); ce != nil {
		return ce
	}
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return &llm.Error{Kind: llm.ErrServer, Provider: p.name, Message: "malformed event in the response stream", Err: err}
		}
		return &llm.Error{Kind: llm.ErrNetwork, Provider: p.name, Err: err}
	}
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(apiErr.RawJSON()), &body)
	e := &llm.Error{
		Provider:  p.name,
		Type:      body.Error.Type,
		Message:   body.Error.Message,
		RequestID: apiErr.RequestID,
		Err:       err,
	}
	if apiErr.StatusCode >= 400 {
		e.Status = apiErr.StatusCode
	}
	if e.Message == "" {
		e.Message = strings.TrimSpace(apiErr.RawJSON())
	}
	if apiErr.Response != nil {
		e.RetryAfter = llm.ParseRetryAfter(apiErr.Response.Header, time.Now())
	}
	e.Kind = kind(e.Type, e.Status, e.Message)
	return e
}

// kind maps an Anthropic error type (https://docs.claude.com/en/api/errors) to
// a Kind, falling back to the status.
func kind(typ string, status int, msg string) llm.Kind {
	switch typ {
	case "overloaded_error":
		return llm.ErrOverloaded
	case "rate_limit_error":
		return llm.ErrRateLimited
	case "api_error":
		return llm.ErrServer
	case "timeout_error":
		return llm.ErrTimeout
	case "authentication_error", "permission_error", "billing_error":
		return llm.ErrAuth
	case "request_too_large":
		return llm.ErrContextTooLong
	case "invalid_request_error":
		if tooLong(msg) {
			return llm.ErrContextTooLong
		}
		return llm.ErrBadRequest
	case "not_found_error":
		return llm.ErrBadRequest
	}
	if status == 0 {
		// An error event of an unknown type inside a 200 stream.
		return llm.ErrServer
	}
	if k := llm.KindForStatus(status); k != llm.ErrBadRequest || !tooLong(msg) {
		return k
	}
	return llm.ErrContextTooLong
}

// tooLong recognises the API's "prompt is too long: 210000 tokens > 200000
// maximum" and "input length and `max_tokens` exceed context limit".
func tooLong(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "prompt is too long") ||
		strings.Contains(m, "exceed context limit") ||
		strings.Contains(m, "context window")
}
