package ghsim

// REST handlers, continued from rest.go: reactions, pull requests and checks.

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

type reactionRequest struct {
	Content string `json:"content"`
}

// react adds a reaction to list, or finds the one that user already gave
// with that content (200, as GitHub answers).
func (s *Server) react(w http.ResponseWriter, req *http.Request, tok *token, list *[]*reaction) {
	var body reactionRequest
	if !decodeBody(w, req, &body) {
		return
	}
	if !slices.Contains(reactionContents, body.Content) {
		invalid(w, "Reaction", "content", "invalid", "")
		return
	}
	actor := s.tokenActor(tok)
	for _, r := range *list {
		if r.user == actor && r.content == body.Content {
			writeJSON(w, http.StatusOK, s.wReaction(r))
			return
		}
	}
	r := &reaction{id: s.newID(), user: actor, content: body.Content, created: s.now()}
	*list = append(*list, r)
	writeJSON(w, http.StatusCreated, s.wReaction(r))
}

func (s *Server) reactIssueComment(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, tok, ok := s.commentFor(w, req)
	if ok && s.canWriteOn(w, tok, c.issue) {
		s.react(w, req, tok, &c.reactions)
	}
}

func (s *Server) reactIssue(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	is, tok, ok := s.issueFor(w, req, "metadata", "read")
	if ok && s.canWriteOn(w, tok, is) {
		s.react(w, req, tok, &is.reactions)
	}
}

func (s *Server) reactReviewComment(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, tok, ok := s.repoFor(w, req, "metadata", "read")
	if !ok {
		return
	}
	id, _ := strconv.ParseInt(req.PathValue("comment_id"), 10, 64)
	c := s.findReviewComment(r, id)
	if c == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	if s.canWriteOn(w, tok, c.pr) {
		s.react(w, req, tok, &c.reactions)
	}
}

type pullRequest struct {
	Title               *string `json:"title"`
	Head                string  `json:"head"`
	Base                string  `json:"base"`
	Body                *string `json:"body"`
	Draft               bool    `json:"draft"`
	MaintainerCanModify *bool   `json:"maintainer_can_modify"`
	Issue               *int    `json:"issue"`
}

func (s *Server) createPull(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, tok, ok := s.repoFor(w, req, "pull_requests", "write")
	if !ok {
		return
	}
	if tok == nil {
		writeError(w, http.StatusUnauthorized, "Requires authentication")
		return
	}
	var body pullRequest
	if !decodeBody(w, req, &body) {
		return
	}
	switch {
	case body.Title == nil && body.Issue == nil:
		invalid(w, "PullRequest", "title", "missing_field", "")
		return
	case body.Head == "":
		invalid(w, "PullRequest", "head", "missing_field", "")
		return
	case body.Base == "":
		invalid(w, "PullRequest", "base", "missing_field", "")
		return
	}
	hr, head, known := s.pullHead(r, body.Head)
	var headSHA string
	if known {
		headSHA, ok = hr.branches[head]
	}
	if !known || !ok {
		invalid(w, "PullRequest", "head", "invalid", "")
		return
	}
	baseSHA, ok := r.branches[body.Base]
	if !ok {
		invalid(w, "PullRequest", "base", "invalid", "")
		return
	}
	if headSHA == baseSHA {
		writeError(w, http.StatusUnprocessableEntity, "Validation Failed",
			fieldError{Resource: "PullRequest", Code: "custom", Message: "No commits between " + body.Base + " and " + head})
		return
	}
	for _, is := range r.issues {
		if is.pr != nil && is.state == "open" && is.pr.headRepo == hr && is.pr.head == head && is.pr.base == body.Base {
			writeError(w, http.StatusUnprocessableEntity, "Validation Failed",
				fieldError{Resource: "PullRequest", Code: "custom", Message: "A pull request already exists for " + hr.owner.login + ":" + head + "."})
			return
		}
	}
	title := ""
	if body.Title != nil {
		title = *body.Title
	}
	text := ""
	if body.Body != nil {
		text = *body.Body
	}
	is, err := s.openPull(req.Context(), r, s.tokenActor(tok), tokenApp(tok), title, text, hr, head, body.Base, body.Draft)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if body.MaintainerCanModify != nil {
		is.pr.maintMod = *body.MaintainerCanModify
	}
	writeJSON(w, http.StatusCreated, s.wFullPR(is))
}

