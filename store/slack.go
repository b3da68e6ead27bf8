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
	// within minutes) and returns how many.
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
}
