package ghbot

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// The progress comment.
//
// A session started on GitHub has one progress comment (made when the
// request arrived, on the issue or pull request that asked). Each turn has
// its own section in it, so a follow-up adds to what the comment says and
// never overwrites an earlier result:
//
//	<!-- harvest-turn: t-1 -->
//	### Turn 1 · ✅ Done
//	…
//	<!-- /harvest-turn -->
//	<!-- harvest-turn: t-2 -->
//	### Turn 2 · ⏳ Working
//	Now: bash: go test ./...
//	- [x] Read the failing test
//	- [ ] Fix add
//	<!-- /harvest-turn -->
//	Harvest session [s-…](…)
//	<!-- harvest-session: s-… -->
//
// During a turn its section shows the agent's todo list as a checklist
// and the step it is on, edited as the agent goes: at most one edit every
// Config.ProgressEvery (the first one ProgressEvery after the turn
// begins: a short turn is shown at its end only), never two at once on
// one comment (the latest state wins: what changed while an edit was in
// flight is in the next one), through the shared client
// (gh.GitHub.Client) and its limiter: a live edit is Background (it keeps
// off the budget's reserve, left for work people wait for) and NoWait
// (inside a window it fails at once and is put off to the window's end,
// never holding the turn's end up). An edit notifies no one: the turn's
// end is told in a new comment (tell.go).
//
// Earlier turns' sections are kept as GitHub has them (read once per
// session, when the first turn is watched after a start or a restart);
// when the comment would outgrow GitHub's 65,536 characters the oldest
// sections are cut to their heading.

// DefaultProgressEvery is the least time between two edits of a progress
// comment during a turn.
const DefaultProgressEvery = 5 * time.Second

// maxComment is below GitHub's limit on a comment's body (65,536).
const maxComment = 60000

// editTimeout bounds one edit of a comment.
const editTimeout = 30 * time.Second

// progressDoc is a session's progress comment as Harvest last wrote it.
// mu is held across the edit (a call to GitHub): one edit at a time.
type progressDoc struct {
	mu       sync.Mutex
	session  string
	repo     string
	id       int64
	loaded   bool
	sections []docSection
}

type docSection struct{ turn, text string }

var sectionPattern = regexp.MustCompile(`(?s)<!-- harvest-turn: ([A-Za-z0-9._-]+) -->\n(.*?)\n<!-- /harvest-turn -->`)

// doc is the progress comment of sess (nil: it has none).
func (s *Service) doc(sess *store.Session) *progressDoc {
	l := sess.GitHub
	if l == nil || l.Progress == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.docs[sess.ID]
	if d == nil || d.id != l.Progress {
		d = &progressDoc{session: sess.ID, repo: l.Repo, id: l.Progress}
		s.docs[sess.ID] = d
	}
	return d
}

// forget drops a session's progress comment and check runs from memory
// (it ended).
func (s *Service) forget(session string) {
	s.mu.Lock()
	delete(s.docs, session)
	for k := range s.checks {
		if strings.HasPrefix(k, session+"\x00") {
			delete(s.checks, k)
		}
	}
	s.mu.Unlock()
}

// setSection writes turn's section of the progress comment (adding it
// after the others when new) and edits the comment on GitHub. d.mu is
// held.
func (s *Service) setSection(ctx context.Context, c *github.Client, d *progressDoc, turn string, text func(n int) string) error {
	owner, name := split(d.repo)
	if !d.loaded {
		cm, _, err := c.Issues.GetComment(ctx, owner, name, d.id)
		if err != nil {
			return explain(err, "reading the progress comment")
		}
		for _, m := range sectionPattern.FindAllStringSubmatch(cm.GetBody(), -1) {
			d.sections = append(d.sections, docSection{turn: m[1], text: m[2]})
		}
		d.loaded = true
	}
	i := 0
	for i < len(d.sections) && d.sections[i].turn != turn {
		i++
	}
	if i == len(d.sections) {
		d.sections = append(d.sections, docSection{turn: turn})
	}
	d.sections[i].text = strings.TrimSpace(text(i + 1))
	_, _, err := c.Issues.EditComment(ctx, owner, name, d.id, &github.IssueComment{Body: github.Ptr(s.renderDoc(d))})
	return explain(err, "editing the progress comment")
}

// renderDoc is the progress comment's text: the turns' sections, the
// session's link, the marker.
func (s *Service) renderDoc(d *progressDoc) string {
	for cut := 0; ; cut++ {
		var b strings.Builder
		for i, sec := range d.sections {
			text := sec.text
			if i < cut {
				text, _, _ = strings.Cut(text, "\n")
			}
			fmt.Fprintf(&b, "<!-- harvest-turn: %s -->\n%s\n<!-- /harvest-turn -->\n\n", sec.turn, text)
		}
		body := s.progressBody(d.session, strings.TrimSpace(b.String()), "")
		if len(body) <= maxComment || cut >= len(d.sections) {
			return truncate(body, maxComment)
		}
	}
}