// openPull records a pull request (also an issue) whose head is branch
// head of hr (r or a fork in its network), writes its refs/pull/N/head
// and queues pull_request opened. The branches must exist.
func (s *Server) openPull(ctx context.Context, r *repo, by *user, via *app, title, body string, hr *repo, head, base string, draft bool) (*issue, error) {
	now := s.now()
	is := &issue{id: s.newID(), repo: r, number: r.nextNumber + 1, title: title, body: body, user: by, app: via,
		state: "open", created: now, updated: now,
		pr: &pull{id: s.newID(), head: head, headRepo: hr, headSHA: hr.branches[head], base: base, baseSHA: r.branches[base],
			draft: draft, maintMod: true}}
	if err := s.writePullRef(ctx, is); err != nil {
		return nil, fmt.Errorf("writing refs/pull/%d/head: %w", is.number, err)
	}
	r.nextNumber++
	r.issues[is.number] = is
	s.emitPR(r, is, "opened", by, nil)
	return is, nil
}

func (s *Server) listPulls(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, _, ok := s.repoFor(w, req, "pull_requests", "read")
	if !ok {
		return
	}
	q := req.URL.Query()
	state := cmp.Or(q.Get("state"), "open")
	if state != "open" && state != "closed" && state != "all" {
		invalid(w, "PullRequest", "state", "invalid", "")
		return
	}
	out := []wirePR{}
	for _, is := range sortedIssues(r) {
		if is.pr == nil || (state != "all" && is.state != state) {
			continue
		}
		if h := q.Get("head"); h != "" {
			o, b, _ := strings.Cut(h, ":")
			if !strings.EqualFold(o, is.pr.headRepo.owner.login) || (b != "" && b != is.pr.head) {
				continue
			}
		}
		if b := q.Get("base"); b != "" && b != is.pr.base {
			continue
		}
		out = append(out, s.wPR(is))
	}
	if q.Get("direction") != "asc" {
		slices.Reverse(out) // newest first, GitHub's default for sort=created
	}
	writeJSON(w, http.StatusOK, paginate(w, req, out))
}

// pullFor resolves {pull_number}; on failure it has written the error.
func (s *Server) pullFor(w http.ResponseWriter, req *http.Request, level string) (*issue, *token, bool) {
	r, tok, ok := s.repoFor(w, req, "pull_requests", level)
	if !ok {
		return nil, nil, false
	}
	n, _ := strconv.Atoi(req.PathValue("pull_number"))
	is := r.issues[n]
	if is == nil || is.pr == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return nil, nil, false
	}
	return is, tok, true
}

func (s *Server) getPull(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	is, _, ok := s.pullFor(w, req, "read")
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, s.wFullPR(is))
}

type pullUpdate struct {
	Title               *string `json:"title"`
	Body                *string `json:"body"`
	State               *string `json:"state"`
	Base                *string `json:"base"`
	MaintainerCanModify *bool   `json:"maintainer_can_modify"`
}

func (s *Server) updatePull(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	is, tok, ok := s.pullFor(w, req, "write")
	if !ok {
		return
	}
	actor := s.tokenActor(tok)
	if tok == nil || (tok.kind == tokPAT && actor != is.user && s.role(actor, is.repo).rank() < PermWrite.rank()) {
		writeError(w, http.StatusForbidden, "Resource not accessible by personal access token")
		return
	}
	var body pullUpdate
	if !decodeBody(w, req, &body) {
		return
	}
	if body.State != nil && *body.State != "open" && *body.State != "closed" {
		invalid(w, "PullRequest", "state", "invalid", "")
		return
	}
	if body.Base != nil {
		sha, ok := is.repo.branches[*body.Base]
		if !ok {
			invalid(w, "PullRequest", "base", "invalid", "")
			return
		}
		is.pr.base, is.pr.baseSHA = *body.Base, sha
	}
	if body.Title != nil {
		is.title = *body.Title
	}
	if body.Body != nil {
		is.body = *body.Body
	}
	if body.MaintainerCanModify != nil {
		is.pr.maintMod = *body.MaintainerCanModify
	}
	is.updated = s.now()
	if body.State != nil && *body.State != is.state {
		is.state = *body.State
		if is.state == "closed" {
			is.closed = s.now()
			s.emitPR(is.repo, is, "closed", actor, nil)
		} else {
			is.closed = time.Time{}
		}
	}
	writeJSON(w, http.StatusOK, s.wFullPR(is))
}

type replyRequest struct {
	Body string `json:"body"`
}

// reviewCommentRequest is POST /pulls/{n}/comments' body.
type reviewCommentRequest struct {
	Body      string `json:"body"`
	CommitID  string `json:"commit_id"`
	Path      string `json:"path"`
	Line      int    `json:"line"`
	Side      string `json:"side"`
	InReplyTo int64  `json:"in_reply_to"`
}

