package ghsim

// Wire shapes, continued from wire.go: issues, pull requests, comments, checks.

import (
	"fmt"
	"strings"
)

type wireIssuePR struct {
	URL      string  `json:"url"`
	HTMLURL  string  `json:"html_url"`
	DiffURL  string  `json:"diff_url"`
	PatchURL string  `json:"patch_url"`
	MergedAt *string `json:"merged_at"`
}

type wireIssue struct {
	ID                    int64         `json:"id"`
	NodeID                string        `json:"node_id"`
	URL                   string        `json:"url"`
	RepositoryURL         string        `json:"repository_url"`
	LabelsURL             string        `json:"labels_url"`
	CommentsURL           string        `json:"comments_url"`
	EventsURL             string        `json:"events_url"`
	HTMLURL               string        `json:"html_url"`
	Number                int           `json:"number"`
	State                 string        `json:"state"`
	StateReason           *string       `json:"state_reason"`
	Title                 string        `json:"title"`
	Body                  *string       `json:"body"`
	User                  *wireUser     `json:"user"`
	Labels                []wireLabel   `json:"labels"`
	Assignee              *wireUser     `json:"assignee"`
	Assignees             []*wireUser   `json:"assignees"`
	Milestone             *struct{}     `json:"milestone"`
	Locked                bool          `json:"locked"`
	ActiveLockReason      *string       `json:"active_lock_reason"`
	Comments              int           `json:"comments"`
	PullRequest           *wireIssuePR  `json:"pull_request,omitempty"`
	ClosedAt              *string       `json:"closed_at"`
	CreatedAt             string        `json:"created_at"`
	UpdatedAt             string        `json:"updated_at"`
	Draft                 *bool         `json:"draft,omitempty"`
	AuthorAssociation     string        `json:"author_association"`
	Reactions             wireReactions `json:"reactions"`
	TimelineURL           string        `json:"timeline_url"`
	PerformedViaGithubApp *wireApp      `json:"performed_via_github_app"`
}

func (s *Server) wIssue(is *issue) wireIssue {
	r := is.repo
	api := fmt.Sprintf("%s/repos/%s/issues/%d", s.api, r.fullName(), is.number)
	kind := "issues"
	if is.pr != nil {
		kind = "pull"
	}
	w := wireIssue{ID: is.id, NodeID: nodeID("Issue", is.id), URL: api,
		RepositoryURL: s.api + "/repos/" + r.fullName(), LabelsURL: api + "/labels{/name}",
		CommentsURL: api + "/comments", EventsURL: api + "/events",
		HTMLURL: fmt.Sprintf("%s/%s/%s/%d", s.base, r.fullName(), kind, is.number),
		Number:  is.number, State: is.state, Title: is.title, Body: strOrNil(is.body),
		User: s.wUser(is.user), Labels: []wireLabel{}, Assignees: []*wireUser{},
		Comments: len(is.comments), ClosedAt: tsOrNil(is.closed), CreatedAt: ts(is.created),
		UpdatedAt: ts(is.updated), AuthorAssociation: authorAssociation(r, is.user),
		Reactions: wReactions(api+"/reactions", is.reactions), TimelineURL: api + "/timeline",
		PerformedViaGithubApp: s.wApp(is.app)}
	if is.state == "closed" {
		reason := "completed"
		w.StateReason = &reason
	}
	for _, l := range is.labels {
		w.Labels = append(w.Labels, s.wLabel(r, l))
	}
	for _, a := range is.assignees {
		w.Assignees = append(w.Assignees, s.wUser(a))
	}
	if len(is.assignees) > 0 {
		w.Assignee = s.wUser(is.assignees[0])
	}
	if is.pr != nil {
		pr := fmt.Sprintf("%s/repos/%s/pulls/%d", s.api, r.fullName(), is.number)
		html := fmt.Sprintf("%s/%s/pull/%d", s.base, r.fullName(), is.number)
		w.PullRequest = &wireIssuePR{URL: pr, HTMLURL: html, DiffURL: html + ".diff", PatchURL: html + ".patch"}
		w.Draft = &is.pr.draft
	}
	return w
}

type wireComment struct {
	ID                    int64         `json:"id"`
	NodeID                string        `json:"node_id"`
	URL                   string        `json:"url"`
	HTMLURL               string        `json:"html_url"`
	Body                  string        `json:"body"`
	User                  *wireUser     `json:"user"`
	CreatedAt             string        `json:"created_at"`
	UpdatedAt             string        `json:"updated_at"`
	IssueURL              string        `json:"issue_url"`
	AuthorAssociation     string        `json:"author_association"`
	Reactions             wireReactions `json:"reactions"`
	PerformedViaGithubApp *wireApp      `json:"performed_via_github_app"`
}

