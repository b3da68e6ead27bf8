package slackbot

import (
	"context"
	"errors"
	"strings"

	"github.com/slack-go/slack"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// message is a person's message the app acts on: a mention in a
// channel, a direct message, a reply in a session's thread.
type message struct {
	event    string // the event's id
	channel  string
	ts       string
	threadTS string // "" when not in a thread
	user     string
	text     string
	im       bool   // a direct message
	mention  bool   // an app_mention event
	kind     string // "": a new message; edited, deleted (edits.go)
	prev     string // edited: the text before the edit
}

// onMessage decides what a message asks: a new session (a mention, a
// direct message outside a thread) or a follow-up (a reply in a session's
// thread). Each message is acted on once: a mention comes as app_mention
// and as a message event; the app_mention starts a session, the message
// event of a reply in a session's thread sends it.
func (b *Bot) onMessage(ctx context.Context, m message) {
	if m.user == "" || m.user == b.botUser {
		return
	}
	if m.kind != "" {
		b.onChange(ctx, m) // an edit, a deletion: edits.go
		return
	}
	if m.threadTS != "" && m.threadTS != m.ts {
		// A reply: the thread's session, if it has one, takes it. A
		// mention in a thread with no session starts one there.
		unlock := b.lockThread(b.threadKey(m.channel, m.threadTS))
		defer unlock()
		id := b.sessionID(m.channel, m.threadTS)
		if _, err := b.st.SlackThread(ctx, id); err == nil {
			if !m.mention {
				b.followUp(ctx, id, m)
			}
			return
		} else if !errors.Is(err, store.ErrNotFound) {
			b.log.Error("finding a thread's session", "err", err)
			return
		}
		if m.mention {
			b.start(ctx, m, m.threadTS)
		}
		return
	}
	if m.mention == m.im {
		return // a channel's message that is no mention; a DM's app_mention twin
	}
	unlock := b.lockThread(b.threadKey(m.channel, m.ts))
	defer unlock()
	b.start(ctx, m, m.ts)
}

// start starts the session of a thread (rootTS: its first message).
func (b *Bot) start(ctx context.Context, m message, rootTS string) {
	u, ok := b.asker(ctx, m)
	if !ok {
		return
	}
	b.react(ctx, m.channel, m.ts, "eyes")
	text := b.stripMentions(m.text)
	r, found := b.repoIn(text)
	if !found {
		c, err := b.st.SlackChannel(ctx, b.team, m.channel)
		if err == nil {
			r, found = b.lookupRepo(c.Repo)
		} else if !errors.Is(err, store.ErrNotFound) {
			b.log.Error("reading a channel's default repository", "channel", m.channel, "err", err)
		}
	}
	if !found {
		b.unreact(ctx, m.channel, m.ts, "eyes") // nothing runs until a repository is chosen
		b.offerRepos(ctx, m, u, rootTS)
		return
	}
	if b.mayStart(ctx, m, u, r, rootTS) {
		b.create(ctx, m, u, r, rootTS, text)
	}
}

// mayStart says whether u may start a session on r, telling them (and
// taking 👀 back) when not.
func (b *Bot) mayStart(ctx context.Context, m message, u *store.User, r repo, rootTS string) bool {
	refusal, err := b.cfg.Access.For(authz.Subject{User: u.ID, Role: u.Role}).Start(ctx, []authz.RepoRef{r.ref})
	if err != nil {
		b.say(ctx, m.channel, rootTS, "I couldn't check your access to "+r.name+" just now ("+err.Error()+"). Please try again in a minute.")
		b.unreact(ctx, m.channel, m.ts, "eyes")
		return false
	}
	if refusal != nil {
		b.refuse(ctx, m, u, r.name, refusal.Error())
		return false
	}
	return true
}

// create starts the session of a thread on r for u's request text (a
// session made before with the thread's id is taken as it is), records
// the thread and watches it.
func (b *Bot) create(ctx context.Context, m message, u *store.User, r repo, rootTS, text string) {
	if text == "" {
		text = "Hello"
	}
	id := b.sessionID(m.channel, rootTS)
	_, err := b.cfg.Sessions.Create(ctx, Owner, session.CreateRequest{
		ID: id, User: u.ID, Title: title(text), Repos: []session.RepoSpec{r.spec}, Prompt: text,
		PromptKey: "slack:" + m.channel + ":" + m.ts, Agent: b.cfg.Agent, Model: b.cfg.Model,
	})
	if err != nil && !errors.Is(err, store.ErrConflict) { // a session with this id: made before
		b.log.Warn("starting a session from Slack", "channel", m.channel, "ts", m.ts, "err", err)
		b.say(ctx, m.channel, rootTS, "I couldn't start working on that: "+err.Error())
		b.swap(ctx, m.channel, m.ts, "x")
		return
	}
	th := &store.SlackThread{Session: id, Team: b.team, Channel: m.channel, ThreadTS: rootTS, User: m.user}
	if err := b.st.PutSlackThread(ctx, th); err != nil && !errors.Is(err, store.ErrConflict) {
		b.log.Error("recording a session's thread", "session", id, "err", err)
		return
	}
	b.audit(ctx, store.AuditEntry{User: u.ID, Action: "session.create", Target: id, Result: "ok"},
		map[string]any{"slack_user": m.user, "channel": m.channel, "ts": m.ts, "repo": r.name})
	b.watchIfOwner(ctx, th)
}

// followUp sends a thread's reply to its session.
func (b *Bot) followUp(ctx context.Context, id string, m message) {
	u, ok := b.asker(ctx, m)
	if !ok {
		return
	}
	s, err := b.st.GetSession(ctx, id)
	if err != nil {
		b.log.Error("reading a thread's session", "session", id, "err", err)
		return
	}
	if lvl, err := b.cfg.Access.For(authz.Subject{User: u.ID, Role: u.Role}).Session(ctx, s); err != nil || lvl < authz.Write {
		why := "steering this session needs write access to its repository (ask whoever started it, or a Harvest admin)"
		if err != nil {
			why = "your access could not be checked (" + err.Error() + ")"
		}
		b.refuse(ctx, m, u, id, why)
		return
	}
	if s.State.Ended() {
		b.say(ctx, m.channel, m.threadTS, "This session has ended ("+string(s.State)+"). Mention me in a new message to start another.")
		return
	}
	b.react(ctx, m.channel, m.ts, "eyes")
	// The key names the Slack message: the watcher marks it at the turn's
	// end (triggerOf), on whichever node watches then.
	_, err = b.cfg.Sessions.SendMessage(ctx, Owner, id, session.Outgoing{Text: b.stripMentions(m.text), Key: "slack:" + m.channel + ":" + m.ts, Sender: Owner})
	if err != nil {
		b.say(ctx, m.channel, m.threadTS, "I couldn't pass that on: "+err.Error())
		b.swap(ctx, m.channel, m.ts, "x")
		return
	}
	b.audit(ctx, store.AuditEntry{User: u.ID, Action: "session.message", Target: id, Result: "ok"},
		map[string]any{"slack_user": m.user, "channel": m.channel, "ts": m.ts})
	if th, err := b.st.SlackThread(ctx, id); err == nil {
		b.watchIfOwner(ctx, th) // after a restart, or a watcher that ended
	}
}

// asker is the user of a message's sender; an unknown or disabled one
// is told so (ephemerally) and false returned. An unknown person's
// replies in a thread (and clicks there) get the how-to-link note once
// per thread (firstNote); their mentions get it each time.
func (b *Bot) asker(ctx context.Context, m message) (*store.User, bool) {
	u, err := b.user(ctx, m.user)
	switch {
	case errors.Is(err, errUnlinked):
		if b.firstNote(m) {
			b.ephemeral(ctx, m.channel, m.user, m.threadTS, b.linkHelp(ctx, err))
		}
		b.audit(ctx, store.AuditEntry{Action: "slack.refuse", Target: m.channel, Result: "unlinked"},
			map[string]any{"slack_user": m.user, "channel": m.channel, "ts": m.ts})
		return nil, false
	case err != nil:
		b.log.Error("finding the user of a Slack account", "slack_user", m.user, "err", err)
		b.ephemeral(ctx, m.channel, m.user, m.threadTS, "I couldn't look you up just now; please try again in a minute.")
		return nil, false
	case u.Disabled:
		b.refuse(ctx, m, u, m.channel, "your Harvest user is disabled")
		return nil, false
	}
	return u, true
}

// maxNoted bounds the thread-and-person pairs remembered as told.
const maxNoted = 10000

// firstNote says whether an unknown person should be told how to link
// their account now: at every mention, and at their first reply (or
// click) in a thread since the app started.
func (b *Bot) firstNote(m message) bool {
	if m.threadTS == "" || m.mention {
		return true
	}
	key := b.threadKey(m.channel, m.threadTS) + "/" + m.user
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.noted[key] {
		return false
	}
	if b.noted == nil || len(b.noted) >= maxNoted {
		b.noted = map[string]bool{} // forgetting means one more note, no harm
	}
	b.noted[key] = true
	return true
}

// refuse tells the person, politely, that they may not, and records it.
func (b *Bot) refuse(ctx context.Context, m message, u *store.User, target, why string) {
	b.unreact(ctx, m.channel, m.ts, "eyes")
	b.ephemeral(ctx, m.channel, m.user, m.threadTS, "Sorry, I can't do that for you: "+why+".")
	b.audit(ctx, store.AuditEntry{User: u.ID, Action: "slack.refuse", Target: target, Result: "forbidden"},
		map[string]any{"slack_user": m.user, "channel": m.channel, "ts": m.ts, "why": why})
}

// title is a session's title: the request's first line, cut.
func title(text string) string {
	t, _, _ := strings.Cut(text, "\n")
	if r := []rune(t); len(r) > 80 {
		t = string(r[:79]) + "…"
	}
	return t
}

// say posts text in a thread.
func (b *Bot) say(ctx context.Context, channel, threadTS, text string) string {
	var ts string
	err := b.rate.call(ctx, func(ctx context.Context) error {
		var err error
		_, ts, err = b.api.PostMessageContext(ctx, channel, slack.MsgOptionText(text, false), slack.MsgOptionTS(threadTS))
		return err
	})
	if err != nil {
		b.log.Warn("posting in a thread", "channel", channel, "err", err)
	}
	return ts
}

// ephemeral shows text to one person.
func (b *Bot) ephemeral(ctx context.Context, channel, user, threadTS, text string) {
	opts := []slack.MsgOption{slack.MsgOptionText(text, false)}
	if threadTS != "" {
		opts = append(opts, slack.MsgOptionTS(threadTS))
	}
	err := b.rate.call(ctx, func(ctx context.Context) error {
		_, err := b.api.PostEphemeralContext(ctx, channel, user, opts...)
		return err
	})
	if err != nil {
		b.log.Warn("posting an ephemeral message", "channel", channel, "err", err)
	}
}

// react adds a reaction (one already there is fine).
func (b *Bot) react(ctx context.Context, channel, ts, name string) {
	err := b.rate.call(ctx, func(ctx context.Context) error {
		return b.api.AddReactionContext(ctx, name, slack.NewRefToMessage(channel, ts))
	})
	if err != nil && err.Error() != "already_reacted" {
		b.log.Warn("adding a reaction", "name", name, "err", err)
	}
}

// unreact removes a reaction (one not there is fine).
func (b *Bot) unreact(ctx context.Context, channel, ts, name string) {
	err := b.rate.call(ctx, func(ctx context.Context) error {
		return b.api.RemoveReactionContext(ctx, name, slack.NewRefToMessage(channel, ts))
	})
	if err != nil && err.Error() != "no_reaction" {
		b.log.Warn("removing a reaction", "name", name, "err", err)
	}
}

// swap replaces 👀 with name.
func (b *Bot) swap(ctx context.Context, channel, ts, name string) {
	b.unreact(ctx, channel, ts, "eyes")
	b.react(ctx, channel, ts, name)
}
