package ghsim

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Check runs an App makes (POST .../check-runs, PATCH
// .../check-runs/{id}), as GitHub's REST description has them:
//
//   - only an App's installation token with checks: write may (a person's
//     token is a 403: "You must authenticate via a GitHub App.");
//   - a run joins its App's check suite of the head commit (made at the
//     first run); the commit must be in the repository (422 otherwise);
//   - status queued, in_progress or completed; a conclusion (or a
//     completed_at) makes it completed, and completed needs a conclusion;
//     output needs its title and summary;
//   - when every run of the suite is completed, the suite is completed
//     with the conclusion of highest priority, and check_suite completed
//     is delivered (to every App on the repository, the maker included,
//     as GitHub does).

type checkRunRequest struct {
	Name        *string         `json:"name"`
	HeadSHA     *string         `json:"head_sha"`
	DetailsURL  *string         `json:"details_url"`
	ExternalID  *string         `json:"external_id"`
	Status      *string         `json:"status"`
	StartedAt   *string         `json:"started_at"`
	Conclusion  *string         `json:"conclusion"`
	CompletedAt *string         `json:"completed_at"`
	Output      *checkRunOutput `json:"output"`
}

type checkRunOutput struct {
	Title   *string `json:"title"`
	Summary *string `json:"summary"`
	Text    *string `json:"text"`
}

// suiteConclusions orders conclusions by priority, highest first: a
// suite's is its runs' highest.
var suiteConclusions = []string{"action_required", "cancelled", "timed_out", "failure", "neutral", "success", "skipped", "stale"}

func (s *Server) createCheckRun(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, tok, ok := s.checksWriter(w, req)
	if !ok {
		return
	}
	var body checkRunRequest
	if !decodeBody(w, req, &body) {
		return
	}
	switch {
	case body.Name == nil || *body.Name == "":
		invalid(w, "CheckRun", "name", "missing_field", "")
		return
	case body.HeadSHA == nil || *body.HeadSHA == "":
		invalid(w, "CheckRun", "head_sha", "missing_field", "")
		return
	}
	c, err := s.readCommit(req.Context(), r, *body.HeadSHA)
	if err != nil || c.sha != *body.HeadSHA {
		writeError(w, http.StatusUnprocessableEntity, "No commit found for SHA: "+*body.HeadSHA)
		return
	}
	now := s.now()
	cr := &checkRun{id: s.newID(), name: *body.Name, status: "queued", started: now}
	if msg := s.applyCheckRun(cr, &body, now); msg != "" {
		writeError(w, http.StatusUnprocessableEntity, msg)
		return
	}
	a := tok.inst.app
	var cs *checkSuite
	for _, x := range s.suites {
		if x.repo == r && x.app == a && x.headSHA == c.sha {
			cs = x
		}
	}
	if cs == nil {
		cs = &checkSuite{id: s.newID(), repo: r, app: a, headSHA: c.sha, branch: s.headBranch(r, c.sha), status: "queued", created: now}
		s.suites[cs.id] = cs
	}
	cr.suite = cs
	cs.runs = append(cs.runs, cr)
	s.settleSuite(cs, c)
	writeJSON(w, http.StatusCreated, s.wCheckRun(cr))
}

func (s *Server) updateCheckRun(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, tok, ok := s.checksWriter(w, req)
	if !ok {
		return
	}
	id, _ := strconv.ParseInt(req.PathValue("check_run_id"), 10, 64)
	var cr *checkRun
	for _, cs := range s.suites {
		for _, x := range cs.runs {
			if x.id == id && cs.repo == r && cs.app == tok.inst.app {
				cr = x
			}
		}
	}
	if cr == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	var body checkRunRequest
	if !decodeBody(w, req, &body) {
		return
	}
	if body.Name != nil && *body.Name == "" {
		invalid(w, "CheckRun", "name", "missing_field", "")
		return
	}
	was := *cr
	if msg := s.applyCheckRun(cr, &body, s.now()); msg != "" {
		*cr = was
		writeError(w, http.StatusUnprocessableEntity, msg)
		return
	}
	c, err := s.readCommit(req.Context(), r, cr.suite.headSHA)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	s.settleSuite(cr.suite, c)
	writeJSON(w, http.StatusOK, s.wCheckRun(cr))
}

// checksWriter is the repository of a request that writes check runs:
// only an App's installation token with checks: write may.
func (s *Server) checksWriter(w http.ResponseWriter, req *http.Request) (*repo, *token, bool) {
	tok, ok := s.tokenAuth(w, req)
	if !ok {
		return nil, nil, false
	}
	if tok != nil && tok.kind != tokInstallation {
		writeError(w, http.StatusForbidden, "You must authenticate via a GitHub App.")
		return nil, nil, false
	}
	return s.repoFor(w, req, "checks", "write")
}

// applyCheckRun sets what body gives on cr; a message says what GitHub
// refuses ("": nothing).
func (s *Server) applyCheckRun(cr *checkRun, body *checkRunRequest, now time.Time) string {
	if body.Name != nil {
		cr.name = *body.Name
	}
	if body.DetailsURL != nil {
		cr.details = *body.DetailsURL
	}
	if body.ExternalID != nil {
		cr.external = *body.ExternalID
	}
	if body.StartedAt != nil {
		t, err := time.Parse(time.RFC3339, *body.StartedAt)
		if err != nil {
			return "Invalid request.\n\n" + strconv.Quote(*body.StartedAt) + " is not a valid date-time for started_at."
		}
		cr.started = t
	}
	if body.Status != nil {
		switch *body.Status {
		case "queued", "in_progress", "completed":
			cr.status = *body.Status
		default:
			return "Invalid request.\n\n" + strconv.Quote(*body.Status) + " is not a member of [queued, in_progress, completed]."
		}
	}
	if body.Output != nil {
		o := body.Output
		if o.Summary == nil || (o.Title == nil && cr.title == "") {
			return "Invalid request.\n\nNo subschema in \"anyOf\" matched: output needs its title and summary."
		}
		if o.Title != nil {
			cr.title = *o.Title
		}
		cr.summary = *o.Summary
		if o.Text != nil {
			cr.text = *o.Text
		}
	}
	if body.Conclusion != nil {
		if !slices.Contains(conclusions, *body.Conclusion) {
			return "Invalid request.\n\n" + strconv.Quote(*body.Conclusion) + " is not a member of [" + strings.Join(conclusions, ", ") + "]."
		}
		cr.concl, cr.status = *body.Conclusion, "completed"
	}
	if body.CompletedAt != nil {
		t, err := time.Parse(time.RFC3339, *body.CompletedAt)
		if err != nil {
			return "Invalid request.\n\n" + strconv.Quote(*body.CompletedAt) + " is not a valid date-time for completed_at."
		}
		cr.done, cr.status = t, "completed"
	}
	if cr.status == "completed" {
		if cr.concl == "" {
			return "Invalid request.\n\nWhen the status is completed, a conclusion is required."
		}
		if cr.done.IsZero() {
			cr.done = now
		}
	}
	return ""
}

// settleSuite recomputes a suite's status from its runs; once every run
// is completed it is completed, and check_suite completed is delivered.
func (s *Server) settleSuite(cs *checkSuite, c gitCommit) {
	status, concl := "completed", ""
	for _, cr := range cs.runs {
		switch {
		case cr.status != "completed":
			status = "in_progress"
		case concl == "" || slices.Index(suiteConclusions, cr.concl) < slices.Index(suiteConclusions, concl):
			concl = cr.concl
		}
	}
	if status != "completed" {
		concl = ""
	}
	was := cs.status
	cs.status, cs.concl, cs.updated = status, concl, s.now()
	if status == "completed" && was != "completed" {
		s.emitCheckSuite(cs, c, cs.app.bot)
	}
}

// headBranch is a branch whose head is sha ("" when none is): an open
// pull request's first.
func (s *Server) headBranch(r *repo, sha string) string {
	for _, is := range sortedIssues(r) {
		if is.pr != nil && is.state == "open" && is.pr.headRepo == r && is.pr.headSHA == sha {
			return is.pr.head
		}
	}
	return ""
}

// CheckRun is a check run as a test reads it (CheckRuns).
type CheckRun struct {
	ID         int64  `json:"id"`
	App        string `json:"app"` // its App's slug
	HeadSHA    string `json:"head_sha"`
	Name       string `json:"name"`
	Status     string `json:"status"`
	Conclusion string `json:"conclusion,omitempty"`
	ExternalID string `json:"external_id,omitempty"`
	DetailsURL string `json:"details_url,omitempty"`
	Title      string `json:"title,omitempty"`
	Summary    string `json:"summary,omitempty"`
}

// CheckRuns lists a repository's check runs, oldest first.
func (s *Server) CheckRuns(repo string) ([]CheckRun, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.repoNamed(repo)
	if err != nil {
		return nil, err
	}
	var out []CheckRun
	for _, cs := range s.suites {
		if cs.repo != r {
			continue
		}
		for _, cr := range cs.runs {
			out = append(out, CheckRun{ID: cr.id, App: cs.app.slug, HeadSHA: cs.headSHA, Name: cr.name, Status: cr.status,
				Conclusion: cr.concl, ExternalID: cr.external, DetailsURL: cr.details, Title: cr.title, Summary: cr.summary})
		}
	}
	slices.SortFunc(out, func(a, b CheckRun) int { return int(a.ID - b.ID) })
	return out, nil
}