// WatchTurn shows a session's turn where people look as it runs
// (session.TurnWatcher): a GitHub session's in its progress comment, and
// a pull request's in its check run (checks.go).
func (s *Service) WatchTurn(ctx context.Context, t session.TurnStart) session.TurnWatch {
	var ws watches
	if w := s.watchProgress(ctx, t); w != nil {
		ws = append(ws, w)
	}
	if w := s.watchChecks(ctx, t); w != nil {
		ws = append(ws, w)
	}
	switch len(ws) {
	case 0:
		return nil
	case 1:
		return ws[0]
	}
	return ws
}

// watchProgress shows a GitHub session's turn in its progress comment
// (nil: it has none).
func (s *Service) watchProgress(ctx context.Context, t session.TurnStart) session.TurnWatch {
	d := s.doc(t.Session)
	if d == nil {
		return nil
	}
	c, err := s.gh.Client(repoScope(d.repo))
	if err != nil {
		return nil
	}
	w := &liveWatch{s: s, c: c, d: d, turn: t.Turn, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancel(context.WithoutCancel(ctx))
	w.dirty = true // the turn's section appears ("Working") even with no event
	w.kick <- struct{}{}
	go w.run()
	return w
}

// liveWatch edits a turn's section of the progress comment while the
// turn runs: one goroutine (run), owned by the watch, ended by Done.
type liveWatch struct {
	s      *Service
	c      *github.Client
	d      *progressDoc
	turn   string
	ctx    context.Context
	cancel context.CancelFunc
	kick   chan struct{} // state changed (capacity 1: coalesced)
	stop   chan struct{} // closed by Done
	done   chan struct{} // closed when run returns

	mu    sync.Mutex
	todos []event.TodoItem
	step  string
	dirty bool
}

// See takes in an event of the turn: a todo list or a step changes what
// the section shows. It never blocks.
func (w *liveWatch) See(ev event.Event) {
	w.mu.Lock()
	switch p := ev.Data.(type) {
	case event.TodoUpdated:
		w.todos = append(w.todos[:0:0], p.Items...)
	case event.ToolStarted:
		w.step = p.Summary
		if w.step == "" {
			w.step = p.Tool
		}
	default:
		w.mu.Unlock()
		return
	}
	w.dirty = true
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Done ends the watch: an edit in flight is waited for (bounded by
// editTimeout), a pending one is dropped (the turn's end writes the
// section).
func (w *liveWatch) Done() {
	close(w.stop)
	t := time.NewTimer(editTimeout + time.Second)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C:
		w.cancel()
		<-w.done
	}
	w.cancel()
}

func (w *liveWatch) run() {
	defer close(w.done)
	// The first edit too waits ProgressEvery: a turn shorter than that
	// costs no request until its end, which writes the section anyway.
	last := time.Now()
	for {
		select {
		case <-w.stop:
			return
		case <-w.kick:
		}
		if wait := w.s.cfg.ProgressEvery - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-w.stop:
				t.Stop()
				return
			case <-t.C:
			}
		}
		w.mu.Lock()
		if !w.dirty {
			w.mu.Unlock()
			continue
		}
		text := liveSection(w.todos, w.step)
		w.dirty = false
		w.mu.Unlock()
		last = time.Now()
		// Deferrable, and never waiting inside a window: a limited edit
		// is put off to the window's end (the latest state then).
		ctx, cancel := context.WithTimeout(gh.NoWait(gh.Background(w.ctx)), editTimeout)
		w.d.mu.Lock()
		err := w.s.setSection(ctx, w.c, w.d, w.turn, text)
		w.d.mu.Unlock()
		cancel()
		if at := gh.RetryAt(err); errors.Is(err, gh.ErrRateLimited) && !at.IsZero() {
			w.mu.Lock()
			w.dirty = true
			w.mu.Unlock()
			t := time.NewTimer(time.Until(at))
			select {
			case <-w.stop:
				t.Stop()
				return
			case <-t.C:
			}
			select {
			case w.kick <- struct{}{}:
			default:
			}
			continue
		}
		if err != nil && w.ctx.Err() == nil {
			w.s.log.Warn("showing a turn's progress", "session", w.d.session, "turn", w.turn, "err", err)
		}
	}
}

// liveSection is a running turn's section: the step it is on and its
// todo list as a checklist.
func liveSection(todos []event.TodoItem, step string) func(int) string {
	return func(n int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "### Turn %d · ⏳ Working\n", n)
		if step != "" {
			fmt.Fprintf(&b, "\nNow: `%s`\n", oneLine(step, 200))
		}
		if len(todos) > 0 {
			b.WriteString("\n")
			for _, it := range todos {
				box := "[ ]"
				switch it.Status {
				case "completed":
					box = "[x]"
				case "in_progress":
					box = "[ ] ⏳"
				}
				fmt.Fprintf(&b, "- %s %s\n", box, oneLine(it.Content, 300))
			}
		}
		return b.String()
	}
}

// oneLine is s on one line, without backquotes, at most n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(strings.ReplaceAll(s, "`", "'")), " ")
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}
