package secrets

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// MaxValue bounds a value, in bytes.
const MaxValue = 64 << 10

// Scope kinds.
const (
	KindRepo = "repo" // a GitHub repository's: "repo:owner/name"
	KindUser = "user" // a person's: "user:<token id>"
)

// Me, as the name of a user scope ("user:me"), is the caller's own; the
// server replaces it with the caller's token id.
const Me = "me"

var (
	namePattern = regexp.MustCompile(`^[A-Z_][A-Z0-9_]{0,127}$`)
	// repoPattern is GitHub's owner/name, as session.ForgeRepo checks it.
	repoPattern = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$`)
	userPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
)

// Scope is whose a secret is.
type Scope struct {
	Kind string // KindRepo or KindUser
	// ID is the repository's owner/name (lower case) or the token id.
	ID string
}

// String is the scope as stored and as the API writes it.
func (s Scope) String() string { return s.Kind + ":" + s.ID }

// RepoScope is the scope of repository owner/name.
func RepoScope(repo string) (Scope, error) {
	if !repoPattern.MatchString(repo) || strings.HasSuffix(repo, "/.") || strings.HasSuffix(repo, "/..") {
		return Scope{}, fmt.Errorf("repository %q: give it as GitHub names it, owner/name, like octocat/hello-world", clip(repo))
	}
	return Scope{Kind: KindRepo, ID: strings.ToLower(repo)}, nil
}

// UserScope is the scope of the person whose API token is id (or Me).
func UserScope(id string) (Scope, error) {
	if !userPattern.MatchString(id) {
		return Scope{}, fmt.Errorf("user %q: give a token id (harvest token ls), or %q for your own", clip(id), Me)
	}
	return Scope{Kind: KindUser, ID: id}, nil
}

// ParseScope parses "repo:owner/name" or "user:<token id>" ("user:me").
func ParseScope(s string) (Scope, error) {
	kind, id, ok := strings.Cut(s, ":")
	switch {
	case ok && kind == KindRepo:
		return RepoScope(id)
	case ok && kind == KindUser:
		return UserScope(id)
	}
	return Scope{}, fmt.Errorf("scope %q: give repo:OWNER/NAME (a GitHub repository's secrets) or user:me (your own)", clip(s))
}

// CheckName checks a secret's name: an environment variable's,
// ^[A-Z_][A-Z0-9_]{0,127}$.
func CheckName(name string) error {
	if namePattern.MatchString(name) {
		return nil
	}
	msg := fmt.Sprintf("name %q: a secret is named like an environment variable: capital letters, digits and _, not starting with a digit, at most 128 characters (like NPM_TOKEN)", clip(name))
	if up := strings.ToUpper(name); up != name && namePattern.MatchString(up) {
		msg += fmt.Sprintf("; did you mean %s?", up)
	}
	return errors.New(msg)
}

// CheckValue checks a value. Its errors never quote it.
func CheckValue(value string) error {
	switch {
	case value == "":
		return errors.New("the value is empty: give one (to remove a secret, delete it)")
	case len(value) > MaxValue:
		return fmt.Errorf("the value is %d bytes: at most %d (64 KiB)", len(value), MaxValue)
	case !utf8.ValidString(value):
		return errors.New("the value is not UTF-8 text: encode binary values (base64, say) and decode them where they are used")
	case strings.IndexByte(value, 0) >= 0:
		return errors.New("the value has a NUL byte, which an environment variable cannot hold: encode it (base64, say)")
	}
	return nil
}

// clip shortens what an error quotes of the input.
func clip(s string) string {
	if len(s) <= 140 {
		return s
	}
	return s[:140] + "…"
}
