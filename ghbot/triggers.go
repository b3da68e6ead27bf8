package ghbot

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// process turns one delivery into what it asks for and says what it did.
// Events and actions Harvest does not act on are done with a result that
// says so.
//
// Where a trigger goes (one branch, one session; the pull request's
// thread is its session's thread):
//
//	issue thread            the live session started from it, else a new one
//	pull request thread     the live session holding its head branch (the one
//	(comment, review,       that opened it, or adopted it), resumed if
//	 review comment,        suspended; else a new one on its branch (a
//	 failed check)          mention only). The store refuses a second live
//	                        session on a branch, so a race (two deliveries,
//	                        two nodes) ends with the loser sent to the winner.
//	pull request closed     its session ends (pr.merged / pr.closed); a branch
//	                        the session made is deleted unless merged or kept
func (h *Hooks) process(ctx context.Context, d *store.Delivery) (string, error) {
	if why := h.ignorable(d.Event, d.Payload); why != "" {
		return why, nil // as ServeHTTP would have recorded it (ignore.go)
	}
	ev, err := github.ParseWebHook(d.Event, d.Payload)
	if err != nil {
		if strings.Contains(err.Error(), "unknown X-Github-Event") {
			return "ignored: Harvest does not act on " + d.Event + " events", nil
		}
		return "", permanent{fmt.Errorf("the %s payload does not parse: %w", d.Event, err)}
	}
	switch e := ev.(type) {
	case *github.IssueCommentEvent:
		if ignored, err := h.commentEvent(ctx, e); err != nil || ignored != "" {
			return ignored, err
		}
		return h.onComment(ctx, d, e.GetRepo(), e.GetIssue(), e.GetSender(), e.GetComment().GetBody(), e.GetComment().GetID())
	case *github.IssuesEvent:
		switch {
		case e.GetAction() == "labeled" && h.cfg.Label != "" && strings.EqualFold(e.GetLabel().GetName(), h.cfg.Label):
			return h.onIssue(ctx, d, e, "labelled "+h.cfg.Label)
		case e.GetAction() == "assigned" && h.isBot(ctx, e.GetAssignee()):
			return h.onIssue(ctx, d, e, "assigned to Harvest")
		}
		return "ignored: issue " + e.GetAction(), nil
	case *github.PullRequestEvent:
		if e.GetAction() != "closed" {
			return "ignored: pull request " + e.GetAction(), nil
		}
		return h.onPRClosed(ctx, d, e)
	case *github.PullRequestReviewEvent:
		if e.GetAction() != "submitted" {
			return "ignored: review " + e.GetAction(), nil
		}
		return h.onReview(ctx, d, e)
	case *github.PullRequestReviewCommentEvent:
		if e.GetAction() != "created" {
			return "ignored: review comment " + e.GetAction(), nil
		}
		return h.onReviewComment(ctx, d, e)
	case *github.CheckSuiteEvent:
		if e.GetAction() != "completed" {
			return "ignored: check suite " + e.GetAction(), nil
		}
		return h.onCheckSuite(ctx, d, e)
	case *github.InstallationEvent:
		return h.onInstallation(ctx, d, e)
	case *github.InstallationRepositoriesEvent:
		return h.onInstallationRepos(ctx, d, e)
	case *github.PushEvent:
		return h.onPush(ctx, d, e)
	}
	return "ignored: Harvest does not act on " + d.Event + " events", nil
}

// isBot reports whether u is Harvest's own account.
func (h *Hooks) isBot(ctx context.Context, u *github.User) bool {
	if u == nil {
		return false
	}
	bot, err := h.svc.gh.Bot(ctx)
	return err == nil && strings.EqualFold(u.GetLogin(), bot.Login)
}

// mentioned reports whether body calls Harvest by its handle, read as a
// person reads it (mention.go), and returns the request: the text with
// the mention taken out.
func (h *Hooks) mentioned(ctx context.Context, body string) (string, bool, error) {
	bot, err := h.svc.gh.Bot(ctx)
	if err != nil {
		return "", false, err
	}
	text, ok := readMention(body, bot.Handle())
	return text, ok, nil
}

