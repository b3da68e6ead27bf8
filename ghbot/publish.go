package ghbot

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// DescriptionFile is where an agent may write its pull request's
// description, in the repository's .git directory (never committed):
// the first line is the title ("# " is dropped), the rest the body.
const DescriptionFile = ".git/HARVEST_PR.md"

// maxCommits bounds the git.committed events of one turn.
const maxCommits = 100

// AfterTurn publishes a turn's work on each GitHub repository of the
// session, then tells people (tell.go): the commits the agent made on the
// session's branch become git.committed events; what it committed and did
// not push is pushed from the box through the git endpoint; once the
// branch has commits the base does not have, the pull request is opened
// (unless the session's PR mode is none), and after every later turn its
// body's Harvest section is written again. A branch with no commits of
// its own is never pushed: no empty branch, no pull request. Each
// repository is done on its own: one failing does not stop the others,
// and all failures are returned.
func (s *Service) AfterTurn(ctx context.Context, t session.TurnEnd) error {
	defer s.releaseMirrors(t.Session.ID) // its pushes held the mirrors' fetches back
	s.mu.Lock()
	env := s.env[t.Session.ID]
	s.mu.Unlock()
	var errs []error
	var works []repoWork
	for i := range t.Session.Repos {
		r := &t.Session.Repos[i] // a copy of the session's: publish keeps it current
		if r.GitHub == "" {
			continue
		}
		w := repoWork{repo: r}
		if err := s.publish(ctx, t, r, env, &w); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.GitHub, err))
			w.err = err
		}
		works = append(works, w)
	}
	sess := *t.Session
	sess.CostUSD += turnCost(t.Outcome)
	if t.Session.GitHub != nil {
		if err := s.tell(ctx, t, &sess, works); err != nil {
			errs = append(errs, err)
		}
	}
	s.finishChecks(ctx, t, &sess, works)
	return errors.Join(errs...)
}

// repoWork is what a turn did on one repository, for telling people.
type repoWork struct {
	repo *store.Repo
	// commits are the turn's new commits on the branch, oldest first.
	commits []commitLine
	// unchanged: the branch has no commit its base does not have (nothing
	// was pushed).
	unchanged bool
	// opened: the pull request was opened by this turn.
	opened bool
	err    error
}

type commitLine struct{ sha, subject string }

// turnCost is what a turn cost, as its outcome says.
func turnCost(o agent.Outcome) float64 {
	switch {
	case o.Finished != nil:
		return o.Finished.CostUSD
	case o.Failed != nil:
		return o.Failed.Cost
	}
	return 0
}