func (s *Server) wComment(c *comment) wireComment {
	is := c.issue
	r := is.repo
	api := fmt.Sprintf("%s/repos/%s/issues/comments/%d", s.api, r.fullName(), c.id)
	kind := "issues"
	if is.pr != nil {
		kind = "pull"
	}
	return wireComment{ID: c.id, NodeID: nodeID("IssueComment", c.id), URL: api,
		HTMLURL: fmt.Sprintf("%s/%s/%s/%d#issuecomment-%d", s.base, r.fullName(), kind, is.number, c.id),
		Body:    c.body, User: s.wUser(c.user), CreatedAt: ts(c.created), UpdatedAt: ts(c.updated),
		IssueURL:          fmt.Sprintf("%s/repos/%s/issues/%d", s.api, r.fullName(), is.number),
		AuthorAssociation: authorAssociation(r, c.user), Reactions: wReactions(api+"/reactions", c.reactions),
		PerformedViaGithubApp: s.wApp(c.app)}
}

type wireHref struct {
	Href string `json:"href"`
}

type wirePRLinks struct {
	Self           wireHref `json:"self"`
	HTML           wireHref `json:"html"`
	Issue          wireHref `json:"issue"`
	Comments       wireHref `json:"comments"`
	ReviewComments wireHref `json:"review_comments"`
	ReviewComment  wireHref `json:"review_comment"`
	Commits        wireHref `json:"commits"`
	Statuses       wireHref `json:"statuses"`
}

type wireBranchRef struct {
	Label string    `json:"label"`
	Ref   string    `json:"ref"`
	SHA   string    `json:"sha"`
	User  *wireUser `json:"user"`
	Repo  *wireRepo `json:"repo"`
}

// wirePR is the pull-request-simple shape (GET /pulls lists it).
type wirePR struct {
	URL                string        `json:"url"`
	ID                 int64         `json:"id"`
	NodeID             string        `json:"node_id"`
	HTMLURL            string        `json:"html_url"`
	DiffURL            string        `json:"diff_url"`
	PatchURL           string        `json:"patch_url"`
	IssueURL           string        `json:"issue_url"`
	CommitsURL         string        `json:"commits_url"`
	ReviewCommentsURL  string        `json:"review_comments_url"`
	ReviewCommentURL   string        `json:"review_comment_url"`
	CommentsURL        string        `json:"comments_url"`
	StatusesURL        string        `json:"statuses_url"`
	Number             int           `json:"number"`
	State              string        `json:"state"`
	Locked             bool          `json:"locked"`
	Title              string        `json:"title"`
	User               *wireUser     `json:"user"`
	Body               *string       `json:"body"`
	Labels             []wireLabel   `json:"labels"`
	Milestone          *struct{}     `json:"milestone"`
	ActiveLockReason   *string       `json:"active_lock_reason"`
	CreatedAt          string        `json:"created_at"`
	UpdatedAt          string        `json:"updated_at"`
	ClosedAt           *string       `json:"closed_at"`
	MergedAt           *string       `json:"merged_at"`
	MergeCommitSHA     *string       `json:"merge_commit_sha"`
	Assignee           *wireUser     `json:"assignee"`
	Assignees          []*wireUser   `json:"assignees"`
	RequestedReviewers []*wireUser   `json:"requested_reviewers"`
	RequestedTeams     []struct{}    `json:"requested_teams"`
	Head               wireBranchRef `json:"head"`
	Base               wireBranchRef `json:"base"`
	Links              wirePRLinks   `json:"_links"`
	AuthorAssociation  string        `json:"author_association"`
	AutoMerge          *struct{}     `json:"auto_merge"`
	Draft              bool          `json:"draft"`
}

// wireFullPR is the pull-request shape (GET, POST, PATCH one; webhooks).
type wireFullPR struct {
	wirePR
	Merged              bool      `json:"merged"`
	Mergeable           *bool     `json:"mergeable"`
	Rebaseable          *bool     `json:"rebaseable"`
	MergeableState      string    `json:"mergeable_state"`
	MergedBy            *wireUser `json:"merged_by"`
	Comments            int       `json:"comments"`
	ReviewComments      int       `json:"review_comments"`
	MaintainerCanModify bool      `json:"maintainer_can_modify"`
	Commits             int       `json:"commits"`
	Additions           int       `json:"additions"`
	Deletions           int       `json:"deletions"`
	ChangedFiles        int       `json:"changed_files"`
}

