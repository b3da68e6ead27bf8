package ghbot

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// Who may ask, and the commands they may give.
//
// Only people with write access to the repository (admin, maintain or
// write, as GitHub's collaborator permission API answers, cached for
// permTTL) start sessions, steer them, review them into new turns and give
// commands; the operator may narrow that further (HookConfig.Repos,
// Users). Anyone else who mentions Harvest is answered once per thread,
// politely, saying why (found again by a marker in the answer, so a
// redelivery or their next comment adds none).
//
// Commands are a mention whose whole request is one word:
//
//	@harvest stop     cancel the running turn of the thread's session
//	                  (queued messages wait for the next one)
//	@harvest status   reply with the session's state, current step, cost
//	                  and link
//	@harvest help     reply with what Harvest does here

// permTTL is how long GitHub's answer about a person's access is trusted.
const permTTL = time.Minute

type permEntry struct {
	perm string // admin, maintain, write, triage, read, none
	at   time.Time
}

// permission is login's role on repo, as GitHub's collaborator permission
// API says (cached for permTTL): "" with no error when GitHub does not
// know them there (404).
func (h *Hooks) permission(ctx context.Context, c *github.Client, repo, login string) (string, error) {
	key := strings.ToLower(repo) + "\x00" + strings.ToLower(login)
	h.mu.Lock()
	e, ok := h.perms[key]
	h.mu.Unlock()
	if ok && h.now().Sub(e.at) < permTTL {
		return e.perm, nil
	}
	owner, name := split(repo)
	p, _, err := c.Repositories.GetPermissionLevel(ctx, owner, name, login)
	perm := ""
	switch {
	case err == nil:
		perm = p.GetPermission()
		if rn := p.GetRoleName(); rn == "maintain" || rn == "admin" {
			perm = rn
		}
	default:
		var ge *github.ErrorResponse
		if !errors.As(err, &ge) || ge.Response == nil || ge.Response.StatusCode != http.StatusNotFound {
			return "", explain(err, "checking @"+login+"'s access to "+repo)
		}
	}
	h.mu.Lock()
	h.perms[key] = permEntry{perm: perm, at: h.now()}
	h.mu.Unlock()
	return perm, nil
}

// allowed checks the repository and user allowlists and the person's write
// access; a refusal is the reason to tell them ("" when allowed).
func (h *Hooks) allowed(ctx context.Context, c *github.Client, repo string, who *github.User) (string, error) {
	if len(h.cfg.Repos) > 0 && !slices.ContainsFunc(h.cfg.Repos, func(p string) bool {
		ok, _ := path.Match(strings.ToLower(p), strings.ToLower(repo))
		return ok
	}) {
		return "this repository is not one Harvest works on here (its operator lists them)", nil
	}
	login := who.GetLogin()
	if len(h.cfg.Users) > 0 && !slices.ContainsFunc(h.cfg.Users, func(u string) bool { return strings.EqualFold(u, login) }) {
		return "@" + login + " is not on the list of people this Harvest works for", nil
	}
	perm, err := h.permission(ctx, c, repo, login)
	if err != nil {
		return "", err
	}
	switch perm {
	case "admin", "maintain", "write":
		return h.disabled(ctx, who)
	case "":
		return "@" + login + " has no access to this repository", nil
	}
	return "only people with write access to this repository can ask Harvest to work on it or give it commands", nil
}