func (s *Service) publish(ctx context.Context, t session.TurnEnd, r *store.Repo, env []string, w *repoWork) (rerr error) {
	if t.Box == nil {
		return nil
	}
	c, err := s.client(t.Session)
	if err != nil {
		return err
	}
	owner, name := split(r.GitHub)
	// What GitHub has is asked while the box is read: the branch's head,
	// and the pull request (to rewrite its section) or, while there is
	// none, the open one of the branch (one opened before a crash is
	// adopted; asked even if no pull request is opened after all, one
	// request, so that none waits on the pull request's path). Neither
	// waits for the other.
	remoteHead, stop := later(ctx, func(ctx context.Context) (string, error) { return s.remoteHead(ctx, c, owner, name, r.Branch) })
	defer stop()
	var thePR func() (*github.PullRequest, error)
	var listed func() ([]*github.PullRequest, error)
	switch {
	case t.Session.PR == store.PRNone:
	case r.PRNumber != 0:
		var stop func()
		thePR, stop = later(ctx, func(ctx context.Context) (*github.PullRequest, error) {
			return s.getPR(ctx, c, owner, name, r.PRNumber)
		})
		defer stop()
	default:
		var stop func()
		listed, stop = later(ctx, func(ctx context.Context) ([]*github.PullRequest, error) {
			open, _, err := c.PullRequests.List(ctx, owner, name, &github.PullRequestListOptions{State: "open", Head: owner + ":" + r.Branch})
			return open, explain(err, "looking for the pull request of "+r.Branch)
		})
		defer stop()
	}
	leftovers := t.Outcome.Finished != nil && env != nil
	b, err := readBranch(ctx, t.Box, *r, leftovers)
	if err == nil && leftovers && b.dirty && b.current == r.Branch {
		if err := s.commitLeftovers(ctx, t, *r, env); err != nil {
			t.Emit(event.GitHubFailed{Repo: r.Name, What: "committing the turn's uncommitted changes", Error: err.Error()})
		}
		b, err = readBranch(ctx, t.Box, *r, false)
	}
	if err != nil {
		return err
	}
	head := b.head
	if !shaPattern.MatchString(head) {
		return fmt.Errorf("branch %s is gone from the box's repository: check out %s again to publish", r.Branch, r.Branch)
	}
	if head != r.Head {
		w.commits = s.reportCommits(t, *r, b.fresh)
	}
	remote, err := remoteHead()
	if err != nil {
		return err
	}
	// The new head, and what GitHub has when that is it already (the
	// agent pushed), in one write; a push to make is recorded after it.
	// When the pull request is opened now on what the agent pushed (the
	// common first turn), that write is the pull request's (openPR), not
	// one of its own before it: the store's writes queue behind the
	// other sessions' and each waits for the disk. Whatever way publish
	// returns, it is made (rec).
	var rec *repoRecord
	if head != r.Head || remote == head && remote != r.Pushed {
		pushed := r.Pushed
		if remote == head {
			pushed = remote
		}
		rec = &repoRecord{head: head, pushed: pushed}
		r.Head, r.Pushed = head, pushed
		if ahead, err := b.ahead(r.Branch); err == nil && ahead && remote == head && listed != nil {
			defer func() {
				if !rec.done {
					rerr = errors.Join(rerr, rec.write(ctx, t, r.Name))
				}
			}()
		} else if err := rec.write(ctx, t, r.Name); err != nil {
			return err
		}
	}
	if remote == "" {
		// Not on GitHub yet: pushed only when it has commits of its own
		// (asked in the box: its origin/BASE is the base as of the
		// session's clone or its last fetch).
		ahead, err := b.ahead(r.Branch)
		if err != nil {
			return err
		}
		if !ahead {
			w.unchanged = true
			return nil
		}
	}
	if remote != head {
		// Committed, not pushed: push it for the agent, from the box, so
		// the same endpoint and policy apply (git.pushed comes from it).
		if env == nil {
			return errors.New("the session has no git endpoint in its box")
		}
		if _, err := boxGit(ctx, t.Box, *r, env, "push", "--quiet", "origin", "refs/heads/"+r.Branch+":refs/heads/"+r.Branch); err != nil {
			t.Emit(event.GitHubFailed{Repo: r.Name, What: "pushing " + r.Branch, Error: err.Error()})
			return nil
		}
		remote = head
	}
	if remote != r.Pushed {
		if err := t.Update(ctx, func(st *store.Session) { setRepo(st, r.Name, func(x *store.Repo) { x.Pushed = remote }) }); err != nil {
			return err
		}
		r.Pushed = remote
	}
	if t.Session.PR == store.PRNone {
		return nil
	}
	d := s.description(t, *r, &b)
	if r.PRNumber != 0 {
		pr, err := thePR()
		if err != nil {
			return err
		}
		return s.updatePR(ctx, t, c, r, pr, d)
	}
	ahead, err := b.ahead(r.Branch)
	if err != nil {
		return err
	}
	if !ahead {
		w.unchanged = true
		return nil // nothing the base does not have
	}
	w.opened = true
	return s.openPR(ctx, t, c, r, d, listed, rec)
}

// repoRecord is a write of a repository's head and what GitHub has of it,
// put off to be made with the pull request's (openPR) or on its own.
type repoRecord struct {
	head, pushed string
	done         bool
}

func (rr *repoRecord) set(x *store.Repo) { x.Head, x.Pushed = rr.head, rr.pushed }

