package ghsim

// Reviews, merging and closing pull requests, editing comments as a
// person, and deleting branches.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

type wireReviewHTMLLinks struct {
	HTML        wireHref `json:"html"`
	PullRequest wireHref `json:"pull_request"`
}

// wireReview is a review: REST answers its state in capitals
// (COMMENTED), webhooks in lower case (commented), as GitHub does.
type wireReview struct {
	ID                int64               `json:"id"`
	NodeID            string              `json:"node_id"`
	User              *wireUser           `json:"user"`
	Body              *string             `json:"body"`
	State             string              `json:"state"`
	HTMLURL           string              `json:"html_url"`
	PullRequestURL    string              `json:"pull_request_url"`
	Links             wireReviewHTMLLinks `json:"_links"`
	SubmittedAt       *string             `json:"submitted_at"`
	CommitID          string              `json:"commit_id"`
	AuthorAssociation string              `json:"author_association"`
}

func (s *Server) wReview(rv *review, hook bool) wireReview {
	r := rv.pr.repo
	html := fmt.Sprintf("%s/%s/pull/%d#pullrequestreview-%d", s.base, r.fullName(), rv.pr.number, rv.id)
	pr := fmt.Sprintf("%s/repos/%s/pulls/%d", s.api, r.fullName(), rv.pr.number)
	w := wireReview{ID: rv.id, NodeID: nodeID("PullRequestReview", rv.id), User: s.wUser(rv.user),
		State: rv.state, HTMLURL: html, PullRequestURL: pr,
		Links:       wireReviewHTMLLinks{HTML: wireHref{html}, PullRequest: wireHref{pr}},
		SubmittedAt: tsOrNil(rv.submitted), CommitID: rv.commitID, AuthorAssociation: authorAssociation(r, rv.user)}
	if hook {
		w.State = strings.ToLower(rv.state)
		w.Body = strOrNil(rv.body)
	} else {
		w.Body = &rv.body // REST: a string, "" for none
	}
	return w
}

type reviewHook struct {
	Action      string     `json:"action"`
	Review      wireReview `json:"review"`
	PullRequest wirePR     `json:"pull_request"`
	hookCommon
}

func (s *Server) emitReview(rv *review) {
	s.emit(rv.pr.repo, HookPullRequestReview, "pull_request_review", "submitted", func(h hookCommon) any {
		return reviewHook{Action: "submitted", Review: s.wReview(rv, true), PullRequest: s.wPR(rv.pr), hookCommon: h}
	}, rv.user)
}

// newReview records a submitted review of is by u. Called with s.mu held.
func (s *Server) newReview(is *issue, u *user, body, state string) *review {
	rv := &review{id: s.newID(), pr: is, user: u, body: body, state: state, commitID: is.pr.headSHA, submitted: s.now()}
	is.pr.reviews = append(is.pr.reviews, rv)
	return rv
}

// ReviewCommentLine is one comment of a review, on a line of the head
// version of path (it must be in the diff).
type ReviewCommentLine struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Body string `json:"body"`
}

// ReviewSpec submits a review of a pull request as a user.
type ReviewSpec struct {
	Login  string `json:"login"`
	Repo   string `json:"repo"`
	Number int    `json:"number"`
	Body   string `json:"body,omitempty"`
	// Event is COMMENT (default), APPROVE or REQUEST_CHANGES, as the
	// REST API's create-review takes it.
	Event    string              `json:"event,omitempty"`
	Comments []ReviewCommentLine `json:"comments,omitempty"`
}

