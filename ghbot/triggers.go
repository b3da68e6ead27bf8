package ghbot

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// process turns one delivery into what it asks for and says what it did.
// Events and actions Harvest does not act on are done with a result that
// says so.
func (h *Hooks) process(ctx context.Context, d *store.Delivery) (string, error) {
	ev, err := github.ParseWebHook(d.Event, d.Payload)
	if err != nil {
		if strings.Contains(err.Error(), "unknown X-Github-Event") {
			return "ignored: Harvest does not act on " + d.Event + " events", nil
		}
		return "", permanent{fmt.Errorf("the %s payload does not parse: %w", d.Event, err)}
	}
	switch e := ev.(type) {
	case *github.IssueCommentEvent:
		if e.GetAction() != "created" {
			return "ignored: comment " + e.GetAction(), nil
		}
		return h.onComment(ctx, d, e.GetRepo(), e.GetIssue(), e.GetSender(), e.GetComment().GetBody(), e.GetComment().GetID(), false)
	case *github.IssuesEvent:
		switch {
		case e.GetAction() == "labeled" && h.cfg.Label != "" && strings.EqualFold(e.GetLabel().GetName(), h.cfg.Label):
			return h.onIssue(ctx, d, e, "labelled "+h.cfg.Label)
		case e.GetAction() == "assigned" && h.isBot(ctx, e.GetAssignee()):
			return h.onIssue(ctx, d, e, "assigned to Harvest")
		}
		return "ignored: issue " + e.GetAction(), nil
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

// mentioned reports whether body calls Harvest by its handle, and returns
// the text with the mention taken out.
func (h *Hooks) mentioned(ctx context.Context, body string) (string, bool, error) {
	bot, err := h.svc.gh.Bot(ctx)
	if err != nil {
		return "", false, err
	}
	re := regexp.MustCompile(`(?i)(^|[^\w@/-])` + regexp.QuoteMeta(bot.Handle()) + `\b`)
	if !re.MatchString(body) {
		return "", false, nil
	}
	return strings.TrimSpace(re.ReplaceAllString(body, "$1")), true, nil
}

// allowed checks the repository and user allowlists and the person's write
// access; a refusal is the reason to tell them ("" when allowed).
func (h *Hooks) allowed(ctx context.Context, repo string, who *github.User) (string, error) {
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
	c, err := h.svc.gh.Client(repoScope(repo))
	if err != nil {
		return "", err
	}
	owner, name := split(repo)
	p, _, err := c.Repositories.GetPermissionLevel(ctx, owner, name, login)
	if err != nil {
		var ge *github.ErrorResponse
		if errors.As(err, &ge) && ge.Response != nil && ge.Response.StatusCode == http.StatusNotFound {
			return "@" + login + " has no access to this repository", nil
		}
		return "", explain(err, "checking @"+login+"'s access to "+repo)
	}
	switch p.GetPermission() {
	case "admin", "write", "maintain":
		return "", nil
	}
	if p.GetRoleName() == "maintain" {
		return "", nil
	}
	return "only people with write access to this repository can ask Harvest to work on it", nil
}

// onComment handles a comment on an issue or pull request that may call
// Harvest.
func (h *Hooks) onComment(ctx context.Context, d *store.Delivery, repo *github.Repository, is *github.Issue, who *github.User, body string, commentID int64, review bool) (string, error) {
	full := repo.GetFullName()
	if who.GetType() == "Bot" || h.isBot(ctx, who) {
		return "ignored: a bot's comment", nil
	}
	text, ok, err := h.mentioned(ctx, body)
	if err != nil {
		return "", err
	}
	if !ok {
		return "ignored: Harvest is not mentioned", nil
	}
	c, err := h.svc.gh.Client(repoScope(full))
	if err != nil {
		return "", err
	}
	owner, name := split(full)
	num := is.GetNumber()
	if why, err := h.allowed(ctx, full, who); err != nil {
		return "", err
	} else if why != "" {
		if err := h.reply(ctx, c, full, num, d.ID, fmt.Sprintf("Sorry @%s, I can't do that: %s.", who.GetLogin(), why)); err != nil {
			return "", err
		}
		return "refused @" + who.GetLogin() + ": " + why, nil
	}
	if _, resp, err := c.Reactions.CreateIssueCommentReaction(ctx, owner, name, commentID, "eyes"); err != nil && (resp == nil || resp.StatusCode >= 500) {
		return "", explain(err, "reacting to the comment")
	}
	// A live session on this thread takes it as a message.
	if s, err := h.threadSession(ctx, full, num); err != nil {
		return "", err
	} else if s != nil {
		if _, err := h.sessions.SendMessage(ctx, "", s.ID, session.Outgoing{Text: quoteRequest(who.GetLogin(), text), Key: "github-" + d.ID, Sender: Owner}); err != nil {
			return "", err
		}
		return "sent to session " + s.ID, nil
	}
	isPR := is.IsPullRequest()
	req := session.CreateRequest{
		Title: truncate(is.GetTitle(), 200), Prompt: h.firstPrompt(full, is, isPR, who.GetLogin(), text),
		Repos: []session.RepoSpec{{GitHub: full}},
		GitHub: &store.GitHubLink{Repo: full, Number: num, IsPR: isPR, Requester: who.GetLogin(), RequesterID: who.GetID(),
			RequesterName: h.displayName(ctx, c, who)},
	}
	agentName, _ := directive(text, "agent")
	req.Agent, req.Model = firstOf(agentName, h.cfg.Agent), h.cfg.Model
	if isPR {
		pr, _, err := c.PullRequests.Get(ctx, owner, name, num)
		if err != nil {
			return "", explain(err, "reading pull request #"+fmt.Sprint(num))
		}
		if pr.GetHead().GetRepo().GetFullName() != full {
			return h.refuse(ctx, c, full, num, d.ID, who, "the pull request's branch is in a fork, where Harvest cannot push")
		}
		req.Repos[0].Ref, req.Repos[0].Branch = pr.GetHead().GetRef(), pr.GetHead().GetRef()
	}
	return h.start(ctx, c, d, req)
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
	if why, err := h.allowed(ctx, full, who); err != nil {
		return "", err
	} else if why != "" {
		return h.refuse(ctx, c, full, is.GetNumber(), d.ID, who, why)
	}
	if s, err := h.threadSession(ctx, full, is.GetNumber()); err != nil || s != nil {
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
		Title: truncate(is.GetTitle(), 200), Prompt: h.firstPrompt(full, is, is.IsPullRequest(), who.GetLogin(), "Work on this issue ("+how+")."),
		Repos: []session.RepoSpec{{GitHub: full}}, Agent: h.cfg.Agent, Model: h.cfg.Model,
		GitHub: &store.GitHubLink{Repo: full, Number: is.GetNumber(), Requester: who.GetLogin(), RequesterID: who.GetID(), RequesterName: h.displayName(ctx, c, who)},
	}
	return h.start(ctx, c, d, req)
}

// start creates the session a delivery asks for, with its progress
// comment made first (found again, not made twice, when the delivery is
// processed a second time).
func (h *Hooks) start(ctx context.Context, c *github.Client, d *store.Delivery, req session.CreateRequest) (string, error) {
	req.ID = session.DerivedID(d.ID)
	l := req.GitHub
	id, err := h.progressComment(ctx, c, l.Repo, l.Number, req.ID)
	if err != nil {
		return "", err
	}
	l.Progress = id
	v, err := h.sessions.Create(ctx, Owner, req)
	if errors.Is(err, store.ErrConflict) {
		return "session " + req.ID + " (created before)", nil
	}
	if err != nil {
		if session.IsInput(err) {
			h.editProgress(ctx, c, l.Repo, id, req.ID, "❌ Harvest could not start: "+err.Error())
		}
		return "", err
	}
	return "started session " + v.ID, nil
}

// threadSession is the live session started from an issue or pull request
// (nil: none).
func (h *Hooks) threadSession(ctx context.Context, repo string, num int) (*store.Session, error) {
	ss, err := h.st.ListSessions(ctx, store.SessionFilter{GitHubRepo: repo, GitHubNumber: num})
	if err != nil {
		return nil, err
	}
	for _, s := range ss {
		if !s.State.Ended() {
			return s, nil
		}
	}
	return nil, nil
}

// prSession is the live session whose pull request (or branch) this is.
func (h *Hooks) prSession(ctx context.Context, repo string, num int, branch string) (*store.Session, error) {
	if id, ok := strings.CutPrefix(branch, "harvest/"); ok && session.ValidID(id) {
		s, err := h.st.GetSession(ctx, id)
		if err == nil && !s.State.Ended() {
			return s, nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
	}
	return h.threadSession(ctx, repo, num)
}

// onReviewComment sends a review comment on a session's pull request to
// it, with where it was made.
func (h *Hooks) onReviewComment(ctx context.Context, d *store.Delivery, e *github.PullRequestReviewCommentEvent) (string, error) {
	full, who, pr, cm := e.GetRepo().GetFullName(), e.GetSender(), e.GetPullRequest(), e.GetComment()
	if who.GetType() == "Bot" || h.isBot(ctx, who) {
		return "ignored: a bot's review comment", nil
	}
	s, err := h.prSession(ctx, full, pr.GetNumber(), pr.GetHead().GetRef())
	if err != nil || s == nil {
		if s == nil && err == nil {
			return "ignored: no live session works on this pull request", nil
		}
		return "", err
	}
	c, err := h.svc.gh.Client(repoScope(full))
	if err != nil {
		return "", err
	}
	if why, err := h.allowed(ctx, full, who); err != nil {
		return "", err
	} else if why != "" {
		return "ignored: " + why, nil
	}
	owner, name := split(full)
	if _, resp, err := c.Reactions.CreatePullRequestCommentReaction(ctx, owner, name, cm.GetID(), "eyes"); err != nil && (resp == nil || resp.StatusCode >= 500) {
		return "", explain(err, "reacting to the review comment")
	}
	line := cm.GetLine()
	if line == 0 {
		line = cm.GetOriginalLine()
	}
	text := fmt.Sprintf("@%s commented on your pull request #%d, on %s line %d:\n\n%s\n\nThe diff there:\n\n```diff\n%s\n```\n\nAddress it: commit on your branch and push.",
		who.GetLogin(), pr.GetNumber(), cm.GetPath(), line, quote(cm.GetBody()), cm.GetDiffHunk())
	if _, err := h.sessions.SendMessage(ctx, "", s.ID, session.Outgoing{Text: text, Key: "github-" + d.ID, Sender: Owner}); err != nil {
		return "", err
	}
	return "sent the review comment to session " + s.ID, nil
}

// onCheckSuite sends a failed check suite of a session's pull request to
// it, up to MaxFixAttempts times.
func (h *Hooks) onCheckSuite(ctx context.Context, d *store.Delivery, e *github.CheckSuiteEvent) (string, error) {
	cs := e.GetCheckSuite()
	switch cs.GetConclusion() {
	case "failure", "timed_out":
	default:
		return "ignored: check suite " + cs.GetConclusion(), nil
	}
	full := e.GetRepo().GetFullName()
	var s *store.Session
	var err error
	for _, pr := range cs.PullRequests {
		if s, err = h.prSession(ctx, full, pr.GetNumber(), pr.GetHead().GetRef()); err != nil || s != nil {
			break
		}
	}
	if err == nil && s == nil {
		s, err = h.prSession(ctx, full, 0, cs.GetHeadBranch())
	}
	if err != nil {
		return "", err
	}
	if s == nil {
		return "ignored: no live session's pull request", nil
	}
	if h.cfg.MaxFixAttempts < 0 || (s.GitHub != nil && s.GitHub.FixAttempts >= h.cfg.MaxFixAttempts) {
		return fmt.Sprintf("ignored: session %s had its %d fix attempts", s.ID, max(h.cfg.MaxFixAttempts, 0)), nil
	}
	c, err := h.svc.gh.Client(repoScope(full))
	if err != nil {
		return "", err
	}
	owner, name := split(full)
	runs, _, err := c.Checks.ListCheckRunsCheckSuite(ctx, owner, name, cs.GetID(), &github.ListCheckRunsOptions{ListOptions: github.ListOptions{PerPage: 50}})
	if err != nil {
		return "", explain(err, "reading the check suite's runs")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "The checks on your pull request failed (commit %s):\n", shortSHA(cs.GetHeadSHA()))
	n := 0
	for _, r := range runs.CheckRuns {
		switch r.GetConclusion() {
		case "failure", "timed_out", "cancelled", "action_required":
		default:
			continue
		}
		n++
		o := r.GetOutput()
		fmt.Fprintf(&b, "\n### %s: %s\n%s\n", r.GetName(), r.GetConclusion(), quote(truncate(strings.TrimSpace(o.GetTitle()+"\n"+o.GetSummary()+"\n"+o.GetText()), 8000)))
	}
	if n == 0 {
		return "ignored: the check suite failed with no failed run", nil
	}
	b.WriteString("\nFix what fails, commit on your branch and push.")
	// An attempt is counted once its message is stored (here, or on the
	// session's node), and only by the processing that stored it: a retry
	// of this delivery (the send failed, or its node did not answer) or a
	// second processing of it (a redelivery) counts nothing more. A crash
	// between the send and the count leaves one attempt uncounted.
	key := "github-" + d.ID
	if _, err := h.st.MessageByKey(ctx, s.ID, Owner, key); err == nil {
		return fmt.Sprintf("session %s has the failed checks already (sent before)", s.ID), nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return "", err
	}
	if _, err := h.sessions.SendMessage(ctx, "", s.ID, session.Outgoing{Text: b.String(), Key: key, Sender: Owner}); err != nil {
		return "", err
	}
	if _, err := h.st.UpdateSession(ctx, s.ID, func(st *store.Session) error {
		if st.GitHub == nil {
			st.GitHub = &store.GitHubLink{Repo: full}
		}
		st.GitHub.FixAttempts++
		return nil
	}); err != nil {
		h.log.Warn("counting a fix attempt (its message was sent)", "session", s.ID, "delivery", d.ID, "err", err)
	}
	return fmt.Sprintf("sent %d failed checks to session %s", n, s.ID), nil
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
func (h *Hooks) firstPrompt(repo string, is *github.Issue, isPR bool, who, ask string) string {
	kind := "issue"
	if isPR {
		kind = "pull request"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "@%s asked you on GitHub, in %s %s#%d (%q):\n\n%s\n", who, kind, repo, is.GetNumber(), is.GetTitle(), quote(ask))
	if body := strings.TrimSpace(is.GetBody()); body != "" {
		fmt.Fprintf(&b, "\nThe %s says:\n\n%s\n", kind, quote(truncate(body, 20000)))
	}
	if isPR {
		b.WriteString("\nYou are on the pull request's branch. Commit your changes and push them (git push) to update it.")
	} else {
		b.WriteString("\nCommit your changes on your branch and push them (git push); Harvest opens the pull request.")
	}
	return b.String()
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
