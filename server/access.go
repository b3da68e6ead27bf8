package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// # Who sees what
//
// Package authz has the rules; this file applies them to the routes.
// Every route on one session reads the session (as an admin would), asks
// the caller's level on it (authz.Checker.Session) and then acts as the
// admin would, so the Manager's own owner check is not the rule any more:
//
//	read   GET /v1/sessions/{id}, .../log, .../lock, .../events, .../diff
//	write  DELETE /v1/sessions/{id}, POST .../messages, .../cancel, .../stop,
//	       GET .../shell
//
// A caller below read gets the very 404 of a session that does not exist
// (the same message: no oracle); a caller who reads but does not write
// gets a 403 that says so and why. A level that cannot be known (GitHub
// not answering) is a 503 with Retry-After: closed, never open. Each
// refusal of a session that exists is in the audit log: an audited
// route's entry has the refusal as its result; a read route's gets an
// entry of its own (action session.read).
//
// An open event stream of someone else's session is checked again every
// Resolver.Recheck (GitHub's cache lifetime by default): once the reader
// may not read it any more, the stream ends with stream.error "deleted"
// (the session is gone for them, as a 404 says); when the check cannot
// be made, with "unavailable" (they reconnect and are checked again).
//
// The routes reach this node from another one (server/cluster forwards
// with the caller's own credentials), so the rules are the same on every
// node; a node's own token is an admin's.
//
// GET /v1/sessions lists the caller's own sessions (?scope=mine: their
// user's, from any token or channel) or those they may read
// (?scope=visible, the default): their own and, when some repository can
// be shared (a GitHub, a root with a policy), others' they may read,
// found by reading the list in order and keeping those (at most
// maxScan sessions read per page: a page may hold fewer than limit
// sessions and still have a next_cursor).

// maxScan bounds the sessions one page of ?scope=visible reads to fill
// itself.
const maxScan = 5000

// subject is who the caller is, for the rules.
func (c caller) subject() authz.Subject {
	return authz.Subject{User: c.token.User, Token: c.token.ID, Role: c.token.Role, Admin: c.admin()}
}

// refuseNotFound is the answer for a session the caller may not see:
// what the Manager answers for one that does not exist.
func refuseNotFound(id string) *apiError {
	return fromManager(fmt.Errorf("session %s: %w", id, session.ErrNotFound))
}

// accessFailed is the answer when the caller's level could not be known.
func accessFailed(err error) *apiError {
	if errors.Is(err, authz.ErrUnavailable) {
		return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable, cause: err,
			message: err.Error() + " (Harvest does not show a session when it cannot check who may see it: retry in a few seconds)"}
	}
	return fromManager(err)
}

// sessionFor reads session id for c, who needs level need on it: 404 when
// c may not read it, 403 when c reads it and need is write.
func (s *Server) sessionFor(r *http.Request, c caller, id string, need authz.Level) (*session.View, *apiError) {
	v, _, e := s.sessionLevel(r, c, id, need)
	return v, e
}

// sessionLevel is sessionFor that also says c's level on the session (at
// least need), which GET /v1/sessions/{id} tells the caller ("access"),
// so a page shows the controls they may use.
func (s *Server) sessionLevel(r *http.Request, c caller, id string, need authz.Level) (*session.View, authz.Level, *apiError) {
	v, err := s.cfg.Manager.Get(r.Context(), "", id)
	if err != nil {
		return nil, 0, fromManager(err)
	}
	if c.admin() {
		return v, authz.Write, nil
	}
	chk := s.access.For(c.subject())
	l, err := chk.Session(r.Context(), v.Session)
	if err != nil {
		e := accessFailed(err)
		s.auditRefusal(r, c, id, e, need)
		return nil, 0, e
	}
	var e *apiError
	switch {
	case l < authz.Read:
		e = refuseNotFound(id)
	case l < need:
		why := fmt.Sprintf("you may read session %s but not act on it: sending to, cancelling, stopping, deleting or opening the shell of someone else's session needs write access to all its repositories", id)
		switch {
		case c.subject().Role == store.RoleViewer:
			why = fmt.Sprintf("you may read session %s but not act on it: user %s is a viewer, and viewers read (an admin makes you a member: harvest user set-role %s member)", id, c.token.User, c.token.User)
		default:
			if w := s.whyNotWrite(r.Context(), chk, v.Session); w != "" {
				why += " (" + w + ")"
			}
		}
		e = errorf(http.StatusForbidden, CodeForbidden, why)
	default:
		return v, l, nil
	}
	s.auditRefusal(r, c, id, e, need)
	return nil, 0, e
}

