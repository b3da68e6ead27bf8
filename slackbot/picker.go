package slackbot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/slack-go/slack"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/store"
)

// # The repository picker
//
// A request that names no repository, in a channel with no default, is
// answered in its thread with a picker: a static_select of the
// repositories the person may start a session on (the directories under
// the repository roots whose policy lets them write; the first
// MaxChoices by name, with a note saying how many more there are and how
// to name one). Choosing one (a block_actions click, over Socket Mode or
// HTTP) starts the session of the thread for the request, as the person
// who asked, and edits the picker to say so.
//
// Nothing is kept for the picker: its block_id carries the ts of the
// message that asked, and at the click the request is read back from
// Slack (conversations.replies): its words, and its author, who alone
// may choose (anyone else is told so, ephemerally). So a picker works
// after a restart, and a forged block_id can only point at a message
// whose author is the one clicking. The session's id derives from the
// thread, as a mention's: a second click, or a click after a mention
// naming a repository in the thread started it, starts nothing more.
//
// With a GitHub App, the GitHub repositories its installations cover
// that the person may use are listed too (picker_github.go), as
// owner/name, in an option group "GitHub" before one of "Directories"
// (groups only when both have some). A reply in the thread that
// mentions the app and names owner/name also starts the session there.

// MaxChoices is the most options a picker lists (Slack's limit for a
// static_select).
const MaxChoices = 100

// maxScan bounds how many directories a picker looks at.
const maxScan = 1000

const (
	actionPick = "harvest-repo"  // a static_select: the option's value is the repository's name
	pickBlock  = "harvest-pick:" // + the ts of the message that asked
)

// tsForm is a message's ts as Slack writes it.
var tsForm = regexp.MustCompile(`^[0-9]{1,12}\.[0-9]{1,9}$`)

