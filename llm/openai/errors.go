package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/harvest-dev/harvest/llm"
)

// classify turns an SDK error into an *llm.Error: by the error code, then the
// HTTP status, then the message (OpenAI-compatible servers often send only a
// message, e.g. vLLM's "This model's maximum context length is ...").
func (p *Provider) classify(ctx context.Context, err error) error {
	if ce := llm.ContextError(ctx, p.name); ce != nil {
		return ce
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		e := &llm.Error{
			Provider: p.name,
			Status:   apiErr.StatusCode,
			Type:     firstNonEmpty(apiErr.Code, apiErr.Type),
			Message:  apiErr.Message,
			Err:      err,
		}
		if e.Message == "" {
			e.Message = strings.TrimSpace(apiErr.RawJSON())
		}
		if r := apiErr.Response; r != nil {
			e.RetryAfter = llm.ParseRetryAfter(r.Header, time.Now())
			e.RequestID = r.Header.Get("X-Request-Id")
		}
		e.Kind = kind(apiErr.Code, apiErr.Type, e.Status, e.Message)
		return e
	}
	var streamErr *ssestream.StreamError
	if errors.As(err, &streamErr) {
		// {"error": {...}} inside a 200 stream.
		var body struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    any    `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(streamErr.Event.Data, &body)
		code, _ := body.Error.Code.(string)
		e := &llm.Error{
			Provider: p.name,
			Type:     firstNonEmpty(code, body.Error.Type),
			Message:  firstNonEmpty(body.Error.Message, streamErr.Message),
			Err:      err,
		}
		e.Kind = kind(code, body.Error.Type, 0, e.Message)
		return e
	}
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return &llm.Error{Kind: llm.ErrServer, Provider: p.name, Message: "malformed chunk in the response stream", Err: err}
	}
	return &llm.Error{Kind: llm.ErrNetwork, Provider: p.name, Err: err}
}

func kind(code, typ string, status int, msg string) llm.Kind {
	switch code {
	case "context_length_exceeded", "string_above_max_length":
		return llm.ErrContextTooLong
	case "rate_limit_exceeded":
		return llm.ErrRateLimited
	case "insufficient_quota":
		// A 429 that waiting does not cure: the account is out of credit.
		return llm.ErrAuth
	case "invalid_api_key":
		return llm.ErrAuth
	}
	if typ == "insufficient_quota" {
		return llm.ErrAuth
	}
	switch status {
	case 529, http.StatusServiceUnavailable:
		// 503 is OpenAI's "The engine is currently overloaded".
		return llm.ErrOverloaded
	}
	if typ == "server_error" {
		return llm.ErrServer
	}
	if tooLong(msg) && (status == 0 || status == 400 || status == 413) {
		return llm.ErrContextTooLong
	}
	if status == 0 {
		return llm.ErrServer
	}
	return llm.KindForStatus(status)
}

// tooLong recognises context-window errors from OpenAI and compatible servers.
func tooLong(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "maximum context length") ||
		strings.Contains(m, "context_length_exceeded") ||
		strings.Contains(m, "context length") ||
		strings.Contains(m, "context size") ||
		strings.Contains(m, "context window")
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
