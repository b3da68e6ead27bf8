package store

import (
	"context"
	"time"
)

// # Slack
//
// What package slackbot keeps: the events it has processed (so one
// Slack delivers twice, a retry or a redelivery after a reconnect, is
// processed once), the thread each session it started answers, and each
// channel's default repository (/harvest repo owner/name).

// SlackThread is the Slack thread a session answers.
type SlackThread struct {
	Session string `json:"session"`
	Team    string `json:"team"`
	Channel string `json:"channel"`
	// ThreadTS is the ts of the message that started the session: its
	// thread's.
	ThreadTS string `json:"thread_ts"`
	// User is the Slack user who started it.
	User string `json:"user"`
	// Shown is the seq of the session's last event the thread shows the
	// end of (a turn's final message was posted after it): after a
	// restart the app follows the session from there.
	Shown int64 `json:"shown"`
	// Turn is the turn whose progress message the thread shows last,
	// ProgressTS that message's ts and TriggerTS the ts of the message
	// that asked for the turn (SetSlackThreadTurn): after a restart, or
	// on the node that takes the session over, the app edits that
	// progress message instead of posting a second and marks the message
	// that asked.
	Turn       string    `json:"turn,omitempty"`
	ProgressTS string    `json:"progress_ts,omitempty"`
	TriggerTS  string    `json:"trigger_ts,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
}

// SlackChannel is a channel's default repository.
type SlackChannel struct {
	Team    string `json:"team"`
	Channel string `json:"channel"`
	// Repo is "owner/name" or a directory's name under a repository root.
	Repo string `json:"repo"`
	// SetBy is the Harvest user who set it.
	SetBy     string    `json:"set_by"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Slack is the part of a Store package slackbot uses.
type Slack interface {
	// AddSlackEvent records an event id as received (at, zero: now); an
	// id recorded before is ErrConflict: a delivery seen already.
	AddSlackEvent(ctx context.Context, id string, at time.Time) error
	// PruneSlackEvents forgets the ids received before t (Slack retries
	// within minutes; a pending event's is kept) and returns how many.
	PruneSlackEvents(ctx context.Context, before time.Time) (int, error)
	// PutSlackThread records the thread of a session; a session that has
	// one is ErrConflict.
	PutSlackThread(ctx context.Context, t *SlackThread) error
	// SetSlackThreadShown records a thread's Shown (a smaller seq than
	// the one recorded is kept out); a session without a thread is
	// ErrNotFound.
	SetSlackThreadShown(ctx context.Context, session string, seq int64) error
	// SetSlackThreadTurn records a thread's Turn, ProgressTS and
	// TriggerTS; a session without a thread is ErrNotFound.
	SetSlackThreadTurn(ctx context.Context, session, turn, progressTS, triggerTS string) error
	// SlackThread reads a session's thread, or ErrNotFound.
	SlackThread(ctx context.Context, session string) (*SlackThread, error)
	// SetSlackChannel records (or replaces) a channel's default
	// repository.
	SetSlackChannel(ctx context.Context, c *SlackChannel) error
	// SlackChannel reads a channel's default repository, or ErrNotFound.
	SlackChannel(ctx context.Context, team, channel string) (*SlackChannel, error)
	SlackLinks
	SlackInbox
}

// # Linking a Slack account by hand
//
// A Slack account whose profile's email is no user's is given a link to
// follow (package slackbot): a random code, of which only the SHA-256 is
// kept here with the account it names, for a few minutes. The user who
// opens it in Harvest, signed in, and confirms, gets the account as an
// identity (kind slack): RedeemSlackLink uses the code up and adds the
// identity in one transaction. A code lives minutes: harvest store
// migrate does not copy the links (the person asks Slack for a new one).

// SlackLink is a Slack account waiting to be linked to whoever redeems
// its code.
type SlackLink struct {
	// Hash is the SHA-256 of the code.
	Hash []byte
	// Team and User name the Slack account: the identity's issuer and
	// subject.
	Team, User string
	// Name is the account's name in Slack (the identity's login; what
	// the confirmation shows).
	Name      string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// SlackLinks keeps the Slack accounts waiting to be linked.
type SlackLinks interface {
	// CreateSlackLink stores l (Hash, Team, User and ExpiresAt set; a hash
	// that exists is ErrConflict) and drops the links that have expired.
	CreateSlackLink(ctx context.Context, l *SlackLink) error
	// SlackLink reads the link whose code has SHA-256 hash; ErrNotFound
	// when there is none or it had expired at now.
	SlackLink(ctx context.Context, hash []byte, now time.Time) (*SlackLink, error)
	// RedeemSlackLink uses up the link whose code has SHA-256 hash and
	// gives its Slack account to user (an Identity of kind slack, issuer
	// the team, subject the Slack user, login the name), with the
	// context's audit entry (WithAudit), in one transaction. ErrNotFound:
	// no such link, it had expired at now, or no such user. ErrConflict:
	// the account is another user's (nothing changes; the link stays).
	// An account that is user's already: the link is used up, no error.
	RedeemSlackLink(ctx context.Context, hash []byte, user string, now time.Time) (*SlackLink, error)
}
