package slackbot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/store"
)

// Buttons' action ids.
const (
	actionStop = "harvest-stop" // value: the session
	actionOpen = "harvest-open" // a link: Slack opens it, the app only acks
	actionPR   = "harvest-pr"
)

// # /harvest
//
//	/harvest status      your live sessions Slack started, with their state
//	/harvest list        your latest sessions Slack started
//	/harvest stop [ID]   stop the running turn of a session (default: your
//	                     working ones in this channel)
//	/harvest repo [NAME] this channel's default repository (set it with NAME)
//	/harvest help
//
// The answer is ephemeral, in the command's acknowledgement (within
// Slack's 3 s: every command reads the store only; stop cancels in the
// background).

const commandHelp = "`/harvest status` — your live sessions · `/harvest list` — your latest sessions · " +
	"`/harvest stop [SESSION]` — stop a running turn · `/harvest repo [NAME]` — this channel's default repository"

// command answers a slash command.
func (b *Bot) command(ctx context.Context, c slack.SlashCommand) string {
	u, err := b.user(ctx, c.UserID)
	if errors.Is(err, errUnlinked) {
		return b.linkHelp(ctx, err)
	}
	if err != nil {
		return "I couldn't look you up just now; please try again in a minute."
	}
	if u.Disabled {
		return "Your Harvest user is disabled."
	}
	verb, arg, _ := strings.Cut(strings.TrimSpace(c.Text), " ")
	arg = strings.TrimSpace(arg)
	switch verb {
	case "status":
		return b.listText(ctx, u, true)
	case "list":
		return b.listText(ctx, u, false)
	case "stop":
		return b.stopCommand(ctx, u, c, arg)
	case "repo":
		return b.repoCommand(ctx, u, c, arg)
	case "", "help":
		return commandHelp
	}
	return "I don't know `" + verb + "`. " + commandHelp
}

var liveStates = []store.State{store.StatePending, store.StateProvisioning, store.StateIdle, store.StateWorking,
	store.StateWaiting, store.StateCancelling, store.StateSuspended}

func (b *Bot) listText(ctx context.Context, u *store.User, live bool) string {
	f := store.SessionFilter{Owner: Owner, User: u.ID, Limit: 10}
	if live {
		f.States = liveStates
	}
	ss, err := b.st.ListSessions(ctx, f)
	if err != nil {
		return "I couldn't read your sessions just now: " + err.Error()
	}
	if len(ss) == 0 {
		if live {
			return "You have no live sessions from Slack. Mention me with a request to start one."
		}
		return "You have no sessions from Slack yet."
	}
	var sb strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&sb, "• `%s` %s — %s", s.ID, s.State, s.Title)
		if th, err := b.st.SlackThread(ctx, s.ID); err == nil {
			fmt.Fprintf(&sb, " (<#%s>)", th.Channel)
		}
		if b.cfg.PublicURL != "" {
			fmt.Fprintf(&sb, " <%s/sessions/%s|open>", strings.TrimSuffix(b.cfg.PublicURL, "/"), s.ID)
		}
		sb.WriteString("\n")
	}
	return strings.TrimSpace(sb.String())
}

func (b *Bot) stopCommand(ctx context.Context, u *store.User, c slack.SlashCommand, id string) string {
	var targets []*store.Session
	if id != "" {
		s, err := b.st.GetSession(ctx, id)
		if err != nil || s.Owner != Owner {
			return "There is no session `" + id + "` from Slack."
		}
		targets = append(targets, s)
	} else {
		ss, err := b.st.ListSessions(ctx, store.SessionFilter{Owner: Owner, User: u.ID, States: []store.State{store.StateWorking, store.StateWaiting}})
		if err != nil {
			return "I couldn't read your sessions just now: " + err.Error()
		}
		for _, s := range ss {
			if th, err := b.st.SlackThread(ctx, s.ID); err == nil && th.Channel == c.ChannelID {
				targets = append(targets, s)
			}
		}
		if len(targets) == 0 {
			return "None of your sessions in this channel is working."
		}
	}
	var stopped []string
	for _, s := range targets {
		if why := b.stop(ctx, u, s, c.UserID); why != "" {
			return why
		}
		stopped = append(stopped, "`"+s.ID+"`")
	}
	return "Stopping " + strings.Join(stopped, ", ") + "."
}