func (s *Server) wPR(is *issue) wirePR {
	r := is.repo
	pr := is.pr
	api := fmt.Sprintf("%s/repos/%s/pulls/%d", s.api, r.fullName(), is.number)
	iapi := fmt.Sprintf("%s/repos/%s/issues/%d", s.api, r.fullName(), is.number)
	html := fmt.Sprintf("%s/%s/pull/%d", s.base, r.fullName(), is.number)
	statuses := s.api + "/repos/" + r.fullName() + "/statuses/" + pr.headSHA
	w := wirePR{URL: api, ID: pr.id, NodeID: nodeID("PullRequest", pr.id), HTMLURL: html,
		DiffURL: html + ".diff", PatchURL: html + ".patch", IssueURL: iapi,
		CommitsURL: api + "/commits", ReviewCommentsURL: api + "/comments",
		ReviewCommentURL: s.api + "/repos/" + r.fullName() + "/pulls/comments{/number}",
		CommentsURL:      iapi + "/comments", StatusesURL: statuses, Number: is.number, State: is.state,
		Title: is.title, User: s.wUser(is.user), Body: strOrNil(is.body), Labels: []wireLabel{},
		CreatedAt: ts(is.created), UpdatedAt: ts(is.updated), ClosedAt: tsOrNil(is.closed),
		Assignees: []*wireUser{}, RequestedReviewers: []*wireUser{}, RequestedTeams: []struct{}{},
		Head: wireBranchRef{Label: pr.headRepo.owner.login + ":" + pr.head, Ref: pr.head, SHA: pr.headSHA,
			User: s.wUser(pr.headRepo.owner), Repo: s.wRepo(pr.headRepo)},
		Base: wireBranchRef{Label: r.owner.login + ":" + pr.base, Ref: pr.base, SHA: pr.baseSHA,
			User: s.wUser(r.owner), Repo: s.wRepo(r)},
		Links: wirePRLinks{Self: wireHref{api}, HTML: wireHref{html}, Issue: wireHref{iapi},
			Comments: wireHref{iapi + "/comments"}, ReviewComments: wireHref{api + "/comments"},
			ReviewComment: wireHref{s.api + "/repos/" + r.fullName() + "/pulls/comments{/number}"},
			Commits:       wireHref{api + "/commits"}, Statuses: wireHref{statuses}},
		AuthorAssociation: authorAssociation(r, is.user), Draft: pr.draft}
	if pr.mergedSHA != "" {
		w.MergeCommitSHA = &pr.mergedSHA
	}
	if pr.merged {
		w.MergedAt = tsOrNil(pr.mergedAt)
	}
	for _, l := range is.labels {
		// A pull request's labels have a description that is a string
		// (pull-request and pull-request-simple; an issue's may be null):
		// "" for a label made without one.
		wl := s.wLabel(r, l)
		if wl.Description == nil {
			wl.Description = new(string)
		}
		w.Labels = append(w.Labels, wl)
	}
	for _, a := range is.assignees {
		w.Assignees = append(w.Assignees, s.wUser(a))
	}
	if len(is.assignees) > 0 {
		w.Assignee = s.wUser(is.assignees[0])
	}
	for _, u := range pr.requested {
		w.RequestedReviewers = append(w.RequestedReviewers, s.wUser(u))
	}
	return w
}

func (s *Server) wFullPR(is *issue) wireFullPR {
	st := s.diffStat(is)
	mergeable := st.err == nil
	state := "clean"
	if is.pr.draft {
		state = "draft"
	}
	var mergedBy *wireUser
	if is.pr.merged {
		mergedBy = s.wUser(is.pr.mergedBy)
	}
	return wireFullPR{wirePR: s.wPR(is), Merged: is.pr.merged, MergedBy: mergedBy, Mergeable: &mergeable, Rebaseable: &mergeable,
		MergeableState: state, Comments: len(is.comments), ReviewComments: len(is.pr.review),
		MaintainerCanModify: is.pr.maintMod, Commits: st.commits, Additions: st.additions,
		Deletions: st.deletions, ChangedFiles: st.files}
}

type wireReviewLinks struct {
	Self        wireHref `json:"self"`
	HTML        wireHref `json:"html"`
	PullRequest wireHref `json:"pull_request"`
}

