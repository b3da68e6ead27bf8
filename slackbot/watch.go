package slackbot

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// # The thread
//
// Each session Slack started has a watcher while it lives: one goroutine
// follows the session's events (Subscribe; again from the last one seen
// when a subscription ends) and records what the thread should show; a
// second, the painter, makes Slack show it, so a slow or rate-limited
// Slack never holds the events up:
//
//	turn.started            a progress message in the thread, with a Stop button
//	tool.started, todo      the progress message edited: the current step and the
//	                        todo list (coalesced: at most one edit per UpdateEvery
//	                        per channel, the latest state each time)
//	turn.finished|cancelled after the session's next state (the work is published by
//	|failed, then the       then: pr.opened comes between), a final message: the
//	session's next state    summary, the pull request, Open in Harvest; ✅ or ❌ on the
//	                        message that asked, in place of 👀; then the progress
//	                        message's last edit (no button)
//
// The progress message's ts and the ts of the message that asked are
// recorded in the thread (SetSlackThreadTurn) when it is posted: a
// watcher that follows the session again from what the thread shows
// (after a restart, or on the node that took the session over) edits
// that message instead of posting a second, and marks the right message.
// The message that asked is found by the key its session message was
// sent with ("slack:<channel>:<ts>"), on whichever node sent it.
//
// The painter runs the thread's steps in order (a turn's final message
// is never overtaken by the next turn's progress message); only the
// progress edits are coalesced.

// maxText bounds a message's text (Slack cuts at 40,000; a section block
// takes 3,000).
const maxText = 2900

// watch is one session's watcher.
type watch struct {
	b  *Bot
	th *store.SlackThread

	mu      sync.Mutex
	steps   []func(ctx context.Context) // in order
	dirty   bool                        // the progress message needs an edit
	cur     *turnView                   // the turn under way (nil: none)
	ending  *turnView                   // a turn that ended, its final message not yet sent
	pr      string                      // the session's pull request, as last heard
	taken   string                      // the message the next turn takes (message.delivered)
	kick    chan struct{}
	stopped bool
	cancel  context.CancelFunc // ends the watcher (another node owns the session: nodes.go)
}

// turnView is what the thread shows of one turn.
type turnView struct {
	id       string
	msg      string // the message it took
	progress string // ts of the progress message ("" until posted)
	trigger  string // ts of the Slack message that asked (known once progress is)
	step     string
	todos    []event.TodoItem
	text     string // the assistant's last text
	result   string // done | cancelled | failed
	summary  string
}

// watchSession starts the watcher of a session's thread unless it has
// one. after is the seq to follow from: what the thread shows already
// (store.SlackThread.Shown).
func (b *Bot) watchSession(th *store.SlackThread, after int64) {
	b.mu.Lock()
	if b.watching[th.Session] != nil || b.closed {
		b.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(b.ctx)
	c := *th // its turn's fields change as the watcher records them
	w := &watch{b: b, th: &c, kick: make(chan struct{}, 1), cancel: cancel}
	b.watching[th.Session] = w
	b.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1)
	b.goFn(func() { defer wg.Done(); w.paint(ctx) })
	b.goFn(func() {
		defer func() {
			cancel()
			wg.Wait()
			b.mu.Lock()
			delete(b.watching, th.Session)
			delete(b.updated, th.Session)
			b.mu.Unlock()
		}()
		w.follow(ctx, after)
	})
}

// follow reads the session's events until it ends (or the Bot closes).
func (w *watch) follow(ctx context.Context, after int64) {
	b := w.b
	for ctx.Err() == nil {
		sub, err := b.cfg.Sessions.Subscribe(ctx, Owner, w.th.Session, after)
		if err != nil {
			b.log.Warn("following a Slack session", "session", w.th.Session, "err", err)
			if errors.Is(err, store.ErrNotFound) {
				return
			}
		} else {
			for ev := range sub.C {
				if ev.Live != 0 {
					continue
				}
				after = ev.Seq
				if w.on(ev) {
					sub.Close()
					w.drain(ctx)
					return
				}
			}
		}
		if sleep(ctx, time.Now().Add(time.Second)) != nil {
			return
		}
	}
}

// drain waits (a while) for the painter to finish the thread's steps.
func (w *watch) drain(ctx context.Context) {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	w.poke()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		w.mu.Lock()
		n := len(w.steps)
		w.mu.Unlock()
		if n == 0 {
			return
		}
		sleep(ctx, time.Now().Add(50*time.Millisecond))
	}
}

