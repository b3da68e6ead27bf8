package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Kind classifies a failed call. Each Kind is also a sentinel error, so
// errors.Is(err, llm.ErrRateLimited) works on any error a provider or Client
// returns; errors.As(err, &e) with e *llm.Error gives the details.
type Kind uint8

const (
	// ErrRateLimited (HTTP 429): too many requests or tokens per minute. Client
	// already retried with backoff; if it still fails, wait (Error.RetryAfter
	// says how long when the API said) and lower concurrency.
	ErrRateLimited Kind = iota + 1
	// ErrOverloaded (Anthropic 529, overloaded_error): the provider is at
	// capacity. Client already retried; retry later or switch model.
	ErrOverloaded
	// ErrServer (HTTP 5xx, or a broken response): the provider failed. Client
	// already retried; retry later.
	ErrServer
	// ErrNetwork: the API could not be reached or the connection broke
	// mid-stream. Check connectivity and the base URL; Client already retried
	// when nothing had been streamed yet.
	ErrNetwork
	// ErrTimeout: an attempt exceeded Request.Timeout, or the context's deadline
	// passed. Raise the limit or shorten the request.
	ErrTimeout
	// ErrCanceled: the caller's context was cancelled. Nothing to do.
	ErrCanceled
	// ErrContextTooLong: the prompt does not fit the model's context window (or
	// the request is too large). Compact or truncate the conversation; retrying
	// the same request cannot succeed.
	ErrContextTooLong
	// ErrAuth (HTTP 401/403): the API key is missing, wrong or lacks permission.
	// Fix the key; never retried.
	ErrAuth
	// ErrBadRequest (HTTP 400/404/422, or a request Validate rejects): the
	// request is malformed or names an unknown model. A bug in the caller or the
	// configuration; never retried.
	ErrBadRequest
)

var kindNames = [...]string{
	ErrRateLimited:    "rate limited",
	ErrOverloaded:     "overloaded",
	ErrServer:         "server error",
	ErrNetwork:        "network error",
	ErrTimeout:        "timed out",
	ErrCanceled:       "canceled",
	ErrContextTooLong: "context too long",
	ErrAuth:           "authentication failed",
	ErrBadRequest:     "bad request",
}

var kindHints = [...]string{
	ErrRateLimited:    "wait and retry, or lower concurrency",
	ErrOverloaded:     "the provider is at capacity; retry later or use another model",
	ErrServer:         "the provider failed; retry later",
	ErrNetwork:        "check the network and the API base URL",
	ErrTimeout:        "raise Request.Timeout or the context deadline",
	ErrContextTooLong: "compact or truncate the conversation",
	ErrAuth:           "check the API key",
	ErrBadRequest:     "the request or the model name is wrong; retrying will not help",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Error makes each Kind a sentinel for errors.Is.
func (k Kind) Error() string { return "llm: " + k.String() }

// Retryable says whether Client retries this kind (when nothing has been
// streamed to the caller yet).
func (k Kind) Retryable() bool {
	switch k {
	case ErrRateLimited, ErrOverloaded, ErrServer, ErrNetwork, ErrTimeout:
		return true
	}
	return false
}

// Error is a failed model call.
type Error struct {
	Kind Kind
	// Provider is the provider's name ("anthropic", "openai", or a configured
	// endpoint's name).
	Provider string
	// Status is the HTTP status, 0 when there was no response (or the error
	// arrived inside a stream).
	Status int
	// Type is the provider's error type or code ("overloaded_error",
	// "context_length_exceeded"), when it sent one.
	Type string
	// Message says what happened, in the provider's words when it gave any.
	Message string
	// RetryAfter is how long the provider asked to wait (retry-after headers), 0
	// when it did not say.
	RetryAfter time.Duration
	// RequestID is the provider's request id, for support tickets.
	RequestID string
	// Attempts is how many attempts Client made, set when it gives up.
	Attempts int
	// Err is the underlying error (a transport error, context.Canceled, ...).
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Provider != "" {
		b.WriteString(e.Provider)
		b.WriteString(": ")
	}
	b.WriteString(e.Kind.String())
	if e.Status != 0 || e.Type != "" {
		b.WriteString(" (")
		if e.Status != 0 {
			fmt.Fprintf(&b, "HTTP %d", e.Status)
			if e.Type != "" {
				b.WriteString(" ")
			}
		}
		b.WriteString(e.Type)
		b.WriteString(")")
	}
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	if msg != "" {
		b.WriteString(": ")
		b.WriteString(msg)
	}
	if e.RequestID != "" {
		fmt.Fprintf(&b, " [request %s]", e.RequestID)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, "; gave up after %d attempts", e.Attempts)
	}
	if e.RetryAfter > 0 && e.Kind.Retryable() {
		fmt.Fprintf(&b, "; the API asked to wait %s", e.RetryAfter)
	}
	if int(e.Kind) < len(kindHints) && kindHints[e.Kind] != "" {
		b.WriteString("; ")
		b.WriteString(kindHints[e.Kind])
	}
	return b.String()
}

// Unwrap returns the underlying error, so errors.Is(err, context.Canceled)
// works on a cancelled call.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is e's Kind.
func (e *Error) Is(target error) bool {
	k, ok := target.(Kind)
	return ok && k == e.Kind
}

// KindForStatus maps an HTTP status to a Kind: how both providers classify API
// errors before looking at the provider's error type.
func KindForStatus(status int) Kind {
	switch {
	case status == http.StatusTooManyRequests:
		return ErrRateLimited
	case status == 529:
		return ErrOverloaded
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return ErrAuth
	case status == http.StatusRequestEntityTooLarge:
		return ErrContextTooLong
	case status == http.StatusRequestTimeout:
		return ErrTimeout
	case status == http.StatusConflict || status >= 500:
		return ErrServer
	default:
		return ErrBadRequest
	}
}

// ParseRetryAfter reads how long a response asks the client to wait:
// retry-after-ms (Anthropic, OpenAI), else retry-after in seconds or as an HTTP
// date. It returns 0 when neither is set or parses.
func ParseRetryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// ContextError classifies a failure that happened while ctx was done: the
// attempt was cancelled or ran out of time. It returns nil if ctx is not done.
// Providers call it first, so that a transport error caused by cancellation is
// reported as cancellation, not as a network failure.
func ContextError(ctx context.Context, provider string) *Error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	cause := context.Cause(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Kind: ErrTimeout, Provider: provider, Message: "the context's deadline passed", Err: cause}
	}
	return &Error{Kind: ErrCanceled, Provider: provider, Message: "the caller canceled the request", Err: cause}
}
