package secrets

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// InputError lists what is wrong with a secret given to Put (never its
// value).
type InputError struct{ Problems []string }

func (e *InputError) Error() string {
	if len(e.Problems) == 1 {
		return "invalid secret: " + e.Problems[0]
	}
	s := "invalid secret:"
	for _, p := range e.Problems {
		s += "\n  " + p
	}
	return s
}

// Put checks, seals and stores the value of scope/name; by is the API
// token that sets it. An invalid scope, name or value is an *InputError
// listing every problem.
func Put(ctx context.Context, st store.Secrets, k *Key, scope Scope, name, value string, session bool, by string) (*store.Secret, error) {
	return PutAs(ctx, st, k, scope, name, value, session, by, "")
}

// PutAs is Put by the token by of user (store.Secret.SetByUser).
func PutAs(ctx context.Context, st store.Secrets, k *Key, scope Scope, name, value string, session bool, by, user string) (*store.Secret, error) {
	var problems []string
	if _, err := ParseScope(scope.String()); err != nil || scope.ID == Me {
		if err == nil {
			err = errors.New(`scope user:me: the caller's token id must be given, not "me"`)
		}
		problems = append(problems, err.Error())
	}
	if err := CheckName(name); err != nil {
		problems = append(problems, err.Error())
	}
	if err := CheckValue(value); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return nil, &InputError{Problems: problems}
	}
	sc := scope.String()
	x := &store.Secret{Scope: sc, Name: name, Ciphertext: k.Seal(sc, name, []byte(value)), KeyID: k.ID(), Session: session, SetBy: by, SetByUser: user, UpdatedAt: time.Now().UTC()}
	if err := st.PutSecret(ctx, x); err != nil {
		return nil, fmt.Errorf("storing secret %s %s: %w", sc, name, err)
	}
	return x, nil
}

// Open decrypts a stored secret. One sealed by another key, altered, or
// moved to another scope or name is an error wrapping ErrDecrypt that says
// which (never the value).
func Open(k *Key, x *store.Secret) (string, error) {
	if x.KeyID != k.ID() {
		return "", fmt.Errorf("secret %s %s was sealed with key %s, and this server's key (DATA/%s) is %s: was the key file replaced? restore it, or set the secret again: %w",
			x.Scope, x.Name, x.KeyID, KeyFile, k.ID(), ErrDecrypt)
	}
	v, err := k.Open(x.Scope, x.Name, x.Ciphertext)
	if err != nil {
		return "", fmt.Errorf("secret %s %s does not decrypt: its stored value was altered or copied from another secret; set it again: %w", x.Scope, x.Name, err)
	}
	return string(v), nil
}

// Resolve returns the environments of a session on repository repo
// ("owner/name", "" for none) started by the API token user ("" for
// none), as KEY=VALUE lists sorted by name: setup holds every secret (for
// setup scripts), session only those marked Session (for the session's
// own environment).
//
// A user secret overrides a repository secret of the same name, whole:
// the person's value and Session flag win (a person may replace a shared
// CI token with their own, or keep one out of their sessions).
//
// A secret that does not decrypt fails the whole call: a session started
// without a secret it expects would fail later, in a less clear way.
func Resolve(ctx context.Context, st store.Secrets, k *Key, repo, user string) (setup, session []string, err error) {
	var scopes []string
	if repo != "" {
		sc, err := RepoScope(repo)
		if err != nil {
			return nil, nil, err
		}
		scopes = append(scopes, sc.String())
	}
	if user != "" {
		sc, err := UserScope(user)
		if err != nil || user == Me {
			return nil, nil, fmt.Errorf("secrets: user %q: give a token id", user)
		}
		scopes = append(scopes, sc.String())
	}
	if len(scopes) == 0 {
		return nil, nil, nil
	}
	xs, err := st.ListSecrets(ctx, scopes...)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the secrets: %w", err)
	}
	byName := map[string]*store.Secret{}
	for _, kind := range []string{KindRepo, KindUser} { // the user's last: they win
		for _, x := range xs {
			if strings.HasPrefix(x.Scope, kind+":") {
				byName[x.Name] = x
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		x := byName[n]
		v, err := Open(k, x)
		if err != nil {
			return nil, nil, err
		}
		setup = append(setup, n+"="+v)
		if x.Session {
			session = append(session, n+"="+v)
		}
	}
	return setup, session, nil
}
