package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/harvest-dev/harvest/secrets"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// The secrets routes. Who may: an admin token, any scope; a user token,
// its own user scope only ("user:me" or "user:<its id>"): repository
// secrets are shared by every session on the repository, so only an admin
// sets them. A value is read from a PUT body and never written back: not
// in a response, an error or a log line (package secrets keeps it sealed).

// secretsOn refuses the secrets routes of a server configured without a
// secret store.
func (s *Server) secretsOn() *apiError {
	if s.cfg.Secrets == nil || s.cfg.SecretKey == nil {
		return errorf(http.StatusNotFound, CodeNotFound, "this server keeps no secrets (it was started without a secret store and key)")
	}
	return nil
}

// secretScope parses a scope (of a path or a query) and checks that the
// caller may use it; user:me is the caller's own. put also checks that a
// user scope's token exists.
func (s *Server) secretScope(r *http.Request, c caller, raw string, put bool) (secrets.Scope, *apiError) {
	sc, err := secrets.ParseScope(raw)
	if err != nil {
		return sc, invalid([]string{err.Error()})
	}
	switch sc.Kind {
	case secrets.KindUser:
		if sc.ID == secrets.Me {
			sc.ID = c.token.ID
		}
		if sc.ID == c.token.ID {
			return sc, nil
		}
		if !c.admin() {
			return sc, errorf(http.StatusForbidden, CodeForbidden, fmt.Sprintf("scope %s is another token's: token %s (%s) manages its own secrets only, as user:me", sc, c.token.ID, c.token.Name))
		}
		if put {
			ts, err := s.cfg.Store.ListTokens(r.Context())
			if err != nil {
				return sc, fromManager(err)
			}
			if !slices.ContainsFunc(ts, func(t *store.Token) bool { return t.ID == sc.ID }) {
				return sc, invalid([]string{fmt.Sprintf("scope %s: there is no token %s (harvest token ls lists them)", sc, sc.ID)})
			}
		}
	case secrets.KindRepo:
		if !c.admin() {
			return sc, errorf(http.StatusForbidden, CodeForbidden, fmt.Sprintf("scope %s: repository secrets reach every session on the repository, so only an admin token sets, lists or deletes them; token %s (%s) may use user:me for its own", sc, c.token.ID, c.token.Name))
		}
	}
	return sc, nil
}

func (s *Server) putSecret(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := s.secretsOn(); e != nil {
		return e
	}
	if e := noQuery(r); e != nil {
		return e
	}
	sc, e := s.secretScope(r, c, r.PathValue("scope"), true)
	if e != nil {
		return e
	}
	b, e := readBody(w, r)
	if e != nil {
		return e
	}
	req, e := decodeSecret(r.Header.Get("Content-Type"), b)
	if e != nil {
		return e
	}
	x, err := secrets.PutAs(r.Context(), s.cfg.Secrets, s.cfg.SecretKey, sc, r.PathValue("name"), req.Value, req.Session, c.token.ID, c.token.User)
	var ie *secrets.InputError
	switch {
	case errors.As(err, &ie):
		return invalid(ie.Problems)
	case err != nil:
		return fromManager(err)
	}
	writeJSON(w, http.StatusOK, secretView(x))
	return nil
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := s.secretsOn(); e != nil {
		return e
	}
	var scopes []string
	for k, vs := range r.URL.Query() {
		if k != "scope" {
			return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("unknown query parameter %q: GET %s takes scope", k, r.URL.Path))
		}
		for _, v := range vs {
			sc, e := s.secretScope(r, c, v, false)
			if e != nil {
				return e
			}
			scopes = append(scopes, sc.String())
		}
	}
	if len(scopes) == 0 && !c.admin() {
		scopes = []string{secrets.Scope{Kind: secrets.KindUser, ID: c.token.ID}.String()}
	}
	xs, err := s.cfg.Secrets.ListSecrets(r.Context(), scopes...)
	if err != nil {
		return fromManager(err)
	}
	out := wire.SecretList{Secrets: []*wire.Secret{}}
	for _, x := range xs {
		out.Secrets = append(out.Secrets, secretView(x))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := s.secretsOn(); e != nil {
		return e
	}
	if e := noBody(w, r); e != nil {
		return e
	}
	sc, e := s.secretScope(r, c, r.PathValue("scope"), false)
	if e != nil {
		return e
	}
	name := r.PathValue("name")
	if err := secrets.CheckName(name); err != nil {
		return invalid([]string{err.Error()})
	}
	if err := s.cfg.Secrets.DeleteSecret(r.Context(), sc.String(), name); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no secret %s in %s (GET /v1/secrets lists them)", name, sc))
		}
		return fromManager(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// decodeSecret decodes the body of PUT /v1/secrets/{scope}/{name}. Of the
// JSON parser's messages only those that cannot quote the value are kept
// ("got a JSON number 1234" and "invalid character 'x'" could).
func decodeSecret(contentType string, body []byte) (wire.SecretRequest, *apiError) {
	var req wire.SecretRequest
	e := decodeBody(contentType, body, &req, true)
	if e == nil || e.status != http.StatusBadRequest || len(bytes.TrimSpace(body)) == 0 || !utf8.Valid(body) {
		return req, e
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(&wire.SecretRequest{})
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil, errors.Is(err, io.ErrUnexpectedEOF), strings.HasPrefix(err.Error(), "json: unknown field "):
		// More after the object, a body cut short, a field name: nothing
		// of the value.
	case errors.As(err, &syn):
		e.message = fmt.Sprintf("malformed JSON at byte %d (what the parser said is withheld: it could quote the value)", syn.Offset)
	case errors.As(err, &typ) && typ.Field != "":
		e.message = fmt.Sprintf("field %q: want %s", typ.Field, jsonKind(typ.Type))
	default:
		e.message = `the body is not a JSON object {"value": STRING, "session": BOOLEAN}: send a JSON object`
	}
	return req, e
}

func secretView(x *store.Secret) *wire.Secret {
	return &wire.Secret{Scope: x.Scope, Name: x.Name, Session: x.Session, SetBy: x.SetBy, SetByUser: x.SetByUser, CreatedAt: x.CreatedAt, UpdatedAt: x.UpdatedAt}
}