// SubmitReview submits a review with its comments, as GitHub does: a
// pull_request_review_comment created for each comment, then
// pull_request_review submitted. It returns the review's id.
func (s *Server) SubmitReview(ctx context.Context, spec ReviewSpec) (int64, error) {
	state := map[string]string{"": "COMMENTED", "COMMENT": "COMMENTED", "APPROVE": "APPROVED", "REQUEST_CHANGES": "CHANGES_REQUESTED"}[spec.Event]
	if state == "" {
		return 0, fmt.Errorf("review event %q: want COMMENT, APPROVE or REQUEST_CHANGES", spec.Event)
	}
	if state != "APPROVED" && spec.Body == "" && len(spec.Comments) == 0 {
		return 0, errors.New("a review that is not an approval needs a body or comments")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	is, u, err := s.issueAs(spec.Login, spec.Repo, spec.Number)
	if err != nil {
		return 0, err
	}
	if is.pr == nil {
		return 0, fmt.Errorf("%s#%d is an issue, not a pull request", spec.Repo, spec.Number)
	}
	hunks := make([]string, len(spec.Comments))
	for i, c := range spec.Comments {
		if c.Body == "" {
			return 0, fmt.Errorf("comment %d: a comment needs a body", i)
		}
		if hunks[i], err = s.diffHunk(ctx, is.repo, is.pr.baseSHA, is.pr.headSHA, c.Path, c.Line); err != nil {
			return 0, fmt.Errorf("comment %d: %w", i, err)
		}
	}
	rv := s.newReview(is, u, spec.Body, state)
	for i, c := range spec.Comments {
		s.addReviewComment(is, u, nil, c.Body, c.Path, c.Line, is.pr.headSHA, hunks[i], rv)
	}
	s.emitReview(rv)
	return rv.id, nil
}

// reviewFor resolves {review_id} of {pull_number}; on failure it has
// written the error. Called with s.mu held.
func (s *Server) reviewFor(w http.ResponseWriter, req *http.Request) (*review, bool) {
	is, _, ok := s.pullFor(w, req, "read")
	if !ok {
		return nil, false
	}
	id, _ := strconv.ParseInt(req.PathValue("review_id"), 10, 64)
	for _, rv := range is.pr.reviews {
		if rv.id == id {
			return rv, true
		}
	}
	writeError(w, http.StatusNotFound, "Not Found")
	return nil, false
}

func (s *Server) getReview(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rv, ok := s.reviewFor(w, req); ok {
		writeJSON(w, http.StatusOK, s.wReview(rv, false))
	}
}

func (s *Server) listReviewComments(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rv, ok := s.reviewFor(w, req)
	if !ok {
		return
	}
	out := []wireReviewComment{}
	for _, c := range rv.comments {
		wc := s.wReviewComment(c)
		wc.PerformedViaApp = nil // review-comment has no such field
		out = append(out, wc)
	}
	writeJSON(w, http.StatusOK, paginate(w, req, out))
}

// PullActionSpec merges or closes a pull request as a user.
type PullActionSpec struct {
	Login  string `json:"login"`
	Repo   string `json:"repo"`
	Number int    `json:"number"`
}

// MergePull merges an open pull request as a user with write access: a
// merge commit of its head into its base (git merge-tree, no work tree),
// the base branch moved to it, the pull request closed and merged
// (pull_request closed, merged true). It returns the merge commit.
func (s *Server) MergePull(ctx context.Context, spec PullActionSpec) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	is, u, err := s.openPullAs(spec)
	if err != nil {
		return "", err
	}
	r := is.repo
	dir := s.repoDir(r)
	base, head := r.branches[is.pr.base], is.pr.headRepo.branches[is.pr.head]
	if base == "" || head == "" {
		return "", fmt.Errorf("%s#%d: its base or head branch is gone", spec.Repo, spec.Number)
	}
	tree, err := s.git(ctx, dir, "merge-tree", "--write-tree", base, head)
	if err != nil {
		return "", fmt.Errorf("%s#%d cannot be merged: %w", spec.Repo, spec.Number, err)
	}
	tree = strings.TrimSpace(strings.SplitN(tree, "\n", 2)[0])
	msg := fmt.Sprintf("Merge pull request #%d from %s/%s\n\n%s", is.number, is.pr.headRepo.owner.login, is.pr.head, is.title)
	name := u.name
	if name == "" {
		name = u.login
	}
	email := fmt.Sprintf("%d+%s@users.noreply.github.com", u.id, u.login)
	cmd := []string{"-c", "user.name=" + name, "-c", "user.email=" + email, "commit-tree", tree, "-p", base, "-p", head, "-m", msg}
	sha, err := s.git(ctx, dir, cmd...)
	if err != nil {
		return "", err
	}
	sha = strings.TrimSpace(sha)
	if _, err := s.git(ctx, dir, "update-ref", "refs/heads/"+is.pr.base, sha, base); err != nil {
		return "", err
	}
	r.branches[is.pr.base] = sha
	r.pushed = s.now()
	now := s.now()
	is.state, is.closed, is.updated = "closed", now, now
	is.pr.merged, is.pr.mergedBy, is.pr.mergedAt, is.pr.mergedSHA, is.pr.closedBy = true, u, now, sha, u
	s.emitPR(r, is, "closed", u, nil)
	return sha, nil
}