// commentEvent says why an issue_comment event is no request ("": it
// may be one): only a comment created, or one edited so that it now calls
// Harvest and did not before (GitHub's changes.body.from); a further edit
// of it, which had the mention already, is not.
func (h *Hooks) commentEvent(ctx context.Context, e *github.IssueCommentEvent) (string, error) {
	switch e.GetAction() {
	case "created":
		return "", nil
	case "edited":
	default:
		return "ignored: comment " + e.GetAction(), nil
	}
	if e.GetChanges() == nil || e.GetChanges().GetBody() == nil {
		return "ignored: the edit did not change the comment's text", nil
	}
	if _, before, err := h.mentioned(ctx, e.GetChanges().GetBody().GetFrom()); err != nil {
		return "", err
	} else if before {
		return "ignored: the comment mentioned Harvest before this edit", nil
	}
	return "", nil
}

// onComment handles a comment on an issue or pull request that may call
// Harvest: a command, a follow-up for the thread's session, or a new
// session.
func (h *Hooks) onComment(ctx context.Context, d *store.Delivery, repo *github.Repository, is *github.Issue, who *github.User, body string, commentID int64) (string, error) {
	full := repo.GetFullName()
	owner, name := split(full)
	num := is.GetNumber()
	a, err := h.commentAsks(ctx, full, who, body)
	switch {
	case err != nil || a.ignored != "":
		return a.ignored, err
	case a.refused != "":
		return h.refuseOnce(ctx, a.c, full, num, who, a.refused)
	}
	c, text := a.c, a.text
	if !h.acked(ctx, d.ID) { // else 👀 was given as the delivery was stored (ack.go)
		if _, resp, err := c.Reactions.CreateIssueCommentReaction(ctx, owner, name, commentID, "eyes"); err != nil && (resp == nil || resp.StatusCode >= 500) {
			return "", explain(err, "reacting to the comment")
		}
	}
	isPR := is.IsPullRequest()
	var pr *github.PullRequest
	if isPR {
		if pr, _, err = c.PullRequests.Get(ctx, owner, name, num); err != nil {
			return "", explain(err, "reading pull request #"+fmt.Sprint(num))
		}
	}
	s, err := h.threadSession(ctx, full, num, pr)
	if err != nil {
		return "", err
	}
	if cmd := command(text); cmd != "" {
		return h.runCommand(ctx, c, d, full, num, who, cmd, s)
	}
	if s != nil {
		if res, sent, err := h.followUp(ctx, d, s, who, quoteRequest(who.GetLogin(), text)); err != nil || sent {
			return res, err
		}
	}
	req := session.CreateRequest{
		Title: truncate(is.GetTitle(), 200),
		Repos: []session.RepoSpec{{GitHub: full}},
		GitHub: &store.GitHubLink{Repo: full, Number: num, IsPR: isPR, Requester: who.GetLogin(), RequesterID: who.GetID(),
			RequesterName: h.displayName(ctx, c, who)},
	}
	agentName, _ := directive(text, "agent")
	req.Agent, req.Model = firstOf(agentName, h.cfg.Agent), h.cfg.Model
	if isPR {
		if fork, ok := forkOf(full, pr); ok {
			// Its branch is the contributor's, in a repository Harvest
			// has no credential for: work on a branch of ours from
			// the pull request's head (forks.go).
			r := &req.Repos[0]
			r.Ref, r.Base = fmt.Sprintf("refs/pull/%d/head", num), pr.GetBase().GetRef()
			req.GitHub.Fork, req.GitHub.ForkBranch = fork, pr.GetHead().GetRef()
		} else {
			req.Repos[0].Ref, req.Repos[0].Branch = pr.GetHead().GetRef(), pr.GetHead().GetRef()
		}
	}
	req.Prompt = h.firstPrompt(full, is, req.GitHub, who.GetLogin(), text)
	return h.start(ctx, c, d, req, quoteRequest(who.GetLogin(), text))
}