// write makes it on its own.
func (rr *repoRecord) write(ctx context.Context, t session.TurnEnd, repo string) error {
	rr.done = true
	return t.Update(ctx, func(st *store.Session) { setRepo(st, repo, rr.set) })
}

// commitLeftovers commits what a finished turn left uncommitted on the
// session's branch (the agent was told to commit; a pull request should
// not lose what it forgot), in the box, as the session's author, with the
// turn's result as message. Files .gitignore ignores stay out. The caller
// saw the work tree dirty, on the session's branch.
func (s *Service) commitLeftovers(ctx context.Context, t session.TurnEnd, r store.Repo, env []string) error {
	msg := strings.TrimSpace(t.Outcome.Finished.Result)
	msg, _, _ = strings.Cut(msg, "\n")
	msg = strings.TrimSpace(strings.TrimLeft(msg, "# "))
	if msg == "" {
		msg = "Harvest: the work of turn " + t.Turn
	}
	if len(msg) > 72 {
		msg = msg[:69] + "..."
	}
	if _, err := boxGit(ctx, t.Box, r, env, "add", "-A"); err != nil {
		return err
	}
	_, err := boxGit(ctx, t.Box, r, env, "commit", "-q", "--no-verify", "-m", msg, "-m", "Committed by Harvest: the agent left these changes uncommitted at the end of "+t.Turn+".")
	return err
}

// remoteHead is the branch's commit on GitHub ("" when it does not exist).
func (s *Service) remoteHead(ctx context.Context, c *github.Client, owner, name, branch string) (string, error) {
	b, resp, err := c.Repositories.GetBranch(ctx, owner, name, branch, 0)
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return "", nil
	}
	if err != nil {
		return "", explain(err, "reading branch "+branch)
	}
	return b.GetCommit().GetSHA(), nil
}

// reportCommits emits git.committed for the branch's new commits (read
// in the box), oldest first, and returns them.
func (s *Service) reportCommits(t session.TurnEnd, r store.Repo, fresh []freshCommit) []commitLine {
	var cs []commitLine
	for _, c := range fresh {
		t.Emit(event.GitCommitted{Repo: r.Name, Branch: r.Branch, SHA: c.sha, Author: c.author, Message: c.subject})
		cs = append(cs, commitLine{sha: c.sha, subject: c.subject})
	}
	return cs
}

// Harvest's section of a pull request's body: between these markers,
// written again after every turn; the rest of the body is the people's,
// never touched after the pull request is opened. A body whose markers a
// person removed is left alone from then on (they took the section out),
// and a pull request Harvest adopted (a person's) never gets one.
const (
	sectionBegin = "<!-- harvest:begin (Harvest rewrites this part after each turn; edit outside it) -->"
	sectionEnd   = "<!-- harvest:end -->"
)

// openPR opens the session's pull request for r (or adopts the open one
// of its branch, after a crash between opening it and storing it), asks
// the requester to review it and labels it.
func (s *Service) openPR(ctx context.Context, t session.TurnEnd, c *github.Client, r *store.Repo, d prText, listed func() ([]*github.PullRequest, error), rec *repoRecord) error {
	owner, name := split(r.GitHub)
	var pr *github.PullRequest
	open, err := listed()
	if err != nil {
		return err
	}
	created := len(open) == 0
	if !created {
		pr = open[0]
	} else {
		body := sectionBegin + "\n" + d.section + "\n" + sectionEnd
		if d.template != "" {
			body += "\n\n" + d.template
		}
		pr, _, err = c.PullRequests.Create(ctx, owner, name, &github.NewPullRequest{
			Title: github.Ptr(d.title), Head: github.Ptr(r.Branch), Base: github.Ptr(r.Base), Body: github.Ptr(truncate(body, 60000)),
			Draft: github.Ptr(t.Session.PR != store.PRReady), MaintainerCanModify: github.Ptr(true),
		})
		if err != nil {
			return explain(err, "opening the pull request of "+r.Branch)
		}
	}
	num, url := pr.GetNumber(), pr.GetHTMLURL()
	err = t.Update(ctx, func(st *store.Session) {
		setRepo(st, r.Name, func(x *store.Repo) {
			if rec != nil && !rec.done {
				rec.set(x)
			}
			x.PRNumber, x.PRURL = num, url
		})
	})
	if rec != nil && err == nil {
		rec.done = true
	}
	if err != nil {
		return err
	}
	r.PRNumber, r.PRURL = num, url
	t.Emit(event.PROpened{Repo: r.Name, Number: num, URL: url, Branch: r.Branch, Base: r.Base, Draft: pr.GetDraft()})
	if created {
		s.dressPR(ctx, t, c, r, pr)
	}
	return nil
}

