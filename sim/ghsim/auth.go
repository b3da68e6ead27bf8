package ghsim

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Credentials, checked as GitHub checks them:
//
//   - /app endpoints take "Authorization: Bearer JWT", RS256-signed by a
//     registered App's key, iss its id, iat not in the future (60 s of
//     skew allowed), exp in the future and at most 10 minutes ahead.
//   - Everything else takes "token X" or "Bearer X" with an installation
//     token (ghs_..., scoped to repositories and permissions, expiring) or a
//     personal access token (ghp_..., acting as its user).
//   - git takes HTTP Basic with either token as the password.

// jwtSkew is how far in the future iat may be.
const jwtSkew = 60 * time.Second

// errJWT is the message GitHub gives for a JWT it cannot use.
var errJWT = errors.New("A JSON web token could not be decoded")

// verifyJWT returns the App that signed raw.
func (s *Server) verifyJWT(raw string) (*app, error) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return nil, errJWT
	}
	var hdr struct {
		Alg string `json:"alg"`
	}
	var claims struct {
		Iss json.RawMessage `json:"iss"`
		Iat *int64          `json:"iat"`
		Exp *int64          `json:"exp"`
	}
	if err := decodeSeg(parts[0], &hdr); err != nil || hdr.Alg != "RS256" {
		return nil, errJWT
	}
	if err := decodeSeg(parts[1], &claims); err != nil {
		return nil, errJWT
	}
	iss := strings.Trim(string(claims.Iss), `"`)
	id, err := strconv.ParseInt(iss, 10, 64)
	if err != nil {
		return nil, errors.New("'Issuer' claim ('iss') must be an Integer")
	}
	a := s.apps[id]
	if a == nil {
		return nil, errJWT
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return nil, errJWT
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(a.key, crypto.SHA256, sum[:], sig) != nil {
		return nil, errJWT
	}
	now := s.now()
	if claims.Iat == nil || time.Unix(*claims.Iat, 0).After(now.Add(jwtSkew)) {
		return nil, errors.New("'Issued at' claim ('iat') must be an Integer representing a time in the past")
	}
	if claims.Exp == nil || !time.Unix(*claims.Exp, 0).After(now) {
		return nil, errors.New("'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires")
	}
	if time.Unix(*claims.Exp, 0).After(now.Add(10 * time.Minute)) {
		return nil, errors.New("'Expiration time' claim ('exp') is too far in the future")
	}
	return a, nil
}