// ClosePull closes an open pull request without merging it, as a user
// with write access (pull_request closed, merged false).
func (s *Server) ClosePull(spec PullActionSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	is, u, err := s.openPullAs(spec)
	if err != nil {
		return err
	}
	now := s.now()
	is.state, is.closed, is.updated, is.pr.closedBy = "closed", now, now, u
	s.emitPR(is.repo, is, "closed", u, nil)
	return nil
}

func (s *Server) openPullAs(spec PullActionSpec) (*issue, *user, error) {
	is, u, err := s.issueAs(spec.Login, spec.Repo, spec.Number)
	if err != nil {
		return nil, nil, err
	}
	if is.pr == nil {
		return nil, nil, fmt.Errorf("%s#%d is an issue, not a pull request", spec.Repo, spec.Number)
	}
	if is.state != "open" {
		return nil, nil, fmt.Errorf("%s#%d is %s", spec.Repo, spec.Number, is.state)
	}
	if s.role(u, is.repo).rank() < PermWrite.rank() {
		return nil, nil, fmt.Errorf("user %s cannot merge or close in %s: write access needed", u.login, spec.Repo)
	}
	return is, u, nil
}

// EditCommentSpec edits an issue comment as a user: its author, or a user
// with write access.
type EditCommentSpec struct {
	Login     string `json:"login"`
	Repo      string `json:"repo"`
	CommentID int64  `json:"comment_id"`
	Body      string `json:"body"`
}

// EditComment changes a comment's body (issue_comment edited, with
// changes.body.from the old body).
func (s *Server) EditComment(spec EditCommentSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, r, err := s.actor(spec.Login, spec.Repo)
	if err != nil {
		return err
	}
	c := s.findComment(r, spec.CommentID)
	if c == nil {
		return fmt.Errorf("comment %d of %s: %w", spec.CommentID, spec.Repo, ErrNotFound)
	}
	if c.user != u && s.role(u, r).rank() < PermWrite.rank() {
		return fmt.Errorf("user %s cannot edit %s's comment", u.login, c.user.login)
	}
	if spec.Body == "" {
		return errors.New("a comment needs a body")
	}
	from := c.body
	c.body, c.updated = spec.Body, s.now()
	s.emitComment(c, "edited", u, &from)
	return nil
}

// deleteRef deletes a branch (DELETE /git/refs/heads/NAME): 204, 422
// "Reference does not exist" for one that does not, 422 for a protected
// branch or the default branch.
func (s *Server) deleteRef(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, _, ok := s.repoFor(w, req, "contents", "write")
	if !ok {
		return
	}
	name, isBranch := strings.CutPrefix(req.PathValue("ref"), "heads/")
	if _, ok := r.branches[name]; !isBranch || !ok {
		writeError(w, http.StatusUnprocessableEntity, "Reference does not exist")
		return
	}
	if r.protected[name] || name == r.defaultBranch {
		writeError(w, http.StatusUnprocessableEntity, "Cannot delete a protected branch or the default branch")
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), 30*time.Second)
	defer cancel()
	if _, err := s.git(ctx, s.repoDir(r), "update-ref", "-d", "refs/heads/"+name); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	delete(r.branches, name)
	w.WriteHeader(http.StatusNoContent)
}
