// Package wire is Harvest's HTTP API as data: the request and response
// bodies, the views of sessions, messages and tokens, and the error codes.
// The server (package server) writes and reads these; a client (package
// client, or any program that talks to Harvest) needs only this package,
// event and the standard library — not the server, its sessions, its store
// or the agents and SDKs behind them.
//
// These are wire types, apart from the domain types they are made from
// (store.Session, session.View): the server converts, and decides what a
// caller may see (a user token sees no host path).
package wire

import (
	"time"

	"github.com/harvest-dev/harvest/event"
)

// MaxBody bounds every request body. The largest is a prompt; a megabyte
// of prompt is far beyond what a model takes in one message.
const MaxBody = 1 << 20

// IdempotencyKeyHeader, on POST /v1/sessions/{id}/messages, makes the send
// safe to retry: the same key (for the same session and token) gives back
// the message stored the first time, never a second one; the same key with
// another body is 409 conflict.
const IdempotencyKeyHeader = "Idempotency-Key"

// Error codes (ErrorInfo.Code), with the status they come with.
const (
	CodeBadRequest       = "bad_request"            // 400: malformed JSON, a bad query parameter, a body where none is taken
	CodeInvalid          = "invalid"                // 400: the request is well formed but cannot be accepted (details lists why)
	CodeUnauthorized     = "unauthorized"           // 401: no token or an unknown one
	CodeForbidden        = "forbidden"              // 403: the token may not do this (admin only)
	CodeNotFound         = "not_found"              // 404: no such route, session or token (or not yours)
	CodeMethodNotAllowed = "method_not_allowed"     // 405
	CodeConflict         = "conflict"               // 409: the session's state does not allow it
	CodeTooLarge         = "too_large"              // 413: the body is over MaxBody
	CodeMediaType        = "unsupported_media_type" // 415: a body that is not application/json
	CodeUnavailable      = "unavailable"            // 503: the server is shutting down
	// 507: the server's data directory is below its floor of free space:
	// no new sessions, resumes or environment builds until space is freed.
	CodeInsufficientStorage = "insufficient_storage"
	// 429: a budget of the user's, or of one of their teams, is reached
	// (its live sessions); the message says which and who may raise it.
	// Retrying does not help until a session ends or the cap is raised.
	CodeOverBudget = "over_budget"
	CodeInternal   = "internal" // 500: a bug or a failing store; the message says which
)

// ErrorBody is every error response: {"error":{"code","message"}}.
type ErrorBody struct {
	Error ErrorInfo `json:"error"`
}

// ErrorInfo says what went wrong.
type ErrorInfo struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Details lists every problem of an invalid request, one a line.
	Details []string `json:"details,omitempty"`
}

// StreamErrorEvent is the SSE event name of an event stream's final error
// event (its data is an ErrorBody). Not "error": EventSource clients keep
// that name for their own connection failures.
const StreamErrorEvent = "stream.error"

// Codes of the final error event (ErrorInfo.Code of its data), and what a
// client does about each.
const (
	StreamTooSlow     = "too_slow"    // the client read too slowly: reconnect now with Last-Event-ID
	StreamUnavailable = "unavailable" // the server is stopping (or the stream ended): reconnect in a few seconds with Last-Event-ID
	StreamDeleted     = "deleted"     // the session was deleted: do not reconnect
	StreamInternal    = "internal"    // a server failure (logged): reconnect with Last-Event-ID; report it if it repeats
)

// Health is the body of GET /healthz: whether the process is alive.
type Health struct {
	// Status is "ok", or "draining" (a restart is under way: reads and
	// streams are served, new sessions and messages are not; still 200:
	// the process is alive, GET /readyz says it takes no new work), or,
	// with status 503, "shutting_down" (the API is closing).
	Status  string `json:"status"`
	Version string `json:"version"`
}

// Readiness is the body of GET /readyz: whether the server can take
// work, check by check (200 when every check passed, else 503).
type Readiness struct {
	// Status is "ready" or "not_ready".
	Status string       `json:"status"`
	Checks []ReadyCheck `json:"checks"`
}

// ReadyCheck is one check of GET /readyz.
type ReadyCheck struct {
	// Name says what was checked: "draining", "store", "backend local",
	// "disk".
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Error says why it failed, and what to do.
	Error string `json:"error,omitempty"`
}

// SessionList is the body of GET /v1/sessions: one page, newest first.
type SessionList struct {
	Sessions []*Session `json:"sessions"`
	// NextCursor, when set, continues the list: ask again with
	// cursor=<it> (and the same filters) for the next page. Absent on the
	// last page. Opaque: pass it back as it is.
	NextCursor string `json:"next_cursor,omitempty"`
}

// EventPage is the body of GET /v1/sessions/{id}/log.
type EventPage struct {
	Events []event.Event `json:"events"`
	// LastSeq is the session's newest stored event; ask again with
	// after=<seq of the last event here> while it is larger.
	LastSeq int64 `json:"last_seq"`
}

// LockInfo is the body of GET /v1/sessions/{id}/lock.
type LockInfo struct {
	Held    bool      `json:"held"`
	Key     string    `json:"key"`
	Holder  string    `json:"holder,omitempty"`
	Expires time.Time `json:"expires,omitzero"`
}

// SendRequest is the body of POST /v1/sessions/{id}/messages.
type SendRequest struct {
	Text string `json:"text"`
	// Mode is queue (default) or interrupt.
	Mode string `json:"mode,omitempty"`
}

// StopRequest is the body of POST /v1/sessions/{id}/stop (optional).
type StopRequest struct {
	// Reason is what the session's last session.state event says.
	Reason string `json:"reason,omitempty"`
	// PullRequest, when set, is the pull request whose merge or close
	// ends the session (the GitHub side sets it): it is journaled as
	// pr.merged or pr.closed.
	PullRequest *PullRequestEnd `json:"pull_request,omitempty"`
}

// PullRequestEnd is a session's pull request that was merged or closed.
type PullRequestEnd struct {
	Repo   string `json:"repo"`
	Number int    `json:"number"`
	URL    string `json:"url,omitempty"`
	Branch string `json:"branch,omitempty"`
	By     string `json:"by,omitempty"`
	Merged bool   `json:"merged,omitempty"`
	// SHA is the merge commit (merged only).
	SHA string `json:"sha,omitempty"`
}

// TokenRequest is the body of POST /v1/tokens.
type TokenRequest struct {
	Name  string `json:"name"`
	Admin bool   `json:"admin,omitempty"`
	// User is the id of the user it is for (an admin's token needs an
	// admin). Absent: a new member (an admin, for an admin token) of the
	// token's name, whose only token it is, as before users existed.
	User string `json:"user,omitempty"`
}

// Token is an API token as the API shows it (never its secret's hash).
type Token struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Admin     bool      `json:"admin"`
	CreatedAt time.Time `json:"created_at"`
	// User is the id of its user ("" for a node's token: no one's).
	User string `json:"user,omitempty"`
}

// TokenCreated is the body of POST /v1/tokens: the token and, this once,
// its secret.
type TokenCreated struct {
	*Token
	Secret string `json:"token"`
}

// TokenList is the body of GET /v1/tokens.
type TokenList struct {
	Tokens []*Token `json:"tokens"`
}
