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
	// web is the sign-in cookie's secret when the request authenticated
	// with it (websession.go), else "".
	web string
}

// owner is the owner argument of the Manager's calls: "" (everything) for
// an admin, else the token's id.
func (c caller) owner() string {
	if c.token.Admin {
		return ""
	}
	return c.token.ID
}

// authenticate finds the token of a request's "Authorization: Bearer",
// or, without one, of its sign-in cookie (websession.go).
func (s *Server) authenticate(r *http.Request) (caller, *apiError) {
	h := r.Header.Get("Authorization")
	if h == "" {
		if ck, err := r.Cookie(SessionCookie); err == nil && ck.Value != "" {
			return s.cookieCaller(r, ck.Value)
		}
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
		return caller{}, storeFailed("checking the token", err)
	}
	return caller{token: t}, nil
}