// dressPR asks the person who asked to review a new pull request (not
// when they wrote it: GitHub refuses an author as reviewer) and adds the
// configured labels. Neither is worth failing the turn: GitHub's refusal
// (a 422: not a collaborator, say) is logged.
func (s *Service) dressPR(ctx context.Context, t session.TurnEnd, c *github.Client, r *store.Repo, pr *github.PullRequest) {
	owner, name := split(r.GitHub)
	if l := t.Session.GitHub; l != nil && l.Requester != "" && !strings.EqualFold(l.Requester, pr.GetUser().GetLogin()) {
		if _, _, err := c.PullRequests.RequestReviewers(ctx, owner, name, pr.GetNumber(), github.ReviewersRequest{Reviewers: []string{l.Requester}}); err != nil {
			s.log.Warn("asking for a review", "session", t.Session.ID, "pr", pr.GetHTMLURL(), "reviewer", l.Requester, "err", explain(err, "requesting a review"))
		}
	}
	if len(s.cfg.PRLabels) > 0 {
		// {"labels": [...]}, as GitHub's description has it (go-github's
		// AddLabelsToIssue sends a bare array, which it does not).
		req, err := c.NewRequest("POST", fmt.Sprintf("repos/%s/%s/issues/%d/labels", owner, name, pr.GetNumber()), map[string][]string{"labels": s.cfg.PRLabels})
		if err == nil {
			_, err = c.Do(ctx, req, &[]*github.Label{})
		}
		if err != nil {
			s.log.Warn("labelling the pull request", "session", t.Session.ID, "pr", pr.GetHTMLURL(), "err", explain(err, "adding labels"))
		}
	}
}

// getPR reads pull request num.
func (s *Service) getPR(ctx context.Context, c *github.Client, owner, name string, num int) (*github.PullRequest, error) {
	pr, _, err := c.PullRequests.Get(ctx, owner, name, num)
	if err != nil {
		return nil, explain(err, fmt.Sprintf("reading pull request #%d", num))
	}
	return pr, nil
}

// updatePR writes the Harvest section of the session's pull request pr
// again after a turn (when the body still has its markers), keeping the
// rest of the body as people left it.
func (s *Service) updatePR(ctx context.Context, t session.TurnEnd, c *github.Client, r *store.Repo, pr *github.PullRequest, d prText) error {
	owner, name := split(r.GitHub)
	if pr.GetState() != "open" {
		return nil
	}
	body := pr.GetBody()
	if !strings.Contains(body, sectionBegin) {
		return nil // no section: a person's pull request, or they took it out
	}
	nb, ok := replaceSection(body, d.section)
	if !ok || nb == body || len(nb) > 65000 {
		return nil
	}
	_, _, err := c.PullRequests.Edit(ctx, owner, name, r.PRNumber, &github.PullRequest{Body: github.Ptr(nb)})
	return explain(err, fmt.Sprintf("updating the description of pull request #%d", r.PRNumber))
}

// replaceSection writes section between body's markers, keeping the rest
// of body; false when body has no whole section (no beginning, or no end
// after it: whoever took a marker out made the section theirs).
func replaceSection(body, section string) (string, bool) {
	i := strings.Index(body, sectionBegin)
	if i < 0 {
		return body, false
	}
	j := strings.Index(body[i:], sectionEnd)
	if j < 0 {
		return body, false
	}
	return body[:i] + sectionBegin + "\n" + section + "\n" + body[i+j:], true
}

