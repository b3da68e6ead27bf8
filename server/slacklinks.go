package server

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// # Linking a Slack account by hand
//
// A Slack account that is no user is given a link by the Slack app
// (package slackbot): the web UI's #/link/slack/CODE. There the person,
// signed in, sees which account it is (GET /v1/slack/links/{code}) and
// links it to themselves (POST): the code is used up and the account
// becomes an identity of the caller's user (kind slack), audited as
// identity.link. A code is random (256 bits), works once, for minutes
// (slackbot's linkTTL, read by Config.Now), and is kept hashed. An
// account that is someone else's is a 409: an admin unlinks it first
// (DELETE /v1/users/{id}/identities/slack/{subject}?issuer=TEAM), as a
// person may unlink their own Slack accounts. Other kinds of identity
// (GitHub, OIDC) are what people sign in with: only an admin removes
// them.

// linkCodePattern is the shape of a link's code: 32 bytes, base64url.
var linkCodePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)

func (s *Server) now() time.Time {
	if s.cfg.Now != nil {
		return s.cfg.Now()
	}
	return time.Now()
}

// slackLink reads the link of the request's code; an unknown, used or
// expired one is a 404 that says what to do.
func (s *Server) slackLink(r *http.Request) (*store.SlackLink, *apiError) {
	code := r.PathValue("code")
	if !linkCodePattern.MatchString(code) {
		return nil, linkGone()
	}
	l, err := s.cfg.Store.SlackLink(r.Context(), HashToken(code), s.now())
	if errors.Is(err, store.ErrNotFound) {
		return nil, linkGone()
	}
	if err != nil {
		return nil, fromManager(err)
	}
	return l, nil
}

func linkGone() *apiError {
	return errorf(http.StatusNotFound, CodeNotFound, "this link is unknown, used already or expired: mention the Harvest app in Slack again for a new one")
}

func slackLinkView(l *store.SlackLink) *wire.SlackLink {
	return &wire.SlackLink{Team: l.Team, User: l.User, Name: l.Name, ExpiresAt: l.ExpiresAt}
}

// getSlackLink says which Slack account a code would link.
func (s *Server) getSlackLink(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	l, e := s.slackLink(r)
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, slackLinkView(l))
	return nil
}

// redeemSlackLink links the code's Slack account to the caller's user
// and answers the user with their identities.
func (s *Server) redeemSlackLink(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noBody(w, r); e != nil {
		return e
	}
	if c.token.User == "" {
		return errorf(http.StatusForbidden, CodeForbidden, fmt.Sprintf("token %s is no person's: sign in as the person whose Slack account this is", c.token.ID))
	}
	// Read first: the entry, recorded with the link in its transaction,
	// names the account.
	l, e := s.slackLink(r)
	if e != nil {
		return e
	}
	if a := auditOf(r); a != nil {
		a.e.Target = c.token.User
		a.addDetail(map[string]any{"kind": store.IdentitySlack, "team": l.Team, "slack_user": l.User, "name": l.Name})
	}
	_, err := s.cfg.Store.RedeemSlackLink(r.Context(), HashToken(r.PathValue("code")), c.token.User, s.now())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return linkGone()
	case errors.Is(err, store.ErrConflict):
		return errorf(http.StatusConflict, CodeConflict, "this Slack account is linked to another Harvest user: ask an admin to unlink it from them (the admin page, or DELETE /v1/users/{id}/identities/slack/{subject}), then mention the app in Slack again for a new link")
	case err != nil:
		return fromManager(err)
	}
	u, err := s.cfg.Store.GetUser(r.Context(), c.token.User)
	if err != nil {
		return fromManager(err)
	}
	ids, err := s.cfg.Store.Identities(r.Context(), u.ID)
	if err != nil {
		return fromManager(err)
	}
	writeJSON(w, http.StatusOK, UserView(u, ids))
	return nil
}

// unlinkIdentity takes an identity from a user: any, by an admin; a
// Slack account of their own, by the user.
func (s *Server) unlinkIdentity(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noBodyAllowingQuery(r); e != nil {
		return e
	}
	var issuer string
	for k, vs := range r.URL.Query() {
		if k != "issuer" {
			return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("unknown query parameter %q: DELETE %s takes issuer", clip(k, 40), r.URL.Path))
		}
		issuer = vs[len(vs)-1]
	}
	id, kind, subject := r.PathValue("id"), r.PathValue("kind"), r.PathValue("subject")
	if !c.admin() && (id != c.token.User || kind != store.IdentitySlack) {
		if id != c.token.User {
			return errorf(http.StatusForbidden, CodeForbidden, fmt.Sprintf("user %s is not you: only an admin unlinks another person's accounts", id))
		}
		return errorf(http.StatusForbidden, CodeForbidden, fmt.Sprintf("a %s identity is what you sign in with: only an admin removes it", clip(kind, 20)))
	}
	if a := auditOf(r); a != nil {
		a.addDetail(map[string]any{"kind": kind, "issuer": issuer, "subject": subject})
	}
	err := s.cfg.Store.RemoveIdentity(r.Context(), id, kind, issuer, subject)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("user %s has no %s identity %s (issuer %q): see their identities in GET /v1/users/%s or GET /v1/me", id, clip(kind, 20), clip(subject, 80), clip(issuer, 200), id))
	}
	if err != nil {
		return fromManager(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