// createReviewComment serves a new comment on a diff line, or a reply
// (in_reply_to), which is how go-github's CreateCommentInReplyTo replies.
func (s *Server) createReviewComment(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	is, tok, ok := s.pullFor(w, req, "write")
	if !ok {
		return
	}
	if tok == nil {
		writeError(w, http.StatusUnauthorized, "Requires authentication")
		return
	}
	var body reviewCommentRequest
	if !decodeBody(w, req, &body) {
		return
	}
	if body.Body == "" {
		invalid(w, "PullRequestReviewComment", "body", "missing_field", "")
		return
	}
	if body.InReplyTo != 0 {
		s.reply(w, tok, is, body.InReplyTo, body.Body)
		return
	}
	if body.Path == "" || body.Line == 0 {
		invalid(w, "PullRequestReviewComment", "path", "missing_field", "")
		return
	}
	hunk, err := s.diffHunk(req.Context(), is.repo, is.pr.baseSHA, is.pr.headSHA, body.Path, body.Line)
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, "Validation Failed", fieldError{Resource: "PullRequestReviewComment",
			Field: "pull_request_review_thread.line", Code: "custom", Message: "could not be resolved"})
		return
	}
	c := s.addReviewComment(is, s.tokenActor(tok), tokenApp(tok), body.Body, body.Path, body.Line, is.pr.headSHA, hunk, nil)
	writeJSON(w, http.StatusCreated, s.wReviewComment(c))
}

func (s *Server) replyReviewComment(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	is, tok, ok := s.pullFor(w, req, "write")
	if !ok {
		return
	}
	if tok == nil {
		writeError(w, http.StatusUnauthorized, "Requires authentication")
		return
	}
	id, _ := strconv.ParseInt(req.PathValue("comment_id"), 10, 64)
	var body replyRequest
	if !decodeBody(w, req, &body) {
		return
	}
	if body.Body == "" {
		invalid(w, "PullRequestReviewComment", "body", "missing_field", "")
		return
	}
	s.reply(w, tok, is, id, body.Body)
}

// reply answers review comment id of is.
func (s *Server) reply(w http.ResponseWriter, tok *token, is *issue, id int64, text string) {
	var parent *reviewComment
	for _, c := range is.pr.review {
		if c.id == id {
			parent = c
		}
	}
	if parent == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	c := s.addReviewComment(is, s.tokenActor(tok), tokenApp(tok), text, parent.path, parent.line, parent.commitID, parent.diffHunk, nil)
	c.inReplyTo = parent.id
	writeJSON(w, http.StatusCreated, s.wReviewComment(c))
}

// addReviewComment records a review comment of rv and queues
// pull_request_review_comment created. With rv nil the comment is a
// review of its own (a single comment, or a reply in a thread, makes one
// on GitHub): the review is recorded and pull_request_review submitted
// queued after the comment's event.
func (s *Server) addReviewComment(is *issue, by *user, via *app, body, path string, line int, commit, hunk string, rv *review) *reviewComment {
	now := s.now()
	single := rv == nil
	if single {
		rv = s.newReview(is, by, "", "COMMENTED")
	}
	c := &reviewComment{id: s.newID(), pr: is, body: body, user: by, app: via, path: path, line: line,
		commitID: commit, diffHunk: hunk, review: rv, created: now, updated: now}
	is.pr.review = append(is.pr.review, c)
	rv.comments = append(rv.comments, c)
	s.emitReviewComment(c, by)
	if single {
		s.emitReview(rv)
	}
	return c
}

type wireCheckRuns struct {
	TotalCount int            `json:"total_count"`
	CheckRuns  []wireCheckRun `json:"check_runs"`
}

func (s *Server) listCheckRuns(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, _, ok := s.repoFor(w, req, "checks", "read")
	if !ok {
		return
	}
	id, _ := strconv.ParseInt(req.PathValue("check_suite_id"), 10, 64)
	cs := s.suites[id]
	if cs == nil || cs.repo != r {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	out := wireCheckRuns{CheckRuns: []wireCheckRun{}}
	for _, cr := range cs.runs {
		if n := req.URL.Query().Get("check_name"); n != "" && n != cr.name {
			continue
		}
		out.CheckRuns = append(out.CheckRuns, s.wCheckRun(cr))
	}
	out.TotalCount = len(out.CheckRuns)
	out.CheckRuns = paginate(w, req, out.CheckRuns)
	writeJSON(w, http.StatusOK, out)
}
