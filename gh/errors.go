package gh

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/google/go-github/v75/github"
)

// Errors callers branch on. Each is permanent: retrying does not help
// until a person changes something on GitHub, which the message names.
var (
	// ErrNoAccess is GitHub refusing Harvest (401, 403, 404): retrying
	// will not help until an operator changes the app, its installation
	// or the token.
	ErrNoAccess = errors.New("no access")
	// ErrNotInstalled (which is also ErrNoAccess) is a repository the
	// app is not installed on: someone installs it there, or adds the
	// repository to the installation.
	ErrNotInstalled = fmt.Errorf("the app is not installed on the repository: %w", ErrNoAccess)
	// ErrSuspended is an installation its owner suspended: nothing is
	// done for it until it is unsuspended.
	ErrSuspended = errors.New("the app's installation is suspended")
	// ErrInvalid is GitHub refusing a request as invalid (422): the same
	// request fails the same way.
	ErrInvalid = errors.New("GitHub refused the request as invalid")
)

// SuspendedError is a request for a suspended installation; it is
// ErrSuspended.
type SuspendedError struct {
	Scope string
	Note  string
}

func (e *SuspendedError) Error() string {
	s := "gh: " + scopeName(e.Scope) + " of the app is suspended: Harvest does nothing for it until its owner unsuspends it (in the account's settings, Applications)"
	if e.Note != "" {
		s += " (" + e.Note + ")"
	}
	return s
}

// Is makes errors.Is(err, ErrSuspended) true.
func (e *SuspendedError) Is(target error) bool { return target == ErrSuspended }

// Permanent reports whether err is one of GitHub's answers that no retry
// changes: no access, not installed, suspended, invalid.
func Permanent(err error) bool {
	return errors.Is(err, ErrNoAccess) || errors.Is(err, ErrSuspended) || errors.Is(err, ErrInvalid)
}

// explain turns a go-github error into one that says what to fix, with no
// credential in it. A rate limit (*RateLimitedError) is passed through.
func explain(err error, doing string) error {
	if err == nil {
		return nil
	}
	var ge *github.ErrorResponse
	if errors.As(err, &ge) && ge.Response != nil {
		msg := ge.Message
		switch ge.Response.StatusCode {
		case http.StatusUnauthorized:
			return fmt.Errorf("gh: %s: GitHub refused Harvest's credentials (401 %s): check the app id and private key, or the token file: %w", doing, msg, ErrNoAccess)
		case http.StatusForbidden:
			return fmt.Errorf("gh: %s: forbidden (403 %s): the app or token lacks the permission: %w", doing, msg, ErrNoAccess)
		case http.StatusNotFound:
			return fmt.Errorf("gh: %s: not found (404): the repository does not exist or the app is not installed on it: %w", doing, ErrNoAccess)
		case http.StatusUnprocessableEntity:
			return fmt.Errorf("gh: %s: GitHub answered 422 %s%s: %w", doing, msg, fieldErrors(ge), ErrInvalid)
		}
		return fmt.Errorf("gh: %s: GitHub answered %d %s", doing, ge.Response.StatusCode, msg)
	}
	return fmt.Errorf("gh: %s: %w", doing, err)
}

// fieldErrors words a 422's errors list.
func fieldErrors(ge *github.ErrorResponse) string {
	s := ""
	for _, e := range ge.Errors {
		switch {
		case e.Message != "":
			s += "; " + e.Message
		case e.Field != "":
			s += fmt.Sprintf("; %s %s %s", e.Resource, e.Field, e.Code)
		}
	}
	return s
}

// Explain is explain for callers outside the package (ghbot): a go-github
// error worded with what to fix, ErrNoAccess, ErrInvalid and rate limits
// kept findable with errors.Is.
func Explain(err error, doing string) error {
	if err == nil {
		return nil
	}
	var rl *RateLimitedError
	var se *SuspendedError
	if errors.As(err, &rl) || errors.As(err, &se) {
		return fmt.Errorf("%s: %w", doing, err)
	}
	return explain(err, doing)
}