// followUp sends text to session s as the delivery's message (keyed by
// it, so a second processing stores nothing more), resuming s if it is
// suspended. sent is false when s ended meanwhile: the caller starts a
// new session instead.
func (h *Hooks) followUp(ctx context.Context, d *store.Delivery, s *store.Session, who *github.User, text string) (result string, sent bool, err error) {
	m, err := h.sessions.SendMessage(ctx, "", s.ID, session.Outgoing{Text: text, Key: deliveryKeyPrefix + d.ID, Sender: Owner})
	if errors.Is(err, session.ErrConflict) {
		if cur, gerr := h.st.GetSession(ctx, s.ID); gerr == nil && cur.State.Ended() {
			return "", false, nil
		}
	}
	if err != nil {
		return "", false, err
	}
	h.auditBy(ctx, who, store.AuditEntry{Action: "session.send", Target: s.ID, Result: store.AuditOK,
		Detail: auditDetail(map[string]any{"delivery": d.ID, "event": d.Event, "message": m.ID, "login": who.GetLogin()})})
	return "sent to session " + s.ID, true, nil
}

func (h *Hooks) refuse(ctx context.Context, c *github.Client, repo string, num int, delivery string, who *github.User, why string) (string, error) {
	if err := h.reply(ctx, c, repo, num, delivery, fmt.Sprintf("Sorry @%s, I can't do that: %s.", who.GetLogin(), why)); err != nil {
		return "", err
	}
	return "refused @" + who.GetLogin() + ": " + why, nil
}

// onIssue starts a session on an issue labelled or assigned to Harvest.
func (h *Hooks) onIssue(ctx context.Context, d *store.Delivery, e *github.IssuesEvent, how string) (string, error) {
	full := e.GetRepo().GetFullName()
	who := e.GetSender()
	if h.isBot(ctx, who) {
		return "ignored: Harvest's own action", nil
	}
	c, err := h.svc.gh.Client(repoScope(full))
	if err != nil {
		return "", err
	}
	is := e.GetIssue()
	if why, err := h.allowed(ctx, c, full, who); err != nil {
		return "", err
	} else if why != "" {
		return h.refuseOnce(ctx, c, full, is.GetNumber(), who, why)
	}
	if s, err := h.threadSession(ctx, full, is.GetNumber(), nil); err != nil || s != nil {
		if s != nil {
			return "ignored: session " + s.ID + " already works on it", nil
		}
		return "", err
	}
	owner, name := split(full)
	if _, resp, err := c.Reactions.CreateIssueReaction(ctx, owner, name, is.GetNumber(), "eyes"); err != nil && (resp == nil || resp.StatusCode >= 500) {
		return "", explain(err, "reacting to the issue")
	}
	req := session.CreateRequest{
		Title: truncate(is.GetTitle(), 200), Prompt: h.firstPrompt(full, is, &store.GitHubLink{IsPR: is.IsPullRequest()}, who.GetLogin(), "Work on this issue ("+how+")."),
		Repos: []session.RepoSpec{{GitHub: full}}, Agent: h.cfg.Agent, Model: h.cfg.Model,
		GitHub: &store.GitHubLink{Repo: full, Number: is.GetNumber(), Requester: who.GetLogin(), RequesterID: who.GetID(), RequesterName: h.displayName(ctx, c, who)},
	}
	return h.start(ctx, c, d, req, "")
}

