package ghsim

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// The REST handlers. Each takes s.mu for its whole run: reads and writes of
// the domain, the wire shape built from it, and the webhooks it queues.

func decodeBody(w http.ResponseWriter, req *http.Request, v any) bool {
	dec := json.NewDecoder(req.Body)
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "Problems parsing JSON")
		return false
	}
	return true
}

func invalid(w http.ResponseWriter, resource, field, code, msg string) {
	writeError(w, http.StatusUnprocessableEntity, "Validation Failed",
		fieldError{Resource: resource, Field: field, Code: code, Message: msg})
}

func (s *Server) getApp(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.appAuth(w, req)
	if a == nil {
		return
	}
	writeJSON(w, http.StatusOK, s.wApp(a))
}

func (s *Server) getRepoInstallation(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.appAuth(w, req)
	if a == nil {
		return
	}
	r := s.repoByName(req.PathValue("owner"), req.PathValue("repo"))
	if r != nil {
		for _, in := range s.insts {
			if in.app == a && in.covers(r) {
				writeJSON(w, http.StatusOK, s.wInstallation(in))
				return
			}
		}
	}
	writeError(w, http.StatusNotFound, "Not Found")
}

type tokenRequest struct {
	Repositories  []string          `json:"repositories"`
	RepositoryIDs []int64           `json:"repository_ids"`
	Permissions   map[string]string `json:"permissions"`
}

type wireToken struct {
	Token               string            `json:"token"`
	ExpiresAt           string            `json:"expires_at"`
	Permissions         map[string]string `json:"permissions"`
	RepositorySelection string            `json:"repository_selection"`
	Repositories        []*wireRepo       `json:"repositories,omitempty"`
}

func (s *Server) createToken(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.appAuth(w, req)
	if a == nil {
		return
	}
	id, _ := strconv.ParseInt(req.PathValue("installation_id"), 10, 64)
	in := s.insts[id]
	if in == nil || in.app != a {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	var body tokenRequest
	if req.ContentLength != 0 && !decodeBody(w, req, &body) {
		return
	}
	if in.suspendedBy != nil {
		writeError(w, http.StatusForbidden, "This installation has been suspended")
		return
	}
	tok, err := s.mint(in, body)
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	out := wireToken{Token: tok.value, ExpiresAt: ts(tok.expires), Permissions: tok.perms, RepositorySelection: "all"}
	if in.selected != nil && tok.repos == nil {
		out.RepositorySelection = "selected"
	}
	if tok.repos != nil {
		out.RepositorySelection = "selected"
		for _, r := range s.sortedRepos() {
			if tok.repos[r.id] {
				out.Repositories = append(out.Repositories, s.wRepo(r))
			}
		}
	}
	writeJSON(w, http.StatusCreated, out)
}

// mint makes an installation token narrowed as body asks. Called with s.mu
// held.
func (s *Server) mint(in *installation, body tokenRequest) (*token, error) {
	t := &token{kind: tokInstallation, value: newToken("ghs_"), inst: in,
		perms: map[string]string{}, expires: s.now().Add(s.opts.TokenTTL)}
	for k, v := range in.perms {
		t.perms[k] = v
	}
	if len(body.Permissions) > 0 {
		t.perms = map[string]string{}
		for k, v := range body.Permissions {
			if levelRank(v) == 0 || levelRank(in.perms[k]) < levelRank(v) {
				return nil, fmt.Errorf("The permissions requested are not granted to this installation.")
			}
			t.perms[k] = v
		}
	}
	if len(body.Repositories) > 0 || len(body.RepositoryIDs) > 0 {
		t.repos = map[int64]bool{}
		for _, name := range body.Repositories {
			r := s.repoByName(in.account.login, name)
			if r == nil || !in.covers(r) {
				return nil, fmt.Errorf("There is at least one repository that does not exist or is not accessible to the parent installation.")
			}
			t.repos[r.id] = true
		}
		for _, id := range body.RepositoryIDs {
			r := s.repos[id]
			if r == nil || !in.covers(r) {
				return nil, fmt.Errorf("There is at least one repository that does not exist or is not accessible to the parent installation.")
			}
			t.repos[r.id] = true
		}
	}
	s.tokens[t.value] = t
	return t, nil
}

func (s *Server) sortedRepos() []*repo {
	l := make([]*repo, 0, len(s.repos))
	for _, r := range s.repos {
		l = append(l, r)
	}
	slices.SortFunc(l, func(a, b *repo) int { return cmp.Compare(a.id, b.id) })
	return l
}

func (s *Server) getUser(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tok, ok := s.tokenAuth(w, req)
	if !ok {
		return
	}
	switch {
	case tok == nil:
		writeError(w, http.StatusUnauthorized, "Requires authentication")
	case tok.kind == tokInstallation:
		writeError(w, http.StatusForbidden, "Resource not accessible by integration")
	default:
		writeJSON(w, http.StatusOK, s.wPrivateUser(tok.user))
	}
}

// getUserByLogin is "Get a user": anyone's public profile, to anyone (an
// installation token, a personal access token or no credential). The email
// is shown only if the user made it public and the caller is
// authenticated. GitHub may answer a user's own login with the private
// view; the stand-in always gives the public one (GET /user is the private).
func (s *Server) getUserByLogin(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tok, ok := s.tokenAuth(w, req)
	if !ok {
		return
	}
	u := s.users[strings.ToLower(req.PathValue("username"))]
	if u == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	writeJSON(w, http.StatusOK, s.wPublicUser(u, u.public && tok != nil))
}

func (s *Server) getRepo(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, _, ok := s.repoFor(w, req, "metadata", "read")
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, s.wFullRepo(r))
}