// whyNotWrite says, for a refusal, why the first repository of s that is
// not written is not.
func (s *Server) whyNotWrite(ctx context.Context, chk *authz.Checker, ss *store.Session) string {
	for _, rp := range ss.Repos {
		g, err := chk.Repo(ctx, authz.RefOf(rp))
		if err == nil && g.Level < authz.Write {
			return g.Why
		}
	}
	return ""
}

// auditRefusal records a refusal of a session that exists on a route
// that is not audited (an audited one records its result itself).
func (s *Server) auditRefusal(r *http.Request, c caller, id string, e *apiError, need authz.Level) {
	if auditOf(r) != nil {
		return
	}
	ent := &store.AuditEntry{Time: time.Now().UTC(), User: c.token.User, Token: c.token.ID, Channel: channelOf(r, c), Remote: remoteIP(r),
		Action: "session.read", Target: id, Result: e.code, Detail: mustJSON(map[string]any{"route": r.Method + " " + r.URL.Path, "needs": need.String()})}
	s.recordAudit(r.Context(), ent)
}

// stillReads checks again that c reads s, for an open event stream: ""
// when it does, else the stream's final error (the session is gone for
// c, as a 404 would say; or its access could not be checked: the stream
// ends, the client reconnects and is checked as any request).
func (s *Server) stillReads(r *http.Request, c caller, ss *store.Session) (code, msg string) {
	l, err := s.access.For(c.subject()).Session(r.Context(), ss)
	switch {
	case err != nil:
		return StreamUnavailable, accessFailed(err).message + "; reconnect with Last-Event-ID"
	case l < authz.Read:
		s.auditRefusal(r, c, ss.ID, refuseNotFound(ss.ID), authz.Read)
		return StreamDeleted, refuseNotFound(ss.ID).message
	}
	return "", ""
}

// startRefusal says whether c may start a session on repos: nil, or the
// 403 (or 503) that says why not.
func (s *Server) startRefusal(r *http.Request, c caller, repos []session.RepoSpec) *apiError {
	if c.admin() {
		return nil
	}
	refs := make([]authz.RepoRef, 0, len(repos))
	for _, rp := range repos {
		switch {
		case rp.GitHub != "":
			refs = append(refs, authz.RepoRef{GitHub: rp.GitHub, Name: rp.GitHub})
		case filepath.IsAbs(rp.Source):
			refs = append(refs, authz.RepoRef{Dir: rp.Source, Name: rp.Source})
		default:
			refs = append(refs, authz.RepoRef{Name: rp.Source})
		}
	}
	refusal, err := s.access.For(c.subject()).Start(r.Context(), refs)
	if err != nil {
		return accessFailed(err)
	}
	if refusal != nil {
		return errorf(http.StatusForbidden, CodeForbidden, refusal.Error())
	}
	return nil
}

// list scopes.
const (
	scopeMine    = "mine"
	scopeVisible = "visible"
)

// listFor lists a page of the sessions c may see under f (f.Limit is the
// page's size plus one: whether there is a next page): the page and,
// when there may be more, where the next starts.
func (s *Server) listFor(ctx context.Context, c caller, scope string, f store.SessionFilter) ([]*store.Session, *store.SessionKey, error) {
	size := f.Limit - 1
	if scope == scopeMine {
		f.User = c.token.User
		if f.User == "" {
			f.Owner = c.token.ID
		}
	}
	if c.admin() || scope == scopeMine || !s.access.Shared() {
		if !c.admin() && scope != scopeMine {
			// Nothing can be shared: the caller's own only.
			f.User = c.token.User
		}
		list, err := s.cfg.Manager.List(ctx, "", f)
		if err != nil {
			return nil, nil, err
		}
		if len(list) > size {
			k := store.KeyOf(list[size-1])
			return list[:size], &k, nil
		}
		return list, nil, nil
	}
	chk := s.access.For(c.subject())
	var out []*store.Session
	scanned := 0
	f.Limit = max(f.Limit, 200)
	for {
		list, err := s.cfg.Manager.List(ctx, "", f)
		if err != nil {
			return nil, nil, err
		}
		for _, x := range list {
			scanned++
			l, err := chk.Session(ctx, x)
			if err != nil {
				return nil, nil, err
			}
			if l < authz.Read {
				continue
			}
			if len(out) == size {
				k := store.KeyOf(out[size-1])
				return out, &k, nil
			}
			out = append(out, x)
		}
		if len(list) < f.Limit {
			return out, nil, nil
		}
		k := store.KeyOf(list[len(list)-1])
		if scanned >= maxScan {
			// A page short of its size, and where to go on.
			return out, &k, nil
		}
		f.After = &k
	}
}
