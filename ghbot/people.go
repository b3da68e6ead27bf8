package ghbot

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/store"
)

// # People
//
// The person who asks on GitHub is a Harvest user (store/people.go): the
// first time a GitHub account starts a session, it becomes a user with a
// github identity (its numeric id, which a renamed account keeps) and
// HookConfig.DefaultRole; after that it is that user, whatever its login
// has become. The sessions it starts are that user's (store.Session.User),
// so the person who commented is the one who caused them, as when they
// use the API. A disabled user's comments start nothing: they are
// refused, as their tokens are.
//
// What the webhooks do is in the audit log (channel github): a session
// started (session.create, the requester's user), a comment, review or
// review comment sent to a session (session.send, its author's user;
// failed checks, no user's), a
// turn stopped (session.cancel) and a request refused (github.refuse, the
// sender's user when they are one). Refusals of deliveries themselves (a
// bad signature) are the API's to record. A disabled user is refused
// whatever they ask (allowed): a new session, a follow-up, a command.

// PeopleStore is the part of the store that makes GitHub's people users
// and records what webhooks do.
type PeopleStore interface {
	UserForIdentity(ctx context.Context, i *store.Identity, u *store.User) (*store.User, bool, error)
	UserByIdentity(ctx context.Context, kind, issuer, subject string) (*store.User, error)
	AppendAudit(ctx context.Context, e *store.AuditEntry) error
}

// requester is the user of the GitHub account that asked for a session,
// made at first sight. nil when the link names no account id (a session
// of before they were recorded).
func (h *Hooks) requester(ctx context.Context, l *store.GitHubLink) (*store.User, error) {
	if l == nil || l.RequesterID <= 0 {
		return nil, nil
	}
	role := h.cfg.DefaultRole
	if role == "" {
		role = store.RoleMember
	}
	u, created, err := h.st.UserForIdentity(ctx,
		&store.Identity{Kind: store.IdentityGitHub, Subject: strconv.FormatInt(l.RequesterID, 10), Login: l.Requester},
		&store.User{ID: store.NewUserID(), Name: cmp.Or(l.RequesterName, l.Requester, "GitHub user "+strconv.FormatInt(l.RequesterID, 10)), Role: role})
	if err != nil {
		return nil, fmt.Errorf("the Harvest user of GitHub's @%s: %w", l.Requester, err)
	}
	if created {
		h.log.Info("a GitHub account became a user", "login", l.Requester, "github_id", l.RequesterID, "user", u.ID, "role", u.Role)
	}
	return u, nil
}

// disabled is the refusal for who when their Harvest user is disabled
// ("" when they have none or it is enabled). It does not make them a
// user: only what they cause does.
func (h *Hooks) disabled(ctx context.Context, who *github.User) (string, error) {
	if who.GetID() <= 0 {
		return "", nil
	}
	u, err := h.st.UserByIdentity(ctx, store.IdentityGitHub, "", strconv.FormatInt(who.GetID(), 10))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("the Harvest user of GitHub's @%s: %w", who.GetLogin(), err)
	case u.Disabled:
		return "your Harvest user is disabled", nil
	}
	return "", nil
}

// auditBy appends e as caused by who (their user, made at first sight),
// or by nobody when who is nil (a check run, say).
func (h *Hooks) auditBy(ctx context.Context, who *github.User, e store.AuditEntry) {
	if who != nil {
		u, err := h.requester(ctx, &store.GitHubLink{Requester: who.GetLogin(), RequesterID: who.GetID()})
		if err != nil {
			h.log.Error("the user of an audit entry", "action", e.Action, "login", who.GetLogin(), "err", err)
		} else if u != nil {
			e.User = u.ID
		}
	}
	h.audit(ctx, e)
}

// audit appends e (channel github, now), logging a failure: the log
// must not hold a delivery up.
func (h *Hooks) audit(ctx context.Context, e store.AuditEntry) {
	e.Channel, e.Time = store.ChannelGitHub, time.Now().UTC()
	if err := h.st.AppendAudit(ctx, &e); err != nil {
		h.log.Error("recording an audit entry", "action", e.Action, "target", e.Target, "err", err)
	}
}

// auditRefusal records a refused request: its sender, and their user if
// they are one (a refused person is not made a user).
func (h *Hooks) auditRefusal(ctx context.Context, d *store.Delivery, result string) {
	t := payloadTarget(d.Payload)
	e := store.AuditEntry{Action: "github.refuse", Target: fmt.Sprintf("%s#%d", t.Repo, t.Number), Result: "forbidden",
		Detail: auditDetail(map[string]any{"delivery": d.ID, "event": d.Event, "login": t.Sender, "github_id": t.SenderID, "why": result})}
	if t.SenderID > 0 {
		if u, err := h.st.UserByIdentity(ctx, store.IdentityGitHub, "", strconv.FormatInt(t.SenderID, 10)); err == nil {
			e.User = u.ID
		}
	}
	h.audit(ctx, e)
}

func auditDetail(m map[string]any) json.RawMessage {
	b, _ := json.Marshal(m)
	return b
}