// prText is a pull request's description as Harvest writes it.
type prText struct {
	title string
	// section is Harvest's part of the body (between the markers).
	section string
	// template is the repository's pull request template, for people to
	// fill in (outside the section), when the agent wrote no description.
	template string
}

// description is the pull request's title and Harvest's section of its
// body, from the change itself:
//
//   - the agent's description file (DescriptionFile: first line the
//     title, the rest the body), read in the box (br);
//   - else the title is the branch's one commit's subject, or the first
//     line of the turn's result, or its latest commit's subject; the body
//     the turn's result;
//
// then the branch's commits, the issue it fixes and a link to the
// session. Never the title: the pull request is the change, not
// the request.
func (s *Service) description(t session.TurnEnd, r store.Repo, br *branchRead) prText {
	var d prText
	var result string
	if f := t.Outcome.Finished; f != nil {
		result = strings.TrimSpace(f.Result)
	}
	var body string
	if f := strings.TrimSpace(br.file); f != "" {
		first, rest, _ := strings.Cut(f, "\n")
		d.title, body = strings.TrimSpace(strings.TrimLeft(first, "# ")), strings.TrimSpace(rest)
	}
	tpl, commits := strings.TrimSpace(br.template), br.commits
	if d.title == "" && len(commits) == 1 {
		d.title = commits[0].subject
	}
	if d.title == "" {
		first, _, _ := strings.Cut(result, "\n")
		d.title = strings.TrimSpace(strings.TrimLeft(first, "# "))
	}
	if d.title == "" && len(commits) > 0 {
		d.title = commits[0].subject // the latest
	}
	if d.title == "" {
		d.title = "Harvest: " + r.Branch
	}
	d.title = truncate(d.title, 200)
	if body == "" {
		body, d.template = result, tpl
	}
	var b strings.Builder
	b.WriteString(truncate(body, 40000))
	if len(commits) > 0 {
		b.WriteString("\n\n<details><summary>Commits</summary>\n\n")
		for i, cm := range commits {
			if i == 20 {
				b.WriteString("- …\n")
				break
			}
			fmt.Fprintf(&b, "- %s %s\n", cm.sha[:7], oneLine(cm.subject, 120))
		}
		b.WriteString("\n</details>")
	}
	if l := t.Session.GitHub; l != nil && strings.EqualFold(l.Repo, r.GitHub) {
		switch {
		case l.Fork != "" && r.From != "":
			fmt.Fprintf(&b, "\n\nBuilds on #%d, whose branch `%s` is in the fork %s (Harvest cannot push there): this branch starts from its head %s, so it carries that pull request's commits too. "+
				"Merge this one instead of #%d, or take its commits after %s into #%d.", l.Number, l.ForkBranch, l.Fork, shortSHA(r.From), l.Number, shortSHA(r.From), l.Number)
		case !l.IsPR:
			fmt.Fprintf(&b, "\n\nFixes #%d", l.Number)
		}
	}
	fmt.Fprintf(&b, "\n\nMade by Harvest session %s.", s.sessionLink(t.Session.ID))
	// What the agent wrote cannot end the section early (or start another).
	d.section = strings.TrimSpace(strings.NewReplacer(sectionBegin, "", sectionEnd, "").Replace(b.String()))
	return d
}

// sessionLink names a session, linked when the server has a public URL.
func (s *Service) sessionLink(id string) string {
	if s.cfg.BaseURL != "" {
		return fmt.Sprintf("[%s](%s/sessions/%s)", id, strings.TrimRight(s.cfg.BaseURL, "/"), id)
	}
	return "`" + id + "`"
}

// notFrom is the rev that leaves out the commits r's branch did not make:
// ^From, or (nothing to leave out) ^ its base again.
func notFrom(r store.Repo) string {
	if r.From != "" {
		return "^" + r.From
	}
	return "^refs/remotes/origin/" + r.Base
}

func setRepo(st *store.Session, name string, fn func(*store.Repo)) {
	for i := range st.Repos {
		if st.Repos[i].Name == name {
			fn(&st.Repos[i])
		}
	}
}
