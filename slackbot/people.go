package slackbot

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/harvest-dev/harvest/store"
)

// # People
//
// A Slack account is a Harvest user when it is linked to one: by an
// identity (kind slack, issuer the Slack team, subject the Slack user
// id), or, the first time, by the email of its Slack profile (users.info)
// being the verified email of one of the user's other identities (a
// GitHub or OIDC sign-in): then the slack identity is stored, and
// later requests are that user's without asking Slack. Nobody else's
// request runs as them; an account that matches no user gets an
// ephemeral message saying how to link it, and nothing starts: with a
// one-time link (linkCode) to a page of the web UI where the person,
// signed in to Harvest, links the account to themselves by hand
// (package server, POST /v1/slack/links/{code}). A disabled user is
// refused as their tokens are.
//
// What the app does is in the audit log (channel slack): a session
// started (session.create), a message sent (session.message), a turn
// stopped (session.cancel) and a request refused (slack.refuse), each
// with the Slack user and the user.

// cachedUser is a Slack account's user, as last looked up.
type cachedUser struct {
	user *store.User
	at   time.Time
}

// userTTL bounds how long a lookup is trusted (a disabled user's
// requests stop within it).
const userTTL = time.Minute

// errUnlinked: the Slack account is no Harvest user.
var errUnlinked = errors.New("this Slack account is not linked to a Harvest user")

// user is the Harvest user of a Slack account, or errUnlinked.
func (b *Bot) user(ctx context.Context, slackUser string) (*store.User, error) {
	b.mu.Lock()
	c, ok := b.users[slackUser]
	b.mu.Unlock()
	if ok && time.Since(c.at) < userTTL {
		return c.user, nil
	}
	u, err := b.st.UserByIdentity(ctx, store.IdentitySlack, b.team, slackUser)
	if errors.Is(err, store.ErrNotFound) {
		u, err = b.linkByEmail(ctx, slackUser)
	}
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.users[slackUser] = cachedUser{user: u, at: time.Now()}
	b.mu.Unlock()
	return u, nil
}

// linkByEmail finds the user whose verified email is the Slack
// profile's, and links the account to them.
func (b *Bot) linkByEmail(ctx context.Context, slackUser string) (*store.User, error) {
	var info *slack.User
	err := b.rate.call(ctx, func(ctx context.Context) error {
		var err error
		info, err = b.api.GetUserInfoContext(ctx, slackUser)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("slack: users.info %s: %w", slackUser, err)
	}
	if info.IsBot || info.Deleted {
		return nil, errUnlinked
	}
	name := info.Profile.DisplayName
	if name == "" {
		name = info.Name
	}
	unlinked := &unlinkedError{slackUser: slackUser, name: name}
	email := strings.ToLower(strings.TrimSpace(info.Profile.Email))
	if email == "" {
		return nil, unlinked
	}
	users, err := b.st.ListUsers(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing users: %w", err)
	}
	for _, u := range users {
		ids, err := b.st.Identities(ctx, u.ID)
		if err != nil {
			return nil, fmt.Errorf("reading the identities of %s: %w", u.ID, err)
		}
		for _, i := range ids {
			if i.Kind != store.IdentitySlack && i.Email != "" && strings.EqualFold(i.Email, email) {
				err := b.st.AddIdentity(ctx, &store.Identity{User: u.ID, Kind: store.IdentitySlack, Issuer: b.team, Subject: slackUser, Login: info.Name, Email: email})
				if err != nil && !errors.Is(err, store.ErrConflict) {
					return nil, fmt.Errorf("linking Slack's %s to %s: %w", slackUser, u.ID, err)
				}
				b.log.Info("a Slack account was linked to a user by its email", "slack_user", slackUser, "user", u.ID)
				return u, nil
			}
		}
	}
	return nil, unlinked
}

// linkHelp is the ephemeral message to a Slack account that is no user
// (err, from user): a one-time link to link it by hand (linkCode), and
// the other way, by email.
func (b *Bot) linkHelp(ctx context.Context, err error) string {
	where := "Harvest"
	if b.cfg.PublicURL != "" {
		where = "Harvest (" + b.cfg.PublicURL + ")"
	}
	byEmail := "sign in to " + where + " with GitHub or your company's sign-in using the email of your Slack profile, then mention me again."
	var ue *unlinkedError
	if !errors.As(err, &ue) {
		return "I don't know who you are in Harvest yet, so I can't work for you. To change that, " + byEmail
	}
	code, lerr := b.linkCode(ctx, ue)
	if lerr != nil {
		b.log.Error("making a link for a Slack account", "slack_user", ue.slackUser, "err", lerr)
		return "I don't know who you are in Harvest yet, so I can't work for you. To change that, " + byEmail
	}
	page := strings.TrimSuffix(b.cfg.PublicURL, "/") + "/#/link/slack/" + code
	if b.cfg.PublicURL == "" {
		page = "Harvest's web UI at #/link/slack/" + code
	}
	return "I don't know who you are in Harvest yet, so I can't work for you. To link this Slack account to your Harvest user, open " +
		page + fmt.Sprintf(" within %d minutes", int(linkTTL.Minutes())) +
		", sign in and confirm (the link works once; keep it to yourself). Or " + byEmail
}

// linkTTL is how long a link linkHelp gives works.
const linkTTL = 15 * time.Minute

// unlinkedError is errUnlinked, for a Slack account that could be
// linked: a person's (not a bot's, nor a deactivated account's).
type unlinkedError struct {
	slackUser, name string
}

func (e *unlinkedError) Error() string        { return errUnlinked.Error() }
func (e *unlinkedError) Is(target error) bool { return target == errUnlinked }

// linkCode stores a new link for the account and returns its code:
// 256 random bits, base64url; the store keeps only its SHA-256.
func (b *Bot) linkCode(ctx context.Context, ue *unlinkedError) (string, error) {
	var raw [32]byte
	rand.Read(raw[:])
	code := base64.RawURLEncoding.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(code))
	now := time.Now().UTC()
	err := b.st.CreateSlackLink(ctx, &store.SlackLink{Hash: sum[:], Team: b.team, User: ue.slackUser, Name: ue.name, CreatedAt: now, ExpiresAt: now.Add(linkTTL)})
	if err != nil {
		return "", fmt.Errorf("storing the link: %w", err)
	}
	return code, nil
}

// audit appends e (channel slack, now), logging a failure: the log
// must not hold an event up.
func (b *Bot) audit(ctx context.Context, e store.AuditEntry, detail map[string]any) {
	e.Channel, e.Time = store.ChannelSlack, time.Now().UTC()
	if detail != nil {
		e.Detail, _ = json.Marshal(detail)
	}
	if err := b.st.AppendAudit(ctx, &e); err != nil {
		b.log.Error("recording an audit entry", "action", e.Action, "target", e.Target, "err", err)
	}
}