func (w *watch) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// on records an event; true when the session has ended.
func (w *watch) on(ev event.Event) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.poke()
	switch p := ev.Data.(type) {
	case event.TurnStarted:
		w.flushEndingLocked(ev.Seq)
		t := &turnView{id: ev.Turn, msg: w.taken, step: "Starting"}
		w.taken = ""
		w.cur = t
		w.steps = append(w.steps, func(ctx context.Context) { w.postProgress(ctx, t) })
	case event.MessageDelivered:
		w.taken = p.MessageID
	case event.ToolStarted:
		if w.cur != nil {
			w.cur.step = firstNonEmpty(p.Summary, p.Tool)
			w.dirty = true
		}
	case event.TodoUpdated:
		if w.cur != nil {
			w.cur.todos = p.Items
			w.dirty = true
		}
	case event.AssistantMessage:
		if w.cur != nil && strings.TrimSpace(p.Text) != "" {
			w.cur.text = p.Text
		}
	case event.PROpened:
		w.pr = p.URL
	case event.TurnFinished, event.TurnCancelled, event.TurnFailed:
		if w.cur == nil {
			break
		}
		t := w.cur
		w.cur = nil
		switch p := p.(type) {
		case event.TurnFinished:
			t.result, t.summary = "done", firstNonEmpty(p.Result, t.text)
		case event.TurnCancelled:
			t.result, t.summary = "cancelled", "Stopped"+reasonSuffix(p.Reason)+"."
		case event.TurnFailed:
			t.result, t.summary = "failed", "The turn failed ("+string(p.Kind)+"): "+p.Error
		}
		w.dirty = false
		w.ending = t // its final message after the session's next state (the work published)
	case event.SessionState:
		w.flushEndingLocked(ev.Seq)
		if store.State(p.State).Ended() {
			return true
		}
	}
	return false
}

// flushEndingLocked queues the final message of the turn that ended;
// seq is the event that told, which the thread shows up to once it is
// posted.
func (w *watch) flushEndingLocked(seq int64) {
	if t := w.ending; t != nil {
		pr := w.pr
		w.ending = nil
		// The final message first: the progress message's last edit may
		// wait for the channel's next edit.
		w.steps = append(w.steps, func(ctx context.Context) { w.final(ctx, t, pr, seq) },
			func(ctx context.Context) { w.editProgress(ctx, t, true) })
	}
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return ": " + r
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if strings.TrimSpace(x) != "" {
			return x
		}
	}
	return ""
}

// paint makes the thread show what the events said, step by step.
func (w *watch) paint(ctx context.Context) {
	for {
		w.mu.Lock()
		var step func(context.Context)
		if len(w.steps) > 0 {
			step = w.steps[0]
		}
		dirty, t := w.dirty, w.cur
		if step == nil && dirty {
			w.dirty = false
		}
		w.mu.Unlock()
		switch {
		case step != nil:
			step(ctx)
			w.mu.Lock()
			w.steps = w.steps[1:]
			w.mu.Unlock()
			continue
		case dirty && t != nil:
			// Not before the channel's next edit; a step that comes
			// meanwhile goes first.
			if at := w.b.rate.editAt(w.th.Channel); time.Now().Before(at) {
				w.mu.Lock()
				w.dirty = true
				w.mu.Unlock()
				tm := time.NewTimer(time.Until(at))
				select {
				case <-ctx.Done():
					tm.Stop()
					return
				case <-w.kick:
				case <-tm.C:
				}
				tm.Stop()
				continue
			}
			w.editProgress(ctx, t, false)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
	}
}

// progressText is what the progress message says.
func (w *watch) progressText(t *turnView, over bool) string {
	w.mu.Lock()
	step, todos, result := t.step, append([]event.TodoItem(nil), t.todos...), t.result
	w.mu.Unlock()
	var sb strings.Builder
	if over {
		switch result {
		case "done":
			sb.WriteString("✅ Done")
		case "cancelled":
			sb.WriteString("⏹️ Stopped")
		default:
			sb.WriteString("❌ Failed")
		}
	} else {
		sb.WriteString("⏳ Working — " + step)
	}
	for _, it := range todos {
		mark := "☐"
		switch it.Status {
		case "completed":
			mark = "☑"
		case "in_progress":
			mark = "▸"
		}
		sb.WriteString("\n" + mark + " " + it.Content)
	}
	return cut(sb.String())
}

func cut(s string) string {
	if r := []rune(s); len(r) > maxText {
		return string(r[:maxText-1]) + "…"
	}
	return s
}

// progressBlocks are the progress message's blocks: its text, and the
// Stop button while the turn runs.
func (w *watch) progressBlocks(text string, over bool) slack.MsgOption {
	blocks := []slack.Block{slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil)}
	if !over {
		stop := slack.NewButtonBlockElement(actionStop, w.th.Session, slack.NewTextBlockObject(slack.PlainTextType, "Stop", false, false))
		stop.Style = slack.StyleDanger
		blocks = append(blocks, slack.NewActionBlock("harvest-turn", stop))
	}
	return slack.MsgOptionBlocks(blocks...)
}

