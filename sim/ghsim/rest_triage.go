package ghsim

// REST handlers, continued: what a pull request's author asks of others
// (reviewers, labels), and reading one issue comment back.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// repoLabel is r's label name (any case), made with color (default
// ededed) when r has none of that name: adding a label to an issue on
// GitHub creates it in the repository. Called with s.mu held.
func (s *Server) repoLabel(r *repo, name, color string) *label {
	key := strings.ToLower(name)
	if l := r.labels[key]; l != nil {
		return l
	}
	l := &label{id: s.newID(), name: name, color: cmpOr(color, "ededed")}
	r.labels[key] = l
	return l
}

// addLabels serves "Add labels to an issue": {"labels": [...]} (names, or
// objects with a name) or a bare array of names; the issue's labels after
// it, 200. An issue (not a pull request) gets issues labeled per new
// label; a pull request's labeled event is not made.
func (s *Server) addLabels(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	is, tok, ok := s.issueFor(w, req, "metadata", "read")
	if !ok {
		return
	}
	if tok == nil {
		writeError(w, http.StatusUnauthorized, "Requires authentication")
		return
	}
	if tok.kind == tokInstallation && !s.tokenCan(tok, is.repo, "issues", "write") && !s.tokenCan(tok, is.repo, commentPerm(is), "write") {
		writeError(w, http.StatusForbidden, "Resource not accessible by integration")
		return
	}
	actor := s.tokenActor(tok)
	if tok.kind == tokPAT && s.role(actor, is.repo).rank() < PermWrite.rank() {
		writeError(w, http.StatusForbidden, "Must have admin rights to Repository.")
		return
	}
	names, err := labelNames(req.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	if len(names) == 0 {
		invalid(w, "Label", "labels", "missing_field", "")
		return
	}
	for _, n := range names {
		if strings.TrimSpace(n) == "" {
			invalid(w, "Label", "name", "invalid", "")
			return
		}
	}
	for _, n := range names {
		l := s.repoLabel(is.repo, n, "")
		has := false
		for _, x := range is.labels {
			has = has || x == l
		}
		if has {
			continue
		}
		is.labels = append(is.labels, l)
		is.updated = s.now()
		if is.pr == nil {
			s.emitIssue(is, "labeled", actor, l, nil)
		}
	}
	out := []wireLabel{}
	for _, l := range is.labels {
		out = append(out, s.wLabel(is.repo, l))
	}
	writeJSON(w, http.StatusOK, out)
}

// labelNames reads the shapes "Add labels to an issue" accepts.
func labelNames(body io.Reader) ([]string, error) {
	b, err := io.ReadAll(io.LimitReader(body, 1<<20))
	if err != nil {
		return nil, err
	}
	var list []json.RawMessage
	if len(b) > 0 && b[0] == '[' {
		if err := json.Unmarshal(b, &list); err != nil {
			return nil, err
		}
	} else {
		var obj struct {
			Labels []json.RawMessage `json:"labels"`
		}
		if err := json.Unmarshal(b, &obj); err != nil {
			return nil, err
		}
		list = obj.Labels
	}
	var names []string
	for _, raw := range list {
		var n string
		if err := json.Unmarshal(raw, &n); err == nil {
			names = append(names, n)
			continue
		}
		var o struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, fmt.Errorf("a label is neither a name nor {\"name\": ...}")
		}
		names = append(names, o.Name)
	}
	return names, nil
}

type reviewersRequest struct {
	Reviewers     []string `json:"reviewers"`
	TeamReviewers []string `json:"team_reviewers"`
}

// requestReviewers serves "Request reviewers for a pull request": each
// reviewer must be a collaborator (read access or more) and not the pull
// request's author, else 422 with GitHub's messages; teams are not
// modelled (422). The pull request, simple, 201.
func (s *Server) requestReviewers(w http.ResponseWriter, req *http.Request) {
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
	if tok.kind == tokPAT && s.role(s.tokenActor(tok), is.repo).rank() < PermWrite.rank() {
		writeError(w, http.StatusForbidden, "Resource not accessible by personal access token")
		return
	}
	var body reviewersRequest
	if !decodeBody(w, req, &body) {
		return
	}
	if len(body.TeamReviewers) > 0 {
		writeError(w, http.StatusUnprocessableEntity, "Reviews may only be requested from collaborators. One or more of the teams you specified is not a collaborator of the "+is.repo.fullName()+" repository.")
		return
	}
	var add []*user
	for _, login := range body.Reviewers {
		u := s.users[strings.ToLower(login)]
		switch {
		case u != nil && u == is.user:
			writeError(w, http.StatusUnprocessableEntity, "Review cannot be requested from pull request author.")
			return
		case u == nil || u.typ != "User" || s.role(u, is.repo).rank() < PermRead.rank():
			writeError(w, http.StatusUnprocessableEntity, "Reviews may only be requested from collaborators. One or more of the users or teams you specified is not a collaborator of the "+is.repo.fullName()+" repository.")
			return
		}
		add = append(add, u)
	}
	for _, u := range add {
		has := false
		for _, x := range is.pr.requested {
			has = has || x == u
		}
		if !has {
			is.pr.requested = append(is.pr.requested, u)
		}
	}
	is.updated = s.now()
	writeJSON(w, http.StatusCreated, s.wPR(is))
}

// getComment serves "Get an issue comment".
func (s *Server) getComment(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, tok, ok := s.commentFor(w, req)
	if !ok {
		return
	}
	if !s.tokenCan(tok, c.issue.repo, "issues", "read") && !s.tokenCan(tok, c.issue.repo, commentPerm(c.issue), "read") {
		writeError(w, http.StatusForbidden, "Resource not accessible by integration")
		return
	}
	writeJSON(w, http.StatusOK, s.wComment(c))
}
