package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// TokenPrefix starts every API token secret, so a leaked one is easy to
// recognise (and to scan for).
const TokenPrefix = "hvt_"

// NewToken makes an API token: the secret to hand out once, and the record
// to store (which keeps only the secret's SHA-256).
func NewToken(name string, admin bool, now time.Time) (secret string, t *store.Token) {
	var id [6]byte
	var key [32]byte
	if _, err := rand.Read(id[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	rand.Read(key[:])
	secret = TokenPrefix + base64.RawURLEncoding.EncodeToString(key[:])
	return secret, &store.Token{ID: "tok-" + hex.EncodeToString(id[:]), Name: name, Hash: HashToken(secret), Admin: admin, CreatedAt: now.UTC()}
}

// HashToken is what the store keeps of a secret.
func HashToken(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// caller is who made a request.
type caller struct {
	token *store.Token
}

// owner is the owner argument of the Manager's calls: "" (everything) for
// an admin, else the token's id.
func (c caller) owner() string {
	if c.token.Admin {
		return ""
	}
	return c.token.ID
}

// authenticate finds the token of a request's "Authorization: Bearer".
func (s *Server) authenticate(r *http.Request) (caller, *apiError) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return caller{}, errorf(http.StatusUnauthorized, CodeUnauthorized,
			"no token: send Authorization: Bearer TOKEN (harvest serve writes an admin token to DATA/admin-token on first start; harvest token create makes more)")
	}
	scheme, secret, ok := strings.Cut(h, " ")
	secret = strings.TrimSpace(secret)
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return caller{}, errorf(http.StatusUnauthorized, CodeUnauthorized, "the Authorization header is not \"Bearer TOKEN\": send the token as a bearer token")
	}
	t, err := s.cfg.Store.TokenByHash(r.Context(), HashToken(secret))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return caller{}, errorf(http.StatusUnauthorized, CodeUnauthorized, "unknown token: it was deleted or mistyped; use the one in DATA/admin-token or make one with harvest token create")
	case err != nil:
		return caller{}, &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: "checking the token: " + err.Error(), cause: err}
	}
	return caller{token: t}, nil
}

// view is what the caller may see of a session view: see session.
func (c caller) view(v *session.View) *session.View {
	return &session.View{Session: c.session(v.Session), Queue: v.Queue}
}

// session is what the caller may see of a session: the admin sees it all;
// a user sees its repositories as they were given, without the host paths
// of their copies or of their resolved sources, and no sandbox handle
// (which names host paths too).
func (c caller) session(s *store.Session) *store.Session {
	if c.token.Admin || s == nil {
		return s
	}
	x := *s
	x.Repos = make([]store.Repo, len(s.Repos))
	for i, r := range s.Repos {
		x.Repos[i] = store.Repo{Name: r.Name, Source: r.Source, Ref: r.Ref}
	}
	x.Sandbox = nil
	return &x
}