func (w *watch) postProgress(ctx context.Context, t *turnView) {
	b := w.b
	w.mu.Lock()
	th := *w.th
	w.mu.Unlock()
	if th.Turn == t.id && th.ProgressTS != "" {
		// Posted before a restart, or by the node that owned the session
		// before: that message is edited, none posted.
		w.mu.Lock()
		t.progress, t.trigger, w.dirty = th.ProgressTS, th.TriggerTS, true
		w.mu.Unlock()
		return
	}
	if !w.mayPost(ctx) {
		return
	}
	text := w.progressText(t, false)
	var ts string
	err := b.rate.call(ctx, func(ctx context.Context) error {
		var err error
		_, ts, err = b.api.PostMessageContext(ctx, w.th.Channel, slack.MsgOptionText(text, false), w.progressBlocks(text, false), slack.MsgOptionTS(w.th.ThreadTS))
		return err
	})
	if err != nil {
		b.log.Warn("posting a progress message", "session", w.th.Session, "err", err)
		return
	}
	trigger := b.triggerOf(ctx, w.th, t.msg)
	w.mu.Lock()
	t.progress, t.trigger = ts, trigger
	w.th.Turn, w.th.ProgressTS, w.th.TriggerTS = t.id, ts, trigger
	w.mu.Unlock()
	if err := b.st.SetSlackThreadTurn(ctx, w.th.Session, t.id, ts, trigger); err != nil && ctx.Err() == nil {
		b.log.Warn("recording a thread's progress message", "session", w.th.Session, "err", err)
	}
}

// triggerOf is the ts of the Slack message that sent a session's message
// (the key it was sent with: "slack:<channel>:<ts>", start.go), else the
// thread's first.
func (b *Bot) triggerOf(ctx context.Context, th *store.SlackThread, msg string) string {
	if msg == "" {
		return th.ThreadTS
	}
	ms, err := b.st.Messages(ctx, th.Session)
	if err != nil {
		b.log.Warn("reading a session's messages", "session", th.Session, "err", err)
		return th.ThreadTS
	}
	for _, m := range ms {
		if m.ID != msg {
			continue
		}
		if rest, ok := strings.CutPrefix(m.Key, "slack:"+th.Channel+":"); ok && rest != "" {
			return rest
		}
		break
	}
	return th.ThreadTS
}

func (w *watch) editProgress(ctx context.Context, t *turnView, over bool) {
	b := w.b
	w.mu.Lock()
	ts := t.progress
	w.mu.Unlock()
	if ts == "" {
		return
	}
	text := w.progressText(t, over)
	err := b.rate.edit(ctx, w.th.Channel, func(ctx context.Context) error {
		_, _, _, err := b.api.UpdateMessageContext(ctx, w.th.Channel, ts, slack.MsgOptionText(text, false), w.progressBlocks(text, over))
		return err
	})
	if err != nil && ctx.Err() == nil {
		b.log.Warn("editing a progress message", "session", w.th.Session, "err", err)
	}
}

// final posts a turn's final message and swaps 👀 for ✅ or ❌.
func (w *watch) final(ctx context.Context, t *turnView, pr string, seq int64) {
	b := w.b
	if !w.mayPost(ctx) {
		return
	}
	text := firstNonEmpty(t.summary, "Done.")
	if pr != "" {
		text += "\n\nPull request: " + pr
	}
	var link string
	if b.cfg.PublicURL != "" {
		link = strings.TrimSuffix(b.cfg.PublicURL, "/") + "/sessions/" + w.th.Session
	}
	text = cut(text)
	blocks := []slack.Block{slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil)}
	var btns []slack.BlockElement
	if pr != "" {
		p := slack.NewButtonBlockElement(actionPR, "pr", slack.NewTextBlockObject(slack.PlainTextType, "Pull request", false, false))
		p.URL = pr
		btns = append(btns, p)
	}
	if link != "" {
		o := slack.NewButtonBlockElement(actionOpen, w.th.Session, slack.NewTextBlockObject(slack.PlainTextType, "Open in Harvest", false, false))
		o.URL = link
		btns = append(btns, o)
	}
	if len(btns) > 0 {
		blocks = append(blocks, slack.NewActionBlock("harvest-links", btns...))
	}
	fallback := text
	if link != "" {
		fallback += "\n" + link
	}
	err := b.rate.call(ctx, func(ctx context.Context) error {
		_, _, err := b.api.PostMessageContext(ctx, w.th.Channel, slack.MsgOptionText(fallback, false), slack.MsgOptionBlocks(blocks...), slack.MsgOptionTS(w.th.ThreadTS))
		return err
	})
	if err != nil {
		b.log.Warn("posting a turn's final message", "session", w.th.Session, "err", err)
	}
	mark := "white_check_mark"
	if t.result != "done" {
		mark = "x"
	}
	// The message that asked: a reply's (the key it was sent with), else
	// the thread's first.
	w.mu.Lock()
	trigger := t.trigger
	w.mu.Unlock()
	if trigger == "" {
		trigger = b.triggerOf(ctx, w.th, t.msg)
	}
	b.swap(ctx, w.th.Channel, trigger, mark)
	if err := b.st.SetSlackThreadShown(ctx, w.th.Session, seq-1); err != nil && ctx.Err() == nil {
		b.log.Warn("recording what a thread shows", "session", w.th.Session, "err", err)
	}
}