type wireReviewComment struct {
	URL                 string          `json:"url"`
	PullRequestReviewID *int64          `json:"pull_request_review_id"`
	ID                  int64           `json:"id"`
	NodeID              string          `json:"node_id"`
	DiffHunk            string          `json:"diff_hunk"`
	Path                string          `json:"path"`
	Position            *int            `json:"position"`
	OriginalPosition    int             `json:"original_position"`
	CommitID            string          `json:"commit_id"`
	OriginalCommitID    string          `json:"original_commit_id"`
	InReplyToID         int64           `json:"in_reply_to_id,omitempty"`
	User                *wireUser       `json:"user"`
	Body                string          `json:"body"`
	CreatedAt           string          `json:"created_at"`
	UpdatedAt           string          `json:"updated_at"`
	HTMLURL             string          `json:"html_url"`
	PullRequestURL      string          `json:"pull_request_url"`
	AuthorAssociation   string          `json:"author_association"`
	Links               wireReviewLinks `json:"_links"`
	StartLine           *int            `json:"start_line"`
	OriginalStartLine   *int            `json:"original_start_line"`
	StartSide           *string         `json:"start_side"`
	Line                *int            `json:"line"`
	OriginalLine        int             `json:"original_line"`
	Side                string          `json:"side"`
	SubjectType         string          `json:"subject_type"`
	Reactions           wireReactions   `json:"reactions"`
	PerformedViaApp     *wireApp        `json:"performed_via_github_app,omitempty"`
}

func (s *Server) wReviewComment(c *reviewComment) wireReviewComment {
	r := c.pr.repo
	api := fmt.Sprintf("%s/repos/%s/pulls/comments/%d", s.api, r.fullName(), c.id)
	html := fmt.Sprintf("%s/%s/pull/%d#discussion_r%d", s.base, r.fullName(), c.pr.number, c.id)
	pr := fmt.Sprintf("%s/repos/%s/pulls/%d", s.api, r.fullName(), c.pr.number)
	reviewID := c.review.id
	line := c.line
	pos := strings.Count(c.diffHunk, "\n")
	return wireReviewComment{URL: api, PullRequestReviewID: &reviewID, ID: c.id,
		NodeID: nodeID("PullRequestReviewComment", c.id), DiffHunk: c.diffHunk, Path: c.path,
		Position: &pos, OriginalPosition: pos, CommitID: c.commitID, OriginalCommitID: c.commitID,
		InReplyToID: c.inReplyTo, User: s.wUser(c.user), Body: c.body, CreatedAt: ts(c.created),
		UpdatedAt: ts(c.updated), HTMLURL: html, PullRequestURL: pr,
		AuthorAssociation: authorAssociation(r, c.user),
		Links:             wireReviewLinks{Self: wireHref{api}, HTML: wireHref{html}, PullRequest: wireHref{pr}},
		Line:              &line, OriginalLine: line, Side: "RIGHT", SubjectType: "line",
		Reactions: wReactions(api+"/reactions", c.reactions), PerformedViaApp: s.wApp(c.app)}
}

type wireCheckOutput struct {
	Title            *string `json:"title"`
	Summary          *string `json:"summary"`
	Text             *string `json:"text"`
	AnnotationsCount int     `json:"annotations_count"`
	AnnotationsURL   string  `json:"annotations_url"`
}

type wireID struct {
	ID int64 `json:"id"`
}

type wireMinimalRef struct {
	Ref  string `json:"ref"`
	SHA  string `json:"sha"`
	Repo struct {
		ID   int64  `json:"id"`
		URL  string `json:"url"`
		Name string `json:"name"`
	} `json:"repo"`
}

type wireMinimalPR struct {
	ID     int64          `json:"id"`
	Number int            `json:"number"`
	URL    string         `json:"url"`
	Head   wireMinimalRef `json:"head"`
	Base   wireMinimalRef `json:"base"`
}

type wireCheckRun struct {
	ID           int64           `json:"id"`
	HeadSHA      string          `json:"head_sha"`
	NodeID       string          `json:"node_id"`
	ExternalID   *string         `json:"external_id"`
	URL          string          `json:"url"`
	HTMLURL      *string         `json:"html_url"`
	DetailsURL   *string         `json:"details_url"`
	Status       string          `json:"status"`
	Conclusion   *string         `json:"conclusion"`
	StartedAt    *string         `json:"started_at"`
	CompletedAt  *string         `json:"completed_at"`
	Output       wireCheckOutput `json:"output"`
	Name         string          `json:"name"`
	CheckSuite   *wireID         `json:"check_suite"`
	App          *wireApp        `json:"app"`
	PullRequests []wireMinimalPR `json:"pull_requests"`
}