// stop cancels a session's turn in the background for u; the refusal
// when they may not ("" when it is under way).
func (b *Bot) stop(ctx context.Context, u *store.User, s *store.Session, slackUser string) string {
	lvl, err := b.cfg.Access.For(authz.Subject{User: u.ID, Role: u.Role}).Session(ctx, s)
	if err != nil {
		return "I couldn't check your access just now: " + err.Error()
	}
	if lvl < authz.Write {
		b.audit(ctx, store.AuditEntry{User: u.ID, Action: "slack.refuse", Target: s.ID, Result: "forbidden"},
			map[string]any{"slack_user": slackUser, "why": "stop: no write access"})
		return "Sorry, you may not stop session `" + s.ID + "`."
	}
	b.audit(ctx, store.AuditEntry{User: u.ID, Action: "session.cancel", Target: s.ID, Result: "ok"}, map[string]any{"slack_user": slackUser})
	id := s.ID
	b.goFn(func() {
		cctx, cancel := context.WithTimeout(b.ctx, time.Minute)
		defer cancel()
		if err := b.cfg.Sessions.Cancel(cctx, Owner, id); err != nil && b.ctx.Err() == nil {
			b.log.Warn("stopping a session's turn", "session", id, "err", err)
		}
	})
	return ""
}

func (b *Bot) repoCommand(ctx context.Context, u *store.User, c slack.SlashCommand, name string) string {
	if name == "" {
		ch, err := b.st.SlackChannel(ctx, b.team, c.ChannelID)
		if errors.Is(err, store.ErrNotFound) {
			return "This channel has no default repository. " + b.howToName()
		}
		if err != nil {
			return "I couldn't read this channel's default just now: " + err.Error()
		}
		return "This channel's default repository is `" + ch.Repo + "`."
	}
	r, ok := b.lookupRepo(strings.Trim(name, "`"))
	if !ok {
		return "`" + name + "` is no repository I can use. " + b.howToName()
	}
	refusal, err := b.cfg.Access.For(authz.Subject{User: u.ID, Role: u.Role}).Start(ctx, []authz.RepoRef{r.ref})
	if err != nil {
		return "I couldn't check your access to " + r.name + " just now: " + err.Error()
	}
	if refusal != nil {
		return "Sorry, you can't make " + r.name + " this channel's default: " + refusal.Error() + "."
	}
	if err := b.st.SetSlackChannel(ctx, &store.SlackChannel{Team: b.team, Channel: c.ChannelID, Repo: r.name, SetBy: u.ID}); err != nil {
		return "I couldn't record it just now: " + err.Error()
	}
	b.audit(ctx, store.AuditEntry{User: u.ID, Action: "slack.repo", Target: c.ChannelID, Result: "ok"}, map[string]any{"slack_user": c.UserID, "repo": r.name})
	return "This channel's default repository is now `" + r.name + "`: mention me with a request and I'll work there."
}

// interaction handles a click: Stop, a repository picker's choice
// (picker.go); the others are links.
func (b *Bot) interaction(ctx context.Context, cb slack.InteractionCallback) {
	if cb.Type != slack.InteractionTypeBlockActions {
		return
	}
	for _, a := range cb.ActionCallback.BlockActions {
		if a.ActionID == actionPick {
			b.pick(ctx, cb, a)
			continue
		}
		if a.ActionID != actionStop {
			continue
		}
		m := message{channel: cb.Channel.ID, user: cb.User.ID, threadTS: cb.Message.ThreadTimestamp}
		u, ok := b.asker(ctx, m)
		if !ok {
			return
		}
		s, err := b.st.GetSession(ctx, a.Value)
		if err != nil || s.Owner != Owner {
			b.ephemeral(ctx, m.channel, m.user, m.threadTS, "That session is gone.")
			continue
		}
		if why := b.stop(ctx, u, s, m.user); why != "" {
			b.ephemeral(ctx, m.channel, m.user, m.threadTS, why)
		}
	}
}