type wireBranch struct {
	Name   string     `json:"name"`
	Commit wireCommit `json:"commit"`
	Links  struct {
		HTML string `json:"html"`
		Self string `json:"self"`
	} `json:"_links"`
	Protected  bool `json:"protected"`
	Protection struct {
		Enabled              bool `json:"enabled"`
		RequiredStatusChecks struct {
			EnforcementLevel string   `json:"enforcement_level"`
			Contexts         []string `json:"contexts"`
			Checks           []string `json:"checks"`
		} `json:"required_status_checks"`
	} `json:"protection"`
	ProtectionURL string `json:"protection_url"`
}

func (s *Server) getBranch(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, _, ok := s.repoFor(w, req, "contents", "read")
	if !ok {
		return
	}
	name := req.PathValue("branch")
	sha, ok := r.branches[name]
	if !ok {
		writeError(w, http.StatusNotFound, "Branch not found")
		return
	}
	c, err := s.readCommit(req.Context(), r, sha)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	api := s.api + "/repos/" + r.fullName() + "/branches/" + name
	var out wireBranch
	out.Name, out.Commit, out.Protected = name, s.wCommit(r, c), r.protected[name]
	out.Links.HTML, out.Links.Self = s.base+"/"+r.fullName()+"/tree/"+name, api
	out.Protection.Enabled = r.protected[name]
	out.Protection.RequiredStatusChecks.EnforcementLevel = "off"
	out.Protection.RequiredStatusChecks.Contexts = []string{}
	out.Protection.RequiredStatusChecks.Checks = []string{}
	out.ProtectionURL = api + "/protection"
	writeJSON(w, http.StatusOK, out)
}

type wireCollaborator struct {
	wireUser
	Permissions map[string]bool `json:"permissions"`
	RoleName    string          `json:"role_name"`
}

type wirePermission struct {
	Permission string            `json:"permission"`
	RoleName   string            `json:"role_name"`
	User       *wireCollaborator `json:"user"`
}

func (s *Server) getPermission(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, _, ok := s.repoFor(w, req, "metadata", "read")
	if !ok {
		return
	}
	u := s.users[strings.ToLower(req.PathValue("username"))]
	if u == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	role := s.role(u, r)
	if role == PermNone && !r.private {
		role = PermRead
	}
	c := &wireCollaborator{wireUser: *s.wUser(u), RoleName: string(role), Permissions: map[string]bool{
		"admin": role == PermAdmin, "maintain": role == PermAdmin, "push": role.rank() >= 2,
		"triage": role.rank() >= 2, "pull": role.rank() >= 1}}
	writeJSON(w, http.StatusOK, wirePermission{Permission: string(role), RoleName: string(role), User: c})
}

// issueFor resolves {issue_number}; on failure it has written the error.
func (s *Server) issueFor(w http.ResponseWriter, req *http.Request, perm, level string) (*issue, *token, bool) {
	r, tok, ok := s.repoFor(w, req, perm, level)
	if !ok {
		return nil, nil, false
	}
	n, _ := strconv.Atoi(req.PathValue("issue_number"))
	is := r.issues[n]
	if is == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return nil, nil, false
	}
	return is, tok, true
}

func (s *Server) getIssue(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	is, _, ok := s.issueFor(w, req, "issues", "read")
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, s.wIssue(is))
}

func (s *Server) listComments(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	is, _, ok := s.issueFor(w, req, "issues", "read")
	if !ok {
		return
	}
	out := []wireComment{}
	for _, c := range is.comments {
		out = append(out, s.wComment(c))
	}
	writeJSON(w, http.StatusOK, paginate(w, req, out))
}