// choices are the names of the directories u may start a session on,
// sorted.
func (b *Bot) choices(ctx context.Context, u *store.User) (names []string, err error) {
	chk := b.cfg.Access.For(authz.Subject{User: u.ID, Role: u.Role})
	seen := map[string]bool{}
	scanned := 0
	for _, root := range b.cfg.RepoRoots {
		es, err := os.ReadDir(root)
		if err != nil {
			b.log.Warn("listing a repository root for a picker", "root", root, "err", err)
			continue
		}
		for _, e := range es {
			name := e.Name()
			if !e.IsDir() || seen[name] || !dirName.MatchString(name) || scanned == maxScan {
				continue
			}
			scanned++
			seen[name] = true
			r, ok := b.lookupRepo(name) // the first root's, as a message naming it gets
			if !ok {
				continue
			}
			refusal, err := chk.Start(ctx, []authz.RepoRef{r.ref})
			if err != nil {
				return nil, err
			}
			if refusal == nil {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// offerRepos answers a request that names no repository with a picker
// in its thread (or says why there is none).
func (b *Bot) offerRepos(ctx context.Context, m message, u *store.User, rootTS string) {
	chk := b.cfg.Access.For(authz.Subject{User: u.ID, Role: u.Role})
	if refusal, err := chk.Start(ctx, nil); err == nil && refusal != nil {
		b.refuse(ctx, m, u, m.channel, refusal.Error()) // a viewer: no repository would do
		return
	}
	names, err := b.choices(ctx, u)
	if err != nil {
		b.say(ctx, m.channel, rootTS, "I couldn't check which repositories you may use just now ("+err.Error()+"). Please try again in a minute.")
		return
	}
	ghNames, ghNote := b.ghChoices(ctx, u)
	if len(names) == 0 && len(ghNames) == 0 {
		text := "I found no repository here you may start a session on. " + b.howToName()
		if ghNote != "" {
			text = ghNote + " " + b.howToName()
		}
		b.say(ctx, m.channel, rootTS, text)
		return
	}
	nGH, nDir := split(len(ghNames), len(names))
	more := len(names) - nDir
	ask := fmt.Sprintf("Which repository should I work in, <@%s>? Choose one", m.user)
	if b.cfg.GitHub {
		ask += ", or mention me in this thread naming a GitHub repository as `owner/name`"
	}
	ask += "."
	var sel *slack.SelectBlockElement
	placeholder := slack.NewTextBlockObject(slack.PlainTextType, "Choose a repository", false, false)
	if nGH > 0 && nDir > 0 {
		sel = slack.NewOptionsGroupSelectBlockElement(slack.OptTypeStatic, placeholder, actionPick,
			slack.NewOptionGroupBlockElement(slack.NewTextBlockObject(slack.PlainTextType, "GitHub", false, false), options(ghNames[:nGH])...),
			slack.NewOptionGroupBlockElement(slack.NewTextBlockObject(slack.PlainTextType, "Directories", false, false), options(names[:nDir])...))
	} else {
		sel = slack.NewOptionsSelectBlockElement(slack.OptTypeStatic, placeholder, actionPick, options(append(ghNames[:nGH:nGH], names[:nDir]...))...)
	}
	blocks := []slack.Block{
		slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, ask, false, false), nil, nil),
		slack.NewActionBlock(pickBlock+m.ts, sel),
	}
	var notes []string
	if n := len(ghNames) - nGH; n > 0 {
		notes = append(notes, strconv.Itoa(n)+" more GitHub repositories are not listed (a picker shows "+strconv.Itoa(MaxChoices)+
			"): name one as `owner/name` in a reply that mentions me.")
	}
	if ghNote != "" {
		notes = append(notes, ghNote)
	}
	if more > 0 {
		notes = append(notes, strconv.Itoa(more)+" more are not listed (a picker shows "+strconv.Itoa(MaxChoices)+
			"): name one in a reply that mentions me, or set this channel's default with `/harvest repo NAME`.")
	}
	if len(notes) > 0 {
		blocks = append(blocks, slack.NewContextBlock("harvest-more", slack.NewTextBlockObject(slack.MarkdownType, strings.Join(notes, "\n"), false, false)))
	}
	err = b.rate.call(ctx, func(ctx context.Context) error {
		_, _, err := b.api.PostMessageContext(ctx, m.channel, slack.MsgOptionText("Which repository? Choose one in the picker.", false),
			slack.MsgOptionBlocks(blocks...), slack.MsgOptionTS(rootTS))
		return err
	})
	if err != nil {
		b.log.Warn("posting a repository picker", "channel", m.channel, "err", err)
	}
}

// options are a picker's options: the value is the name, the text the
// name cut to a plain_text option's 75 characters.
func options(names []string) []*slack.OptionBlockObject {
	opts := make([]*slack.OptionBlockObject, len(names))
	for i, n := range names {
		label := n
		if r := []rune(label); len(r) > 75 {
			label = string(r[:74]) + "…"
		}
		opts[i] = slack.NewOptionBlockObject(n, slack.NewTextBlockObject(slack.PlainTextType, label, false, false), nil)
	}
	return opts
}

// pick handles a choice in a picker.
func (b *Bot) pick(ctx context.Context, cb slack.InteractionCallback, a *slack.BlockAction) {
	channel, clicker, pickerTS := cb.Channel.ID, cb.User.ID, cb.Message.Timestamp
	rootTS := cb.Message.ThreadTimestamp
	if rootTS == "" {
		rootTS = cb.Container.ThreadTs
	}
	askedTS, ok := strings.CutPrefix(a.BlockID, pickBlock)
	if !ok || !tsForm.MatchString(askedTS) || !tsForm.MatchString(rootTS) || channel == "" || clicker == "" {
		b.log.Warn("a repository choice that names no request", "block", a.BlockID, "thread", rootTS, "channel", channel)
		return
	}
	unlock := b.lockThread(b.threadKey(channel, rootTS))
	defer unlock()
	if _, err := b.st.SlackThread(ctx, b.sessionID(channel, rootTS)); err == nil {
		// A second click, a choice after a mention named one: started.
		b.ephemeral(ctx, channel, clicker, rootTS, "I'm already working on this request: follow it in this thread.")
		return
	} else if !errors.Is(err, store.ErrNotFound) {
		b.log.Error("finding a thread's session", "err", err)
		return
	}
	asked, err := b.request(ctx, channel, rootTS, askedTS)
	if err != nil {
		b.log.Warn("reading the request of a picker", "channel", channel, "ts", askedTS, "err", err)
		b.ephemeral(ctx, channel, clicker, rootTS, "I couldn't read the request this picker answers ("+err.Error()+"); mention me with it again, naming the repository.")
		return
	}
	if asked.User != clicker {
		b.ephemeral(ctx, channel, clicker, rootTS, "Only <@"+asked.User+"> can choose the repository for their request. Mention me with your own to start one.")
		b.audit(ctx, store.AuditEntry{Action: "slack.refuse", Target: channel, Result: "forbidden"},
			map[string]any{"slack_user": clicker, "channel": channel, "ts": askedTS, "why": "a picker of another person's request"})
		return
	}
	m := message{channel: channel, ts: askedTS, threadTS: rootTS, user: clicker, text: asked.Text, mention: true}
	u, ok := b.asker(ctx, m)
	if !ok {
		return
	}
	r, ok := b.lookupRepo(a.SelectedOption.Value)
	if !ok {
		b.ephemeral(ctx, channel, clicker, rootTS, "`"+a.SelectedOption.Value+"` is no repository I can use now. "+b.howToName())
		return
	}
	b.react(ctx, channel, askedTS, "eyes")
	if !b.mayStart(ctx, m, u, r, rootTS) {
		return
	}
	b.editPicker(ctx, channel, pickerTS, "Starting on `"+r.name+"`…")
	b.create(ctx, m, u, r, rootTS, b.stripMentions(asked.Text))
}

// request reads the message ts of a thread back from Slack.
func (b *Bot) request(ctx context.Context, channel, rootTS, ts string) (*slack.Message, error) {
	p := &slack.GetConversationRepliesParameters{ChannelID: channel, Timestamp: rootTS, Oldest: ts, Latest: ts, Inclusive: true, Limit: 200}
	for range 20 {
		var msgs []slack.Message
		var more bool
		var next string
		err := b.rate.call(ctx, func(ctx context.Context) error {
			var err error
			msgs, more, next, err = b.api.GetConversationRepliesContext(ctx, p)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("conversations.replies: %w", err)
		}
		for i := range msgs {
			if msgs[i].Timestamp == ts {
				return &msgs[i], nil
			}
		}
		if !more || next == "" {
			break
		}
		p.Cursor = next
	}
	return nil, errors.New("the message is gone")
}

// editPicker replaces a picker with text.
func (b *Bot) editPicker(ctx context.Context, channel, ts, text string) {
	err := b.rate.edit(ctx, channel, func(ctx context.Context) error {
		_, _, _, err := b.api.UpdateMessageContext(ctx, channel, ts, slack.MsgOptionText(text, false),
			slack.MsgOptionBlocks(slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil)))
		return err
	})
	if err != nil {
		b.log.Warn("editing a repository picker", "channel", channel, "err", err)
	}
}
