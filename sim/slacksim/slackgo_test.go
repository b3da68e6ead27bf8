package slacksim_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"

	"github.com/harvest-dev/harvest/sim/slacksim"
)

// slackGoApp is a small app written with slack-go, the library
// Harvest's Slack app uses: over Socket Mode it answers a mention in
// its thread (👀, a reply with a Stop button, then an edit), a thread
// reply and a direct message; a Stop click answers on its response_url,
// opens a modal, swaps 👀 for ❌ and edits the reply; /harvest answers in
// its ack.
type slackGoApp struct {
	t      *testing.T
	api    *slack.Client
	client *socketmode.Client
	errs   chan error
	done   chan string // what each handled envelope was
}

func startSlackGoApp(t *testing.T, ctx context.Context, w *world) *slackGoApp {
	api := slack.New(w.tok.Bot, slack.OptionAPIURL(w.srv.APIURL()), slack.OptionAppLevelToken(w.tok.App))
	a := &slackGoApp{t: t, api: api, client: socketmode.New(api), errs: make(chan error, 16), done: make(chan string, 64)}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := a.client.RunContext(ctx); err != nil && !errors.Is(err, context.Canceled) {
			a.errs <- err
		}
	}()
	go func() {
		defer wg.Done()
		a.loop(ctx)
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return a
}

func (a *slackGoApp) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case evt := <-a.client.Events:
			if err := a.handle(ctx, evt); err != nil {
				a.errs <- err
			}
		}
	}
}

func (a *slackGoApp) handle(ctx context.Context, evt socketmode.Event) error {
	switch evt.Type {
	case socketmode.EventTypeHello:
		a.done <- "hello"
	case socketmode.EventTypeEventsAPI:
		a.client.Ack(*evt.Request)
		ev := evt.Data.(slackevents.EventsAPIEvent)
		switch in := ev.InnerEvent.Data.(type) {
		case *slackevents.AppMentionEvent:
			if err := a.api.AddReactionContext(ctx, "eyes", slack.NewRefToMessage(in.Channel, in.TimeStamp)); err != nil {
				return err
			}
			stop := slack.NewButtonBlockElement("stop", "turn-1", slack.NewTextBlockObject("plain_text", "Stop", false, false))
			blocks := slack.MsgOptionBlocks(
				slack.NewSectionBlock(slack.NewTextBlockObject("mrkdwn", "Working on it", false, false), nil, nil),
				slack.NewActionBlock("controls", stop))
			ch, ts, err := a.api.PostMessageContext(ctx, in.Channel, slack.MsgOptionText("Working on it", false), blocks, slack.MsgOptionTS(in.TimeStamp))
			if err != nil {
				return err
			}
			if _, _, _, err := a.api.UpdateMessageContext(ctx, ch, ts, slack.MsgOptionText("Step 1 of 2", false), blocks); err != nil {
				return err
			}
			if _, err := a.api.GetPermalinkContext(ctx, &slack.PermalinkParameters{Channel: ch, Ts: ts}); err != nil {
				return err
			}
			if _, _, _, err := a.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: ch, Timestamp: in.TimeStamp}); err != nil {
				return err
			}
			u, err := a.api.GetUserInfoContext(ctx, in.User)
			if err != nil {
				return err
			}
			if _, err := a.api.PostEphemeralContext(ctx, ch, in.User, slack.MsgOptionText("hello "+u.Profile.Email, false)); err != nil {
				return err
			}
			a.done <- "mention:" + ts
		case *slackevents.MessageEvent:
			if in.BotID != "" || in.SubType != "" {
				a.done <- "ignored"
				return nil // our own messages and edits
			}
			if in.ThreadTimeStamp != "" || in.ChannelType == "im" {
				ts := in.ThreadTimeStamp
				if ts == "" {
					ts = in.TimeStamp
				}
				opts := []slack.MsgOption{slack.MsgOptionText("got: "+in.Text, false), slack.MsgOptionTS(ts)}
				if in.ChannelType == "im" { // which repository? a picker
					pick := slack.NewOptionsSelectBlockElement(slack.OptTypeStatic, slack.NewTextBlockObject("plain_text", "Repository", false, false), "repo",
						slack.NewOptionBlockObject("acme/widget", slack.NewTextBlockObject("plain_text", "acme/widget", false, false), nil),
						slack.NewOptionBlockObject("acme/gadget", slack.NewTextBlockObject("plain_text", "acme/gadget", false, false), nil))
					opts = append(opts, slack.MsgOptionBlocks(slack.NewActionBlock("pick", pick)))
				}
				if _, _, err := a.api.PostMessageContext(ctx, in.Channel, opts...); err != nil {
					return err
				}
				a.done <- "reply:" + in.ChannelType
				return nil
			}
			a.done <- "message"
		default:
			a.done <- "other:" + ev.InnerEvent.Type
		}
	case socketmode.EventTypeInteractive:
		cb := evt.Data.(slack.InteractionCallback)
		a.client.Ack(*evt.Request)
		if cb.Type != slack.InteractionTypeBlockActions || len(cb.ActionCallback.BlockActions) != 1 {
			return errors.New("unexpected interaction")
		}
		act := cb.ActionCallback.BlockActions[0]
		if act.Type == "static_select" {
			a.done <- "picked:" + act.ActionID + ":" + act.SelectedOption.Value
			return nil
		}
		modal := slack.ModalViewRequest{Type: slack.VTModal, Title: slack.NewTextBlockObject("plain_text", "Stopped", false, false),
			Blocks: slack.Blocks{BlockSet: []slack.Block{slack.NewSectionBlock(slack.NewTextBlockObject("mrkdwn", "Turn "+act.Value+" stopped", false, false), nil, nil)}}}
		if _, err := a.api.OpenViewContext(ctx, cb.TriggerID, modal); err != nil {
			return err
		}
		if err := slack.PostWebhookContext(ctx, cb.ResponseURL, &slack.WebhookMessage{Text: "Stopping " + act.Value}); err != nil {
			return err
		}
		parent := slack.NewRefToMessage(cb.Channel.ID, cb.Message.ThreadTimestamp)
		if err := a.api.RemoveReactionContext(ctx, "eyes", parent); err != nil {
			return err
		}
		if err := a.api.AddReactionContext(ctx, "x", parent); err != nil {
			return err
		}
		if _, _, _, err := a.api.UpdateMessageContext(ctx, cb.Channel.ID, cb.Message.Timestamp, slack.MsgOptionText("Stopped by "+cb.User.Name, false), slack.MsgOptionBlocks()); err != nil {
			return err
		}
		a.done <- "click:" + act.ActionID + ":" + act.Value
	case socketmode.EventTypeSlashCommand:
		cmd := evt.Data.(slack.SlashCommand)
		a.client.Ack(*evt.Request, map[string]any{"text": "status: idle (" + cmd.Text + ")"})
		a.done <- "command:" + cmd.Command
	}
	return nil
}

