package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// apiError is an error response a handler returns.
type apiError struct {
	status  int
	code    string
	message string
	details []string
	// cause is logged, never sent (for 500s it is also in the message).
	cause error
}

func (e *apiError) Error() string { return e.message }

func errorf(status int, code, message string) *apiError {
	return &apiError{status: status, code: code, message: message}
}

// writeError sends e as the JSON error envelope.
func writeError(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	switch e.status {
	case http.StatusUnauthorized:
		h.Set("WWW-Authenticate", `Bearer realm="harvest"`)
	case http.StatusServiceUnavailable:
		h.Set("Retry-After", "5")
	}
	writeJSON(w, e.status, ErrorBody{Error: ErrorInfo{Code: e.code, Message: e.message, Details: e.details}})
}

// writeJSON sends v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(ErrorBody{Error: ErrorInfo{Code: CodeInternal, Message: "encoding the response: " + err.Error()}})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// fromManager maps an error of the session layer (or the store) to a
// response: the sentinels of session/api.go give the status, the error's
// text (which says what was wrong) the message.
func fromManager(err error) *apiError {
	var ie *session.InputError
	var le *store.LockError
	switch {
	case errors.As(err, &ie):
		e := errorf(http.StatusBadRequest, CodeInvalid, err.Error())
		e.details = ie.Problems
		return e
	case errors.Is(err, session.ErrNotFound):
		return errorf(http.StatusNotFound, CodeNotFound, err.Error())
	case errors.As(err, &le), errors.Is(err, session.ErrConflict), errors.Is(err, session.ErrNoBox), errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrLocked):
		return errorf(http.StatusConflict, CodeConflict, err.Error())
	case errors.As(err, new(*session.StorageError)):
		// The data directory's path is the operator's: fromManagerFor
		// names it to an admin.
		return storageFull(err, false)
	case errors.Is(err, session.ErrOverBudget):
		return errorf(http.StatusTooManyRequests, CodeOverBudget, err.Error())
	case errors.Is(err, session.ErrUnavailable):
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, err.Error())
	case errors.Is(err, store.ErrUnavailable):
		return storeFailed("", err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client went away (or the server is stopping); nobody reads this.
		return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable, message: "the request was cancelled: " + err.Error(), cause: err}
	}
	return &apiError{status: http.StatusInternalServerError, code: CodeInternal,
		message: "the server failed: " + err.Error() + " (see the server's log; retry, and report it if it persists)", cause: err}
}

// fromManagerFor is fromManager for caller c: a refusal for want of
// space (507) names the data directory to an admin only.
func fromManagerFor(c caller, err error) *apiError {
	if errors.As(err, new(*session.StorageError)) {
		return storageFull(err, c.admin())
	}
	return fromManager(err)
}

// storageFull is the 507 of a *session.StorageError in err.
func storageFull(err error, admin bool) *apiError {
	var se *session.StorageError
	errors.As(err, &se)
	return errorf(http.StatusInsufficientStorage, CodeInsufficientStorage, se.Message(admin))
}

// storeFailed is the response to a store error while doing what: 503
// when the store is unreachable (restarting: the client retries), else
// 500.
func storeFailed(what string, err error) *apiError {
	msg := err.Error()
	if what != "" {
		msg = what + ": " + msg
	}
	if errors.As(err, new(*store.TimeoutError)) {
		return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable, cause: err,
			message: msg + " (the server's database does not answer now: retry in a few seconds)"}
	}
	if errors.Is(err, store.ErrUnavailable) {
		return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable, cause: err,
			message: msg + " (the server's database cannot be reached now: retry in a few seconds)"}
	}
	return &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: msg, cause: err}
}

// logError logs what the client was not told in full.
func logError(l *slog.Logger, r *http.Request, e *apiError) {
	if e.status >= 500 && e.cause != nil && !errors.Is(e.cause, context.Canceled) {
		l.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", e.status, "err", e.cause)
	}
}
