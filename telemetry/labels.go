package telemetry

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/harvest-dev/harvest/egress"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/store"
)

// Every label value comes from a fixed set: the names of the registered
// backends and agent kinds, the models of the price table, the results
// the instrumented packages declare, the Store's methods, the GitHub
// events Harvest acts on. Anything else is "other". So the number of
// series is bounded by the code and the operator's configuration, never
// by what users send: no session id, user, path or raw error is a label.
// TestCardinalityBounded holds every family to it.

// other is the label value of anything outside a label's set.
const other = "other"

// set is a label's fixed set of values.
type set []string

// of returns v if it is in the set, else "other".
func (s set) of(v string) string {
	if slices.Contains(s, v) {
		return v
	}
	return other
}

// events are the GitHub events Harvest acts on or is sent (the webhook's
// event label).
var events = set{"issue_comment", "issues", "pull_request", "pull_request_review", "pull_request_review_comment",
	"check_suite", "check_run", "push", "ping", "installation", "installation_repositories"}

// storeErr is the error label of a store operation's error.
func storeErr(err error) string {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "not_found"
	case errors.Is(err, store.ErrConflict):
		return "conflict"
	case errors.Is(err, store.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, store.ErrLocked):
		return "locked"
	case errors.Is(err, store.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, store.ErrMemoryFull):
		return "memory_full"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return other
}

var storeErrs = set{"not_found", "conflict", "lease_lost", "locked", "unavailable", "memory_full", "canceled", other}

// llmOutcome is the outcome label of a model call through a Client.
func llmOutcome(err error) string {
	if err == nil {
		return "ok"
	}
	var e *llm.Error
	if !errors.As(err, &e) {
		return other
	}
	return strings.ReplaceAll(e.Kind.String(), " ", "_")
}

// llmOutcomes: "ok" and every llm.Kind, as llmOutcome writes them.
var llmOutcomes = func() set {
	s := set{"ok"}
	for k := llm.ErrRateLimited; k <= llm.ErrBadRequest; k++ {
		s = append(s, strings.ReplaceAll(k.String(), " ", "_"))
	}
	return s
}()

// failures are the failure kinds of a failed turn.
var failures = func() set {
	s := set{}
	for _, k := range event.FailureKinds {
		s = append(s, string(k))
	}
	return s
}()

// egressKind and egressResult are an egress request's labels.
func egressKind(st egress.Stats) string {
	if st.Method == "CONNECT" {
		return "connect"
	}
	return "http"
}

func egressResult(st egress.Stats) string {
	switch {
	case st.Allowed && st.Error == "":
		return "ok"
	case st.Allowed:
		return "error"
	case st.Status == 407:
		return "unauthorized"
	case st.Status == 503:
		return "busy"
	}
	return "denied"
}

var egressKinds = set{"connect", "http"}
var egressResults = set{"ok", "error", "denied", "unauthorized", "busy"}