func (a *slackGoApp) want(t *testing.T, ctx context.Context, prefix string) string {
	t.Helper()
	for {
		select {
		case got := <-a.done:
			if strings.HasPrefix(got, prefix) {
				return got
			}
		case err := <-a.errs:
			t.Fatalf("app: %v", err)
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", prefix, ctx.Err())
		}
	}
}

// TestSlackGo: slack-go's Web API client and its Socket Mode client, as
// Harvest's app will use them, against the stand-in; every exchange
// validates against Slack's descriptions.
func TestSlackGo(t *testing.T) {
	w := newWorld(t, slacksim.Options{})
	ctx := ctxT(t)
	api := slack.New(w.tok.Bot, slack.OptionAPIURL(w.srv.APIURL()))
	auth, err := api.AuthTestContext(ctx)
	if err != nil || auth.UserID != w.tok.BotUserID || auth.BotID != w.tok.BotID || auth.TeamID != w.tok.TeamID {
		t.Fatalf("auth.test: %+v %v", auth, err)
	}
	info, err := api.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: w.general.ID, IncludeNumMembers: true})
	if err != nil || info.Name != "general" || !info.IsMember || info.NumMembers != 3 {
		t.Fatalf("conversations.info: %+v %v", info, err)
	}
	if _, err := api.GetUserInfoContext(ctx, "U404"); err == nil || err.Error() != "user_not_found" {
		t.Errorf("users.info of nobody: %v", err)
	}
	if _, _, err := slack.New("xoxb-wrong", slack.OptionAPIURL(w.srv.APIURL())).PostMessageContext(ctx, w.general.ID, slack.MsgOptionText("x", false)); err == nil || err.Error() != "invalid_auth" {
		t.Errorf("a wrong token: %v", err)
	}

	app := startSlackGoApp(t, ctx, w)
	app.want(t, ctx, "hello")

	// A mention: 👀, a reply in the thread, edited; the person's email.
	m, err := w.srv.Post(slacksim.PostSpec{User: w.alice.ID, Channel: w.general.ID, Text: w.mention() + " fix acme/widget"})
	if err != nil {
		t.Fatal(err)
	}
	replyTS := strings.TrimPrefix(app.want(t, ctx, "mention:"), "mention:")
	got, _ := w.srv.Message(w.general.ID, m.TS)
	if len(got.Reactions) != 1 || got.Reactions[0].Name != "eyes" || got.Reactions[0].Users[0] != w.tok.BotUserID {
		t.Errorf("reactions on the mention: %+v", got.Reactions)
	}
	thread := w.srv.Thread(w.general.ID, m.TS)
	if len(thread) != 2 || thread[1].TS != replyTS || thread[1].Text != "Step 1 of 2" || thread[1].Edits != 1 || thread[1].BotID != w.tok.BotID {
		t.Fatalf("thread: %+v", thread)
	}
	if eph := w.srv.Ephemerals(); len(eph) != 1 || eph[0].User != w.alice.ID || eph[0].Text != "hello alice@example.com" {
		t.Errorf("ephemerals: %+v", eph)
	}

	// A reply in the thread is a message event with thread_ts.
	if _, err := w.srv.Post(slacksim.PostSpec{User: w.alice.ID, Channel: w.general.ID, Text: "also the docs", ThreadTS: m.TS}); err != nil {
		t.Fatal(err)
	}
	app.want(t, ctx, "reply:channel")
	if th := w.srv.Thread(w.general.ID, m.TS); len(th) != 4 || th[3].Text != "got: also the docs" {
		t.Errorf("thread after the reply: %+v", th)
	}

	// Stop: block_actions, views.open with its trigger_id, an edit (a
	// second later: chat.update is held to about one a second per channel).
	w.clock.Advance(time.Second)
	if err := w.srv.Click(slacksim.ClickSpec{User: w.alice.ID, Channel: w.general.ID, TS: replyTS, ActionID: "stop"}); err != nil {
		t.Fatal(err)
	}
	if got := app.want(t, ctx, "click:"); got != "click:stop:turn-1" {
		t.Errorf("click: %s", got)
	}
	if v := w.srv.Views(); len(v) != 1 || v[0].User != w.alice.ID {
		t.Errorf("views: %+v", v)
	}
	if r, _ := w.srv.Message(w.general.ID, replyTS); r.Text != "Stopped by alice" || r.Blocks != nil {
		t.Errorf("after stop: %+v", r)
	}
	if p, _ := w.srv.Message(w.general.ID, m.TS); len(p.Reactions) != 1 || p.Reactions[0].Name != "x" {
		t.Errorf("reactions after stop: %+v", p.Reactions)
	}

	// A slash command, answered in its ack.
	if err := w.srv.Command(slacksim.CommandSpec{User: w.bob.ID, Channel: w.general.ID, Command: "/harvest", Text: "status"}); err != nil {
		t.Fatal(err)
	}
	app.want(t, ctx, "command:/harvest")
	if _, err := w.srv.WaitEnvelopes(ctx); err != nil {
		t.Fatal(err)
	}
	if eph := w.srv.Ephemerals(); len(eph) != 3 || eph[1].Text != "Stopping turn-1" || eph[1].Via != "response_url" || eph[1].User != w.alice.ID ||
		eph[2].User != w.bob.ID || eph[2].Text != "status: idle (status)" || eph[2].Via != "ack" {
		t.Errorf("the command's answer: %+v", eph)
	}

	// A direct message.
	im, err := w.srv.OpenIM(w.bob.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.srv.Post(slacksim.PostSpec{User: w.bob.ID, Channel: im.ID, Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	app.want(t, ctx, "reply:im")
	th := w.srv.Messages(im.ID)
	if len(th) != 1 || len(th[0].Replies) != 1 {
		t.Fatalf("the direct messages: %+v", th)
	}
	picker := th[0].Replies[0]
	if err := w.srv.Click(slacksim.ClickSpec{User: w.bob.ID, Channel: im.ID, TS: picker, ActionID: "repo", Value: "acme/nothing"}); err == nil {
		t.Error("an option the picker does not offer was chosen")
	}
	if err := w.srv.Click(slacksim.ClickSpec{User: w.bob.ID, Channel: im.ID, TS: picker, ActionID: "repo", Value: "acme/gadget"}); err != nil {
		t.Fatal(err)
	}
	if got := app.want(t, ctx, "picked:"); got != "picked:repo:acme/gadget" {
		t.Errorf("picked: %s", got)
	}

	es, err := w.srv.WaitEnvelopes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.State != slacksim.StateAcked || len(e.Attempts) != 1 {
			t.Errorf("envelope %s %s: %s after %d attempts", e.Kind, e.Topic, e.State, len(e.Attempts))
		}
	}
	methods, topics := checkExchanges(t, w.srv)
	for _, m := range slacksim.Methods() {
		if !methods[m] && m != "api.test" && m != "chat.delete" {
			t.Errorf("%s: not exercised", m)
		}
	}
	for _, tp := range []string{"app.mention", "message.channels", "message.im"} {
		if !topics[tp] {
			t.Errorf("topic %s: not delivered", tp)
		}
	}
	kinds := map[slacksim.EnvelopeKind]bool{}
	for _, e := range es {
		kinds[e.Kind] = true
	}
	if !kinds[slacksim.KindInteractive] || !kinds[slacksim.KindSlashCommands] {
		t.Errorf("envelope kinds: %v", kinds)
	}
}