// start creates the session a delivery asks for, with its progress
// comment made first (found again, not made twice, when the delivery is
// processed a second time). When another live session holds the branch
// (a race with another delivery, on this node or another: the store
// decides), the request goes to that session as a follow-up (followUp,
// when not ""), and the progress comment says so.
func (h *Hooks) start(ctx context.Context, c *github.Client, d *store.Delivery, req session.CreateRequest, followUp string) (string, error) {
	req.ID = session.DerivedID(d.ID)
	req.PromptKey = deliveryKeyPrefix + d.ID // the turn's end answers the delivery's sender (notify.go)
	req.Limits.IdleTimeout = h.cfg.IdleTimeout
	l := req.GitHub
	u, err := h.requester(ctx, l)
	if err != nil {
		return "", err
	}
	if u != nil {
		if u.Disabled {
			why := "your Harvest user is disabled"
			if err := h.reply(ctx, c, l.Repo, l.Number, d.ID, fmt.Sprintf("Sorry @%s, I can't do that: %s.", l.Requester, why)); err != nil {
				return "", err
			}
			return "refused @" + l.Requester + ": " + why, nil
		}
		req.User = u.ID
	}
	id, err := h.progressComment(ctx, c, l.Repo, l.Number, req.ID)
	if err != nil {
		return "", err
	}
	l.Progress = id
	if r := &req.Repos[0]; r.Branch == "" && (!l.IsPR || l.Fork != "") {
		if r.Branch, err = h.workBranch(ctx, c, l.Repo, l.Number, req.Title, req.ID); err != nil {
			return "", err
		}
	}
	v, err := h.sessions.Create(ctx, Owner, req)
	var held *store.BranchHeldError
	if errors.As(err, &held) {
		h.editProgress(ctx, c, l.Repo, id, req.ID, fmt.Sprintf("➡️ Session %s already works on branch `%s`: this request went to it.", h.sessionRef(held.Session), held.Branch))
		if followUp == "" {
			return "ignored: session " + held.Session + " already works on branch " + held.Branch, nil
		}
		s, gerr := h.st.GetSession(ctx, held.Session)
		if gerr != nil {
			return "", gerr
		}
		res, sent, err := h.followUp(ctx, d, s, requesterOf(l), followUp)
		if err == nil && !sent {
			return "", fmt.Errorf("session %s, which held branch %s, ended meanwhile; trying again", held.Session, held.Branch)
		}
		return res, err
	}
	if errors.Is(err, store.ErrConflict) {
		return "session " + req.ID + " (created before)", nil
	}
	if be, ok := errors.AsType[*session.BudgetError](err); ok {
		// Said where it was asked: the requester is told, with who can
		// raise the cap.
		why := be.Error()
		h.editProgress(ctx, c, l.Repo, id, req.ID, "⛔ Harvest did not start: "+why)
		if err := h.reply(ctx, c, l.Repo, l.Number, d.ID, fmt.Sprintf("Sorry @%s, I can't start a session: %s.", l.Requester, why)); err != nil {
			return "", err
		}
		h.audit(ctx, store.AuditEntry{User: req.User, Action: "session.create", Target: req.ID, Result: "over_budget",
			Detail: auditDetail(map[string]any{"delivery": d.ID, "repo": l.Repo, "number": l.Number, "login": l.Requester})})
		return "refused @" + l.Requester + ": " + why, nil
	}
	if err != nil {
		if session.IsInput(err) {
			h.editProgress(ctx, c, l.Repo, id, req.ID, "❌ Harvest could not start: "+err.Error())
		}
		return "", err
	}
	h.audit(ctx, store.AuditEntry{User: req.User, Action: "session.create", Target: v.ID, Result: store.AuditOK,
		Detail: auditDetail(map[string]any{"delivery": d.ID, "repo": l.Repo, "number": l.Number, "login": l.Requester})})
	return "started session " + v.ID, nil
}