// refuseOnce answers who, on thread num, why Harvest will not do what they
// asked, unless it told them so on that thread before.
func (h *Hooks) refuseOnce(ctx context.Context, c *github.Client, repo string, num int, who *github.User, why string) (string, error) {
	owner, name := split(repo)
	mk := "<!-- harvest-refused: " + strings.ToLower(who.GetLogin()) + " -->"
	opts := &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100}}
	for {
		cs, resp, err := c.Issues.ListComments(ctx, owner, name, num, opts)
		if err != nil {
			return "", explain(err, "reading the comments of #"+fmt.Sprint(num))
		}
		for _, cm := range cs {
			if strings.Contains(cm.GetBody(), mk) {
				return "refused @" + who.GetLogin() + " (told before, on this thread): " + why, nil
			}
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	text := fmt.Sprintf("Sorry @%s, I can't do that: %s. (I say this once per thread; I won't answer your other comments here.)", who.GetLogin(), why)
	if _, _, err := c.Issues.CreateComment(ctx, owner, name, num, &github.IssueComment{Body: github.Ptr(text + "\n\n" + mk)}); err != nil {
		return "", explain(err, "replying on #"+fmt.Sprint(num))
	}
	return "refused @" + who.GetLogin() + ": " + why, nil
}

// runCommand carries out a command given on thread num, whose session is
// s (nil: none lives there).
func (h *Hooks) runCommand(ctx context.Context, c *github.Client, d *store.Delivery, repo string, num int, who *github.User, cmd string, s *store.Session) (string, error) {
	switch cmd {
	case cmdHelp:
		return "answered help", h.reply(ctx, c, repo, num, d.ID, h.helpText())
	case cmdStatus:
		if s == nil {
			return "answered status: no session", h.reply(ctx, c, repo, num, d.ID, fmt.Sprintf("@%s No Harvest session works on this thread now. Mention me with a task to start one.", who.GetLogin()))
		}
		return "answered the status of session " + s.ID, h.reply(ctx, c, repo, num, d.ID, "@"+who.GetLogin()+" "+h.statusText(ctx, s))
	case cmdStop:
		if s == nil {
			return "stop: no session", h.reply(ctx, c, repo, num, d.ID, fmt.Sprintf("@%s No Harvest session works on this thread now: there is nothing to stop.", who.GetLogin()))
		}
		err := h.sessions.Cancel(ctx, "", s.ID)
		if err != nil && !errors.Is(err, session.ErrConflict) {
			return "", err
		}
		text := fmt.Sprintf("@%s ⏹️ Stopped the current turn of session %s. Queued requests wait; mention me with a task to go on.", who.GetLogin(), h.sessionRef(s.ID))
		if err != nil {
			text = fmt.Sprintf("@%s Session %s has ended already: there is nothing to stop.", who.GetLogin(), h.sessionRef(s.ID))
		} else {
			h.auditBy(ctx, who, store.AuditEntry{Action: "session.cancel", Target: s.ID, Result: store.AuditOK,
				Detail: auditDetail(map[string]any{"delivery": d.ID, "repo": repo, "number": num, "login": who.GetLogin()})})
		}
		return "stopped the turn of session " + s.ID, h.reply(ctx, c, repo, num, d.ID, text)
	}
	return "", fmt.Errorf("unknown command %q (a bug)", cmd)
}

// helpText is the answer to "@harvest help".
func (h *Hooks) helpText() string {
	handle := "@harvest"
	if bot, err := h.svc.gh.Bot(context.Background()); err == nil {
		handle = bot.Handle()
	}
	return fmt.Sprintf(`I am Harvest, a coding agent. What I do here:

- **%[1]s TASK** on an issue or pull request: I start a session that works on it in a sandbox, commits on a branch and opens (or updates) a pull request. On a thread I already work on, the task goes to that session.
- On my pull request, mentions, reviews, review comments and failed checks go to the session that opened it; merging or closing it ends the session.
- **%[1]s stop** cancels my current turn; **%[1]s status** says what I am doing and what it cost; **%[1]s help** shows this.

Only people with write access to the repository can ask me. I do not read mentions inside code, quotes or HTML comments.`, handle)
}

// sessionRef names a session, with its link when the server has a
// public URL.
func (h *Hooks) sessionRef(id string) string {
	if u := h.svc.cfg.BaseURL; u != "" {
		return fmt.Sprintf("[%s](%s/sessions/%s)", id, strings.TrimRight(u, "/"), id)
	}
	return "`" + id + "`"
}

// statusText says how session s is: its state, what it does now (its
// running turn's latest step and todo list, from its stored events), its
// cost and its link.
func (h *Hooks) statusText(ctx context.Context, s *store.Session) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Session %s is **%s**", h.sessionRef(s.ID), s.State)
	if s.State == store.StateWorking || s.State == store.StateCancelling {
		fmt.Fprintf(&b, " (turn %d)", s.Turns)
	}
	b.WriteString(".")
	step, todos := h.currentStep(ctx, s)
	if step != "" {
		b.WriteString("\n\nCurrent step: " + step)
	}
	if len(todos) > 0 {
		b.WriteString("\n")
		for _, t := range todos {
			mark := " "
			if t.Status == "completed" {
				mark = "x"
			}
			fmt.Fprintf(&b, "\n- [%s] %s", mark, truncate(t.Content, 200))
		}
	}
	fmt.Fprintf(&b, "\n\nTurns: %d. Cost so far: $%.4f.", s.Turns, s.CostUSD)
	for _, r := range s.Repos {
		if r.PRURL != "" {
			b.WriteString("\nPull request: " + r.PRURL)
		}
	}
	return b.String()
}

// statusEvents bounds the events read for a status.
const statusEvents = 200

// currentStep is what the session's running turn does now (its latest
// tool call) and its latest todo list, read from its stored events.
func (h *Hooks) currentStep(ctx context.Context, s *store.Session) (string, []event.TodoItem) {
	if s.State != store.StateWorking && s.State != store.StateCancelling {
		return "", nil
	}
	last, err := h.st.LastSeq(ctx, s.ID)
	if err != nil {
		return "", nil
	}
	evs, err := h.st.Events(ctx, s.ID, max(last-statusEvents, 0), 0)
	if err != nil {
		return "", nil
	}
	turn := fmt.Sprintf("t%d", s.Turns)
	step := "thinking"
	var todos []event.TodoItem
	for _, ev := range evs {
		if ev.Turn != turn {
			continue
		}
		switch p := ev.Data.(type) {
		case event.ToolStarted:
			step = "running " + p.Tool
			if p.Summary != "" {
				step = "running `" + truncate(strings.ReplaceAll(p.Summary, "`", "'"), 200) + "`"
			}
		case event.ToolFinished, event.AssistantMessage:
			step = "thinking"
		case event.TodoUpdated:
			todos = p.Items
		}
	}
	return step, todos
}