// paginate serves one page of l as GitHub does (per_page default 30, at
// most 100; page from 1), with a Link header to the next and last pages.
func paginate[T any](w http.ResponseWriter, req *http.Request, l []T) []T {
	per, _ := strconv.Atoi(req.URL.Query().Get("per_page"))
	if per <= 0 {
		per = 30
	}
	per = min(per, 100)
	page, _ := strconv.Atoi(req.URL.Query().Get("page"))
	page = max(page, 1)
	last := max((len(l)+per-1)/per, 1)
	if page < last {
		u := *req.URL
		q := u.Query()
		link := func(p int, rel string) string {
			q.Set("page", strconv.Itoa(p))
			u.RawQuery = q.Encode()
			return fmt.Sprintf(`<%s>; rel="%s"`, u.String(), rel)
		}
		w.Header().Set("Link", link(page+1, "next")+", "+link(last, "last"))
	}
	lo := min((page-1)*per, len(l))
	return l[lo:min(lo+per, len(l))]
}

type commentRequest struct {
	Body *string `json:"body"`
}

// commentPerm is the App permission writing on is needs.
func commentPerm(is *issue) string {
	if is.pr != nil {
		return "pull_requests"
	}
	return "issues"
}

func (s *Server) createComment(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	is, tok, ok := s.issueFor(w, req, "metadata", "read")
	if !ok {
		return
	}
	if !s.canWriteOn(w, tok, is) {
		return
	}
	var body commentRequest
	if !decodeBody(w, req, &body) {
		return
	}
	if body.Body == nil || *body.Body == "" {
		invalid(w, "IssueComment", "body", "missing_field", "")
		return
	}
	c := s.addComment(is, s.tokenActor(tok), tokenApp(tok), *body.Body)
	writeJSON(w, http.StatusCreated, s.wComment(c))
}

// canWriteOn checks that tok may write comments and reactions on is.
func (s *Server) canWriteOn(w http.ResponseWriter, tok *token, is *issue) bool {
	if tok == nil {
		writeError(w, http.StatusUnauthorized, "Requires authentication")
		return false
	}
	if tok.kind == tokInstallation && !s.tokenCan(tok, is.repo, "issues", "write") && !s.tokenCan(tok, is.repo, commentPerm(is), "write") {
		writeError(w, http.StatusForbidden, "Resource not accessible by integration")
		return false
	}
	return true
}

// addComment records a comment and queues issue_comment created.
func (s *Server) addComment(is *issue, by *user, via *app, body string) *comment {
	now := s.now()
	c := &comment{id: s.newID(), issue: is, body: body, user: by, app: via, created: now, updated: now}
	is.comments = append(is.comments, c)
	is.updated = now
	s.emitComment(c, "created", by, nil)
	return c
}

func (s *Server) findComment(r *repo, id int64) *comment {
	for _, is := range r.issues {
		for _, c := range is.comments {
			if c.id == id {
				return c
			}
		}
	}
	return nil
}

func (s *Server) findReviewComment(r *repo, id int64) *reviewComment {
	for _, is := range r.issues {
		if is.pr == nil {
			continue
		}
		for _, c := range is.pr.review {
			if c.id == id {
				return c
			}
		}
	}
	return nil
}

// commentFor finds the issue comment {comment_id} of the request's
// repository, or answers 404. Called with s.mu held.
func (s *Server) commentFor(w http.ResponseWriter, req *http.Request) (*comment, *token, bool) {
	r, tok, ok := s.repoFor(w, req, "metadata", "read")
	if !ok {
		return nil, nil, false
	}
	id, _ := strconv.ParseInt(req.PathValue("comment_id"), 10, 64)
	c := s.findComment(r, id)
	if c == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return nil, nil, false
	}
	return c, tok, true
}

func (s *Server) updateComment(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, tok, ok := s.commentFor(w, req)
	if !ok || !s.canWriteOn(w, tok, c.issue) {
		return
	}
	actor := s.tokenActor(tok)
	if actor != c.user && s.role(actor, c.issue.repo).rank() < PermWrite.rank() && tok.kind == tokPAT {
		writeError(w, http.StatusForbidden, "You must have write access to edit other users' comments")
		return
	}
	var body commentRequest
	if !decodeBody(w, req, &body) {
		return
	}
	if body.Body == nil {
		invalid(w, "IssueComment", "body", "missing_field", "")
		return
	}
	from := c.body
	c.body = *body.Body
	c.updated = s.now()
	s.emitComment(c, "edited", actor, &from)
	writeJSON(w, http.StatusOK, s.wComment(c))
}
