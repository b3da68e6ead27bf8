package modelproxy

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// The wire protocols, as Usage.API names them.
const (
	apiAnthropic = "anthropic"
	apiOpenAI    = "openai"
)

// refusal is an answer the proxy gives itself, in the shape of the API the
// client speaks, so that the CLI shows the message as it shows the API's
// own errors.
type refusal struct {
	status int
	// anthType and oaiType are the error types of each API; oaiCode is
	// OpenAI's error code (empty: null).
	anthType, oaiType, oaiCode string
	msg                        string
}

// Refusals the proxy makes. None is worth retrying, and each carries
// x-should-retry: false, which the Anthropic and OpenAI SDKs (and Claude
// Code, which otherwise retries a 401 ten times) obey.
func refuseAuth(msg string) refusal {
	return refusal{http.StatusUnauthorized, "authentication_error", "invalid_request_error", "invalid_api_key", msg}
}

func refuseBudget(msg string) refusal {
	return refusal{http.StatusPaymentRequired, "billing_error", "insufficient_quota", "insufficient_quota", msg}
}

func refuseBadRequest(msg string) refusal {
	return refusal{http.StatusBadRequest, "invalid_request_error", "invalid_request_error", "", msg}
}

func refuseNotFound(msg string) refusal {
	return refusal{http.StatusNotFound, "not_found_error", "invalid_request_error", "", msg}
}

func refuseMethod(msg string) refusal {
	return refusal{http.StatusMethodNotAllowed, "invalid_request_error", "invalid_request_error", "", msg}
}

func refuseTooLarge(msg string) refusal {
	return refusal{http.StatusRequestEntityTooLarge, "request_too_large", "invalid_request_error", "request_too_large", msg}
}

// refuseUpstream is a failure to reach the real API: the one refusal worth
// retrying (clients do, for a 502).
func refuseUpstream(msg string) refusal {
	return refusal{http.StatusBadGateway, "api_error", "server_error", "", msg}
}

// write answers with r in api's error shape: Anthropic
// {"type":"error","error":{"type","message"}}, OpenAI
// {"error":{"message","type","param","code"}}.
func (r refusal) write(w http.ResponseWriter, api string) {
	var body any
	if api == apiOpenAI {
		var code any
		if r.oaiCode != "" {
			code = r.oaiCode
		}
		body = map[string]any{"error": map[string]any{"message": r.msg, "type": r.oaiType, "param": nil, "code": code}}
	} else {
		body = map[string]any{"type": "error", "error": map[string]string{"type": r.anthType, "message": r.msg}}
	}
	b, _ := json.Marshal(body)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	if r.status != http.StatusBadGateway {
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(r.status)
	w.Write(append(b, '\n'))
}