// suitePRs are the open pull requests whose head is the suite's sha.
func (s *Server) suitePRs(cs *checkSuite) []wireMinimalPR {
	out := []wireMinimalPR{}
	r := cs.repo
	for _, is := range sortedIssues(r) {
		if is.pr == nil || is.state != "open" || is.pr.headSHA != cs.headSHA || is.pr.headRepo != r {
			continue // GitHub leaves a fork's pull requests out of a suite's
		}
		m := wireMinimalPR{ID: is.pr.id, Number: is.number,
			URL: fmt.Sprintf("%s/repos/%s/pulls/%d", s.api, r.fullName(), is.number)}
		m.Head.Ref, m.Head.SHA = is.pr.head, is.pr.headSHA
		m.Base.Ref, m.Base.SHA = is.pr.base, is.pr.baseSHA
		for _, ref := range []*wireMinimalRef{&m.Head, &m.Base} {
			ref.Repo.ID, ref.Repo.URL, ref.Repo.Name = r.id, s.api+"/repos/"+r.fullName(), r.name
		}
		out = append(out, m)
	}
	return out
}

func (s *Server) wCheckRun(cr *checkRun) wireCheckRun {
	cs := cr.suite
	r := cs.repo
	api := fmt.Sprintf("%s/repos/%s/check-runs/%d", s.api, r.fullName(), cr.id)
	html := fmt.Sprintf("%s/%s/runs/%d", s.base, r.fullName(), cr.id)
	ext, details := cr.external, cmpOr(cr.details, html)
	var concl *string
	if cr.status == "completed" {
		concl = &cr.concl
	}
	return wireCheckRun{ID: cr.id, HeadSHA: cs.headSHA, NodeID: nodeID("CheckRun", cr.id),
		ExternalID: &ext, URL: api, HTMLURL: &html, DetailsURL: &details, Status: cr.status,
		Conclusion: concl, StartedAt: tsOrNil(cr.started), CompletedAt: tsOrNil(cr.done),
		Output: wireCheckOutput{Title: strOrNil(cr.title), Summary: strOrNil(cr.summary),
			Text: strOrNil(cr.text), AnnotationsURL: api + "/annotations"},
		Name: cr.name, CheckSuite: &wireID{cs.id}, App: s.wApp(cs.app), PullRequests: s.suitePRs(cs)}
}

type wireCommitUser struct {
	Name  string `json:"name"`
	Email string `json:"email"`
	Date  string `json:"date"`
}

type wireParent struct {
	SHA     string `json:"sha"`
	URL     string `json:"url"`
	HTMLURL string `json:"html_url"`
}

type wireCommit struct {
	SHA         string       `json:"sha"`
	NodeID      string       `json:"node_id"`
	URL         string       `json:"url"`
	HTMLURL     string       `json:"html_url"`
	CommentsURL string       `json:"comments_url"`
	Commit      wireGitInfo  `json:"commit"`
	Author      *wireUser    `json:"author"`
	Committer   *wireUser    `json:"committer"`
	Parents     []wireParent `json:"parents"`
}

type wireGitInfo struct {
	URL       string         `json:"url"`
	Author    wireCommitUser `json:"author"`
	Committer wireCommitUser `json:"committer"`
	Message   string         `json:"message"`
	Tree      struct {
		SHA string `json:"sha"`
		URL string `json:"url"`
	} `json:"tree"`
	CommentCount int `json:"comment_count"`
}

func (s *Server) wCommit(r *repo, c gitCommit) wireCommit {
	api := s.api + "/repos/" + r.fullName()
	html := s.base + "/" + r.fullName()
	w := wireCommit{SHA: c.sha, NodeID: nodeID("Commit", int64(len(c.sha))) + c.sha[:7],
		URL: api + "/commits/" + c.sha, HTMLURL: html + "/commit/" + c.sha,
		CommentsURL: api + "/commits/" + c.sha + "/comments", Parents: []wireParent{}}
	w.Commit.URL = api + "/git/commits/" + c.sha
	w.Commit.Author = wireCommitUser{c.authorName, c.authorEmail, c.authorDate}
	w.Commit.Committer = wireCommitUser{c.committerName, c.committerEmail, c.committerDate}
	w.Commit.Message = c.message
	w.Commit.Tree.SHA, w.Commit.Tree.URL = c.tree, api+"/git/trees/"+c.tree
	for _, p := range c.parents {
		w.Parents = append(w.Parents, wireParent{p, api + "/commits/" + p, html + "/commit/" + p})
	}
	return w
}
