package ghbot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/sandbox"
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
// session: the commits the agent made on the session's branch become
// git.committed events; what it committed and did not push is pushed from
// the box through the git endpoint; and once the branch is on GitHub with
// commits the base does not have, the pull request is opened (unless the
// session's PR mode is none). Each repository is done on its own: one
// failing does not stop the others, and all failures are returned.
func (s *Service) AfterTurn(ctx context.Context, t session.TurnEnd) error {
	s.mu.Lock()
	env := s.env[t.Session.ID]
	s.mu.Unlock()
	var errs []error
	for i := range t.Session.Repos {
		r := &t.Session.Repos[i] // a copy of the session's: publish keeps it current
		if r.GitHub == "" {
			continue
		}
		if err := s.publish(ctx, t, r, env); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.GitHub, err))
		}
	}
	if t.Session.GitHub != nil {
		sess := *t.Session
		sess.CostUSD += turnCost(t.Outcome)
		if err := s.updateProgress(ctx, &sess, t.Outcome); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

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

func (s *Service) publish(ctx context.Context, t session.TurnEnd, r *store.Repo, env []string) error {
	if t.Box == nil {
		return nil
	}
	if t.Outcome.Finished != nil && env != nil {
		if err := s.commitLeftovers(ctx, t, *r, env); err != nil {
			t.Emit(event.GitHubFailed{Repo: r.Name, What: "committing the turn's uncommitted changes", Error: err.Error()})
		}
	}
	out, err := boxGit(ctx, t.Box, *r, nil, "rev-parse", "--verify", "--quiet", "refs/heads/"+r.Branch+"^{commit}")
	head := strings.TrimSpace(out)
	if err != nil || !shaPattern.MatchString(head) {
		return fmt.Errorf("branch %s is gone from the box's repository: check out %s again to publish", r.Branch, r.Branch)
	}
	if head != r.Head {
		s.reportCommits(ctx, t, *r, head)
		if err := t.Update(ctx, func(st *store.Session) { setRepo(st, r.Name, func(x *store.Repo) { x.Head = head }) }); err != nil {
			return err
		}
		r.Head = head
	}
	c, err := s.client(t.Session)
	if err != nil {
		return err
	}
	owner, name := split(r.GitHub)
	remote, err := s.remoteHead(ctx, c, owner, name, r.Branch)
	if err != nil {
		return err
	}
	if remote != head && head != "" {
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
	if remote == "" {
		return nil // nothing on GitHub yet: no pull request
	}
	if remote != r.Pushed {
		if err := t.Update(ctx, func(st *store.Session) { setRepo(st, r.Name, func(x *store.Repo) { x.Pushed = remote }) }); err != nil {
			return err
		}
		r.Pushed = remote
	}
	if t.Session.PR == store.PRNone || r.PRNumber != 0 {
		return nil
	}
	// Whether the branch has commits its base does not, asked in the box
	// (its origin/BASE is the base as of the session's clone or its last
	// fetch).
	n, err := boxGit(ctx, t.Box, *r, nil, "rev-list", "--count", "refs/remotes/origin/"+r.Base+".."+remote, "--")
	if err != nil {
		return err
	}
	if strings.TrimSpace(n) == "0" {
		return nil // nothing the base does not have
	}
	return s.openPR(ctx, t, c, r)
}

// commitLeftovers commits what a finished turn left uncommitted on the
// session's branch (the agent was told to commit; a pull request should
// not lose what it forgot), in the box, as the session's author, with the
// turn's result as message. Files .gitignore ignores stay out.
func (s *Service) commitLeftovers(ctx context.Context, t session.TurnEnd, r store.Repo, env []string) error {
	st, err := boxGit(ctx, t.Box, r, nil, "status", "--porcelain", "--untracked-files=all")
	if err != nil || strings.TrimSpace(st) == "" {
		return err
	}
	if b, err := boxGit(ctx, t.Box, r, nil, "symbolic-ref", "--short", "HEAD"); err != nil || strings.TrimSpace(b) != r.Branch {
		return nil // the agent is elsewhere: not its session's branch to commit on
	}
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
	_, err = boxGit(ctx, t.Box, r, env, "commit", "-q", "--no-verify", "-m", msg, "-m", "Committed by Harvest: the agent left these changes uncommitted at the end of "+t.Turn+".")
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

// reportCommits emits git.committed for the branch's new commits, oldest
// first (read in the box).
func (s *Service) reportCommits(ctx context.Context, t session.TurnEnd, r store.Repo, head string) {
	from := r.Head
	if from == "" {
		from = "refs/remotes/origin/" + r.Base
	}
	out, err := boxGit(ctx, t.Box, r, nil, "log", "--reverse", fmt.Sprintf("--max-count=%d", maxCommits),
		"--format=%H%x1f%an <%ae>%x1f%s", from+".."+head, "--")
	if err != nil {
		// The old head may be gone (the agent rewrote history): report
		// the head alone.
		out, err = boxGit(ctx, t.Box, r, nil, "log", "-1", "--format=%H%x1f%an <%ae>%x1f%s", head, "--")
		if err != nil {
			return
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.SplitN(line, "\x1f", 3)
		if len(f) != 3 || !shaPattern.MatchString(f[0]) {
			continue
		}
		t.Emit(event.GitCommitted{Repo: r.Name, Branch: r.Branch, SHA: f[0], Author: f[1], Message: f[2]})
	}
}

// openPR opens the session's pull request for r (or adopts the open one
// of its branch, after a crash between opening it and storing it).
func (s *Service) openPR(ctx context.Context, t session.TurnEnd, c *github.Client, r *store.Repo) error {
	owner, name := split(r.GitHub)
	var pr *github.PullRequest
	open, _, err := c.PullRequests.List(ctx, owner, name, &github.PullRequestListOptions{State: "open", Head: owner + ":" + r.Branch})
	if err != nil {
		return explain(err, "looking for the pull request of "+r.Branch)
	}
	if len(open) > 0 {
		pr = open[0]
	} else {
		title, body := s.description(ctx, t, *r)
		pr, _, err = c.PullRequests.Create(ctx, owner, name, &github.NewPullRequest{
			Title: github.Ptr(title), Head: github.Ptr(r.Branch), Base: github.Ptr(r.Base), Body: github.Ptr(body),
			Draft: github.Ptr(t.Session.PR != store.PRReady), MaintainerCanModify: github.Ptr(true),
		})
		if err != nil {
			return explain(err, "opening the pull request of "+r.Branch)
		}
	}
	num, url := pr.GetNumber(), pr.GetHTMLURL()
	if err := t.Update(ctx, func(st *store.Session) {
		setRepo(st, r.Name, func(x *store.Repo) { x.PRNumber, x.PRURL = num, url })
	}); err != nil {
		return err
	}
	r.PRNumber, r.PRURL = num, url
	t.Emit(event.PROpened{Repo: r.Name, Number: num, URL: url, Branch: r.Branch, Base: r.Base, Draft: pr.GetDraft()})
	return nil
}

// description is the pull request's title and body: the agent's
// description file if it wrote one, else the session's title (or the
// turn's result) and the result; the issue it fixes; the repository's
// template; a link to the session.
func (s *Service) description(ctx context.Context, t session.TurnEnd, r store.Repo) (title, body string) {
	var result string
	if f := t.Outcome.Finished; f != nil {
		result = strings.TrimSpace(f.Result)
	}
	if d, err := readBoxFile(ctx, t.Box, r, DescriptionFile); err == nil && strings.TrimSpace(d) != "" {
		first, rest, _ := strings.Cut(strings.TrimSpace(d), "\n")
		title, body = strings.TrimSpace(strings.TrimLeft(first, "# ")), strings.TrimSpace(rest)
	}
	if title == "" {
		title = t.Session.Title
	}
	if title == "" {
		first, _, _ := strings.Cut(result, "\n")
		title = strings.TrimSpace(strings.TrimLeft(first, "# "))
	}
	if title == "" {
		title = "Harvest: " + r.Branch
	}
	if len(title) > 200 {
		title = title[:200]
	}
	if body == "" {
		body = result
		if tpl, err := readBoxFile(ctx, t.Box, r, ".github/pull_request_template.md"); err == nil && strings.TrimSpace(tpl) != "" {
			body = strings.TrimSpace(body + "\n\n" + tpl)
		}
	}
	var tail []string
	if l := t.Session.GitHub; l != nil && !l.IsPR && strings.EqualFold(l.Repo, r.GitHub) {
		tail = append(tail, fmt.Sprintf("Fixes #%d", l.Number))
	}
	if s.cfg.BaseURL != "" {
		tail = append(tail, fmt.Sprintf("Made by Harvest session [%s](%s/sessions/%s).", t.Session.ID, strings.TrimRight(s.cfg.BaseURL, "/"), t.Session.ID))
	} else {
		tail = append(tail, "Made by Harvest session "+t.Session.ID+".")
	}
	body = strings.TrimSpace(body + "\n\n" + strings.Join(tail, "\n\n"))
	if len(body) > 60000 {
		body = body[:60000]
	}
	return title, body
}

// readBoxFile reads a small file of the box's repository, through the box
// (a symlink there resolves in the box, never on the host).
func readBoxFile(ctx context.Context, box *sandbox.Sandbox, r store.Repo, rel string) (string, error) {
	var out bytes.Buffer
	st, err := box.Run(ctx, &sandbox.Cmd{
		Args: []string{"head", "-c", "65536", "--", rel}, Dir: box.WorkspacePath(r.Name),
		Stdout: &out, OutputLimit: 64 << 10, Timeout: 30 * time.Second,
	})
	if err != nil {
		return "", err
	}
	if !st.Success() {
		return "", fmt.Errorf("reading %s in the box: %s", rel, st)
	}
	return out.String(), nil
}

func setRepo(st *store.Session, name string, fn func(*store.Repo)) {
	for i := range st.Repos {
		if st.Repos[i].Name == name {
			fn(&st.Repos[i])
		}
	}
}