// threadSession is the live session of an issue or pull request thread
// (nil: none): for a pull request (pr not nil), the one holding its head
// branch; for an issue, the one started from it.
func (h *Hooks) threadSession(ctx context.Context, repo string, num int, pr *github.PullRequest) (*store.Session, error) {
	_, fork := forkOf(repo, pr)
	if pr != nil && !fork {
		return h.branchSession(ctx, repo, pr.GetHead().GetRef())
	}
	// An issue's, or a fork's pull request's (no session of ours holds
	// its branch): the session started from the thread.
	ss, err := h.st.ListSessions(ctx, store.SessionFilter{GitHubRepo: repo, GitHubNumber: num})
	if err != nil {
		return nil, err
	}
	for _, s := range ss {
		if s.State.Ended() || s.GitHub == nil {
			continue
		}
		if (!fork && !s.GitHub.IsPR) || (fork && s.GitHub.IsPR && s.GitHub.Fork != "") {
			return s, nil
		}
	}
	return nil, nil
}

// branchSession is the live session holding branch of repo (nil: none).
func (h *Hooks) branchSession(ctx context.Context, repo, branch string) (*store.Session, error) {
	if branch == "" {
		return nil, nil
	}
	id, err := h.st.BranchSession(ctx, repo, branch)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s, err := h.st.GetSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil || s.State.Ended() {
		return nil, err
	}
	return s, nil
}

// displayName is a person's name as their profile gives it (a webhook's
// sender carries none), else their login.
func (h *Hooks) displayName(ctx context.Context, c *github.Client, who *github.User) string {
	if n := who.GetName(); n != "" {
		return n
	}
	u, _, err := c.Users.Get(ctx, who.GetLogin())
	if err != nil || u.GetName() == "" {
		return who.GetLogin()
	}
	return u.GetName()
}

// firstPrompt is a new session's first message: what was asked, by whom,
// where, with the issue's text quoted as data.
func (h *Hooks) firstPrompt(repo string, is *github.Issue, l *store.GitHubLink, who, ask string) string {
	isPR := l.IsPR
	kind := "issue"
	if isPR {
		kind = "pull request"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "@%s asked you on GitHub, in %s %s#%d (%q):\n\n%s\n", who, kind, repo, is.GetNumber(), is.GetTitle(), quote(ask))
	if body := strings.TrimSpace(is.GetBody()); body != "" {
		fmt.Fprintf(&b, "\nThe %s says:\n\n%s\n", kind, quote(truncate(body, 20000)))
	}
	switch {
	case l.Fork != "":
		fmt.Fprintf(&b, "\nThe pull request's branch (%s) is in the fork %s, where Harvest cannot push. You are on a new branch of %s that starts from the pull request's head (its commits are the contributor's). "+
			"Commit your changes on it and push them (git push); Harvest opens a pull request in %s with them that builds on #%d.", l.ForkBranch, l.Fork, repo, repo, is.GetNumber())
	case isPR:
		b.WriteString("\nYou are on the pull request's branch. Commit your changes and push them (git push) to update it.")
	default:
		b.WriteString("\nCommit your changes on your branch and push them (git push); Harvest opens the pull request.")
	}
	return b.String()
}

// requesterOf is the GitHub account a link names as its requester.
func requesterOf(l *store.GitHubLink) *github.User {
	return &github.User{Login: github.Ptr(l.Requester), ID: github.Ptr(l.RequesterID)}
}

// quoteRequest is a follow-up comment as a message to the session.
func quoteRequest(who, text string) string {
	return fmt.Sprintf("@%s on GitHub:\n\n%s", who, quote(text))
}

// quote marks text as someone's words (a Markdown quote), so it reads as
// data, not as Harvest's instructions.
func quote(text string) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for i, l := range lines {
		lines[i] = "> " + l
	}
	return strings.Join(lines, "\n")
}

// directive finds "name:value" in text (like agent:claudecode).
func directive(text, name string) (string, bool) {
	m := regexp.MustCompile(`(?i)(?:^|\s)` + name + `:([A-Za-z0-9._/-]+)`).FindStringSubmatch(text)
	if m == nil {
		return "", false
	}
	return m[1], true
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func shortSHA(s string) string { return truncate(s, 12) }

// repoScope is the scope the webhook side needs on one repository.
func repoScope(repo string) gh.Scope { return gh.SessionScope(repo) }