func decodeSeg(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// credential returns the token or JWT of an Authorization header.
func credential(req *http.Request) (scheme, value string) {
	h := req.Header.Get("Authorization")
	scheme, value, _ = strings.Cut(h, " ")
	return strings.ToLower(scheme), strings.TrimSpace(value)
}

// appAuth checks a JWT request; on failure it has written the error.
// Called with s.mu held.
func (s *Server) appAuth(w http.ResponseWriter, req *http.Request) *app {
	scheme, v := credential(req)
	if v == "" {
		writeError(w, http.StatusUnauthorized, "A JSON web token is required to access this endpoint.")
		return nil
	}
	if scheme != "bearer" || strings.Count(v, ".") != 2 {
		writeError(w, http.StatusUnauthorized, "A JSON web token could not be decoded")
		return nil
	}
	a, err := s.verifyJWT(v)
	if err != nil {
		writeError(w, http.StatusUnauthorized, err.Error())
		return nil
	}
	return a
}

// lookupToken returns a live token, or nil. Called with s.mu held.
func (s *Server) lookupToken(v string) *token {
	t := s.tokens[v]
	if t == nil || ((t.kind == tokInstallation || t.kind == tokUser) && !s.now().Before(t.expires)) {
		return nil
	}
	return t
}

// tokenAuth returns the request's token (nil for an anonymous request); a
// bad or expired token is a 401, written. Called with s.mu held.
func (s *Server) tokenAuth(w http.ResponseWriter, req *http.Request) (*token, bool) {
	scheme, v := credential(req)
	if v == "" {
		return nil, true
	}
	if scheme != "token" && scheme != "bearer" {
		writeError(w, http.StatusUnauthorized, "Bad credentials")
		return nil, false
	}
	t := s.lookupToken(v)
	if t == nil {
		writeError(w, http.StatusUnauthorized, "Bad credentials")
		return nil, false
	}
	return t, true
}

// role is what tok may do on r as a collaborator role; installation tokens
// see only their account's repositories they were scoped to.
func (s *Server) sees(tok *token, r *repo) bool {
	switch {
	case tok == nil:
		return !r.private
	case tok.kind == tokInstallation:
		return tok.inst.covers(r) && (tok.repos == nil || tok.repos[r.id])
	}
	return !r.private || s.role(tok.user, r).rank() > 0
}

func (s *Server) role(u *user, r *repo) Permission {
	if u == r.owner {
		return PermAdmin
	}
	if p, ok := r.perms[u.login]; ok {
		return p
	}
	return PermNone
}

// tokenCan reports whether tok may use perm ("contents", "issues", ...) at
// level ("read", "write") on r. A personal access token has its user's
// role: read lets a user comment, react and open pull requests, as on
// GitHub; write pushes.
func (s *Server) tokenCan(tok *token, r *repo, perm, level string) bool {
	if !s.sees(tok, r) {
		return false
	}
	switch {
	case tok == nil:
		return level == "read" && (perm == "contents" || perm == "metadata" || perm == "issues" || perm == "pull_requests" || perm == "checks")
	case tok.kind == tokInstallation:
		if perm == "metadata" && level == "read" {
			return true
		}
		return levelRank(tok.perms[perm]) >= levelRank(level)
	}
	role := s.role(tok.user, r)
	if !r.private && role == PermNone {
		role = PermRead
	}
	if perm == "contents" || perm == "administration" {
		return role.rank() >= levelRank(level)
	}
	return role.rank() >= PermRead.rank()
}

// tokenActor is who acts with tok: the user of a PAT, the bot of an App.
func (s *Server) tokenActor(t *token) *user {
	switch {
	case t == nil:
		return nil
	case t.kind == tokInstallation:
		return t.inst.app.bot
	}
	return t.user
}

func tokenApp(t *token) *app {
	if t != nil && t.kind == tokInstallation {
		return t.inst.app
	}
	return nil
}

// repoFor resolves {owner}/{repo} for a request needing perm at level; on
// failure it has written GitHub's error. Called with s.mu held.
func (s *Server) repoFor(w http.ResponseWriter, req *http.Request, perm, level string) (*repo, *token, bool) {
	tok, ok := s.tokenAuth(w, req)
	if !ok {
		return nil, nil, false
	}
	r := s.repoByName(req.PathValue("owner"), req.PathValue("repo"))
	if r == nil || !s.sees(tok, r) {
		writeError(w, http.StatusNotFound, "Not Found")
		return nil, nil, false
	}
	if !s.tokenCan(tok, r, perm, level) {
		switch {
		case tok == nil:
			writeError(w, http.StatusUnauthorized, "Requires authentication")
		case tok.kind == tokInstallation:
			writeError(w, http.StatusForbidden, "Resource not accessible by integration")
		default:
			writeError(w, http.StatusForbidden, "Resource not accessible by personal access token")
		}
		return nil, nil, false
	}
	return r, tok, true
}

func (s *Server) repoByName(owner, name string) *repo {
	for _, r := range s.repos {
		if strings.EqualFold(r.owner.login, owner) && strings.EqualFold(r.name, name) {
			return r
		}
	}
	return nil
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newToken returns prefix and 36 random base62 characters, as GitHub's
// tokens look.
func newToken(prefix string) string {
	b := make([]byte, 36)
	rand.Read(b)
	for i := range b {
		b[i] = base62[int(b[i])%len(base62)]
	}
	return prefix + string(b)
}
