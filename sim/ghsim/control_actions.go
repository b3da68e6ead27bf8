package ghsim

// The control API, continued from control.go: acting as people on GitHub.

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// IssueSpec opens an issue as a user.
type IssueSpec struct {
	Login string `json:"login"`
	Repo  string `json:"repo"`
	Title string `json:"title"`
	Body  string `json:"body,omitempty"`
}

// OpenIssue opens an issue (issues opened) and returns its number.
func (s *Server) OpenIssue(spec IssueSpec) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, r, err := s.actor(spec.Login, spec.Repo)
	if err != nil {
		return 0, err
	}
	if spec.Title == "" {
		return 0, errors.New("an issue needs a title")
	}
	now := s.now()
	r.nextNumber++
	is := &issue{id: s.newID(), repo: r, number: r.nextNumber, title: spec.Title, body: spec.Body, user: u,
		state: "open", created: now, updated: now}
	r.issues[is.number] = is
	s.emitIssue(is, "opened", u, nil, nil)
	return is.number, nil
}

// CommentSpec comments on an issue or pull request as a user.
type CommentSpec struct {
	Login  string `json:"login"`
	Repo   string `json:"repo"`
	Number int    `json:"number"`
	Body   string `json:"body"`
}

// Comment comments (issue_comment created) and returns the comment id.
func (s *Server) Comment(spec CommentSpec) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	is, u, err := s.issueAs(spec.Login, spec.Repo, spec.Number)
	if err != nil {
		return 0, err
	}
	if spec.Body == "" {
		return 0, errors.New("a comment needs a body")
	}
	return s.addComment(is, u, nil, spec.Body).id, nil
}

func (s *Server) issueAs(login, full string, n int) (*issue, *user, error) {
	u, r, err := s.actor(login, full)
	if err != nil {
		return nil, nil, err
	}
	is := r.issues[n]
	if is == nil {
		return nil, nil, fmt.Errorf("%s#%d: %w", full, n, ErrNotFound)
	}
	return is, u, nil
}

// LabelSpec labels an issue or pull request as a user.
type LabelSpec struct {
	Login  string `json:"login"`
	Repo   string `json:"repo"`
	Number int    `json:"number"`
	Label  string `json:"label"`
	Color  string `json:"color,omitempty"` // default ededed
}

// AddLabel labels (issues labeled).
func (s *Server) AddLabel(spec LabelSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	is, u, err := s.issueAs(spec.Login, spec.Repo, spec.Number)
	if err != nil {
		return err
	}
	if s.role(u, is.repo).rank() < PermWrite.rank() {
		return fmt.Errorf("user %s cannot label in %s: triage or write access needed", u.login, spec.Repo)
	}
	l := s.repoLabel(is.repo, spec.Label, spec.Color)
	is.labels = append(is.labels, l)
	is.updated = s.now()
	s.emitIssue(is, "labeled", u, l, nil)
	return nil
}

// AssignSpec assigns a user to an issue or pull request.
type AssignSpec struct {
	Login    string `json:"login"`
	Repo     string `json:"repo"`
	Number   int    `json:"number"`
	Assignee string `json:"assignee"` // a user or an App's bot login
}

// Assign assigns (issues assigned).
func (s *Server) Assign(spec AssignSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	is, u, err := s.issueAs(spec.Login, spec.Repo, spec.Number)
	if err != nil {
		return err
	}
	a := s.users[strings.ToLower(spec.Assignee)]
	if a == nil {
		return fmt.Errorf("assignee %s: %w", spec.Assignee, ErrNotFound)
	}
	is.assignees = append(is.assignees, a)
	is.updated = s.now()
	s.emitIssue(is, "assigned", u, nil, a)
	return nil
}

// PullSpec opens a pull request as a user; head is a branch of the
// repository, or "owner:branch" of owner's fork of it (or of the
// repository's own owner), as GitHub's API takes it.
type PullSpec struct {
	Login string `json:"login"`
	Repo  string `json:"repo"`
	Title string `json:"title"`
	Body  string `json:"body,omitempty"`
	Head  string `json:"head"`
	Base  string `json:"base,omitempty"` // default the default branch
	Draft bool   `json:"draft,omitempty"`
}

// OpenPull opens a pull request (pull_request opened), returns its number.
func (s *Server) OpenPull(ctx context.Context, spec PullSpec) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, r, err := s.actor(spec.Login, spec.Repo)
	if err != nil {
		return 0, err
	}
	base := cmpOr(spec.Base, r.defaultBranch)
	hr, head, ok := s.pullHead(r, spec.Head)
	if !ok {
		return 0, fmt.Errorf("head %s: no fork of %s is %s's: %w", spec.Head, spec.Repo, strings.SplitN(spec.Head, ":", 2)[0], ErrNotFound)
	}
	if _, ok := hr.branches[head]; !ok {
		return 0, fmt.Errorf("head branch %s of %s: %w", head, hr.fullName(), ErrNotFound)
	}
	if _, ok := r.branches[base]; !ok {
		return 0, fmt.Errorf("base branch %s of %s: %w", base, spec.Repo, ErrNotFound)
	}
	is, err := s.openPull(ctx, r, u, nil, spec.Title, spec.Body, hr, head, base, spec.Draft)
	if err != nil {
		return 0, err
	}
	return is.number, nil
}

// ReviewCommentSpec comments on a line of a pull request's diff.
type ReviewCommentSpec struct {
	Login  string `json:"login"`
	Repo   string `json:"repo"`
	Number int    `json:"number"`
	Path   string `json:"path"`
	Line   int    `json:"line"` // in the head version of path; must be in the diff
	Body   string `json:"body"`
}

// ReviewComment comments on a diff line (pull_request_review_comment
// created); the diff_hunk comes from git's diff of base...head.
func (s *Server) ReviewComment(ctx context.Context, spec ReviewCommentSpec) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	is, u, err := s.issueAs(spec.Login, spec.Repo, spec.Number)
	if err != nil {
		return 0, err
	}
	if is.pr == nil {
		return 0, fmt.Errorf("%s#%d is an issue, not a pull request", spec.Repo, spec.Number)
	}
	hunk, err := s.diffHunk(ctx, is.repo, is.pr.baseSHA, is.pr.headSHA, spec.Path, spec.Line)
	if err != nil {
		return 0, err
	}
	return s.addReviewComment(is, u, nil, spec.Body, spec.Path, spec.Line, is.pr.headSHA, hunk, nil).id, nil
}

// CheckRunSpec is one finished check run.
type CheckRunSpec struct {
	Name       string `json:"name"`
	Conclusion string `json:"conclusion"` // success, failure, neutral, cancelled, skipped, timed_out, action_required
	Title      string `json:"title,omitempty"`
	Summary    string `json:"summary,omitempty"`
	Text       string `json:"text,omitempty"`
}

// CheckSuiteSpec completes a check suite on a pull request's head sha.
type CheckSuiteSpec struct {
	Repo       string         `json:"repo"`
	Number     int            `json:"number"`               // the pull request
	AppID      int64          `json:"app_id,omitempty"`     // whose suite; 0: GitHub Actions
	Conclusion string         `json:"conclusion,omitempty"` // default failure
	Runs       []CheckRunSpec `json:"runs"`
}

var conclusions = []string{"success", "failure", "neutral", "cancelled", "skipped", "timed_out", "action_required"}

// CompleteCheckSuite records a completed suite with its runs (check_suite
// completed) and returns the suite id.
func (s *Server) CompleteCheckSuite(ctx context.Context, spec CheckSuiteSpec) (int64, error) {
	spec.Conclusion = cmpOr(spec.Conclusion, "failure")
	for _, c := range append([]CheckRunSpec{{Name: "suite", Conclusion: spec.Conclusion}}, spec.Runs...) {
		if !containsStr(conclusions, c.Conclusion) || c.Name == "" {
			return 0, fmt.Errorf("check run %q: conclusion %q, want one of %s", c.Name, c.Conclusion, strings.Join(conclusions, ", "))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.repoNamed(spec.Repo)
	if err != nil {
		return 0, err
	}
	is := r.issues[spec.Number]
	if is == nil || is.pr == nil {
		return 0, fmt.Errorf("pull request %s#%d: %w", spec.Repo, spec.Number, ErrNotFound)
	}
	a := s.apps[spec.AppID]
	if spec.AppID == 0 {
		a = s.actionsApp()
	} else if a == nil {
		return 0, fmt.Errorf("app %d: %w", spec.AppID, ErrNotFound)
	}
	c, err := s.readCommit(ctx, r, is.pr.headSHA)
	if err != nil {
		return 0, err
	}
	now := s.now()
	cs := &checkSuite{id: s.newID(), repo: r, app: a, headSHA: is.pr.headSHA, branch: is.pr.head,
		status: "completed", concl: spec.Conclusion, created: now, updated: now}
	for _, rs := range spec.Runs {
		cs.runs = append(cs.runs, &checkRun{id: s.newID(), suite: cs, name: rs.Name, status: "completed", concl: rs.Conclusion,
			title: rs.Title, summary: rs.Summary, text: rs.Text, started: now, done: now})
	}
	s.suites[cs.id] = cs
	s.emitCheckSuite(cs, c, a.bot)
	return cs.id, nil
}

func containsStr(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// actionsApp is GitHub Actions, whose suites a test completes by default.
func (s *Server) actionsApp() *app {
	for _, a := range s.apps {
		if a.slug == "github-actions" {
			return a
		}
	}
	a := &app{id: 15368, slug: "github-actions", name: "GitHub Actions", owner: s.ensureUser("github", "Organization"),
		permissions: map[string]string{"checks": "write", "contents": "write", "metadata": "read"},
		events:      []string{"check_run", "check_suite"}, created: s.now()}
	a.bot = s.ensureUser("github-actions[bot]", "Bot")
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	a.key = &key.PublicKey
	s.apps[a.id] = a
	return a
}

// Token mints an installation token as POST
// /app/installations/{id}/access_tokens would, without a JWT; for tests
// that are not about App authentication.
func (s *Server) Token(installationID int64) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.insts[installationID]
	if in == nil {
		return "", fmt.Errorf("installation %d: %w", installationID, ErrNotFound)
	}
	t, err := s.mint(in, tokenRequest{})
	if err != nil {
		return "", err
	}
	return t.value, nil
}

func (s *Server) controlRoutes(m *http.ServeMux) {
	const p = "/_sim/github/"
	m.HandleFunc("POST "+p+"apps", control(s.CreateApp))
	m.HandleFunc("POST "+p+"installations", control(s.CreateInstallation))
	m.HandleFunc("POST "+p+"users", control(s.AddUser))
	m.HandleFunc("POST "+p+"repos", controlCtx(s.CreateRepo))
	m.HandleFunc("POST "+p+"permissions", control(noResult(s.SetPermission)))
	m.HandleFunc("POST "+p+"protection", control(noResult(s.ProtectBranch)))
	m.HandleFunc("POST "+p+"issues", control(s.OpenIssue))
	m.HandleFunc("POST "+p+"comments", control(s.Comment))
	m.HandleFunc("POST "+p+"labels", control(noResult(s.AddLabel)))
	m.HandleFunc("POST "+p+"assignees", control(noResult(s.Assign)))
	m.HandleFunc("POST "+p+"pulls", controlCtx(s.OpenPull))
	m.HandleFunc("POST "+p+"forks", controlCtx(s.Fork))
	m.HandleFunc("POST "+p+"review-comments", controlCtx(s.ReviewComment))
	m.HandleFunc("POST "+p+"check-suites", controlCtx(s.CompleteCheckSuite))
	m.HandleFunc("POST "+p+"reviews", controlCtx(s.SubmitReview))
	m.HandleFunc("POST "+p+"merges", controlCtx(func(ctx context.Context, in PullActionSpec) (map[string]string, error) {
		sha, err := s.MergePull(ctx, in)
		return map[string]string{"sha": sha}, err
	}))
	m.HandleFunc("POST "+p+"closes", control(noResult(s.ClosePull)))
	m.HandleFunc("POST "+p+"comment-edits", control(noResult(s.EditComment)))
	m.HandleFunc("POST "+p+"tokens", control(func(in struct {
		InstallationID int64 `json:"installation_id"`
	}) (string, error) {
		return s.Token(in.InstallationID)
	}))
	m.HandleFunc("POST "+p+"apps/{id}/bad-signature", func(w http.ResponseWriter, req *http.Request) {
		id, err := pathID(req, "app")
		if err != nil {
			controlError(w, err)
			return
		}
		var in struct {
			On *bool `json:"on"`
		}
		if decodeStrict(req, &in) != nil || in.On == nil {
			controlError(w, errors.New("body: want {\"on\": true|false}"))
			return
		}
		controlReply(w, struct{}{}, s.SetBadSignature(id, *in.On))
	})
	m.HandleFunc("POST "+p+"apps/{id}/webhook-url", func(w http.ResponseWriter, req *http.Request) {
		id, err := pathID(req, "app")
		if err != nil {
			controlError(w, err)
			return
		}
		var in struct {
			URL *string `json:"url"`
		}
		if decodeStrict(req, &in) != nil || in.URL == nil {
			controlError(w, errors.New("body: want {\"url\": \"http://...\"} (\"\" for no deliveries)"))
			return
		}
		controlReply(w, struct{}{}, s.SetWebhookURL(id, *in.URL))
	})
	m.HandleFunc("POST "+p+"apps/{id}/callback-urls", func(w http.ResponseWriter, req *http.Request) {
		id, err := pathID(req, "app")
		if err != nil {
			controlError(w, err)
			return
		}
		var in struct {
			URLs []string `json:"urls"`
		}
		if decodeStrict(req, &in) != nil || in.URLs == nil {
			controlError(w, errors.New("body: want {\"urls\": [\"http://...\"]} (the App's callback URLs for its user authorization)"))
			return
		}
		controlReply(w, struct{}{}, s.SetCallbackURLs(id, in.URLs))
	})
	s.installationRoutes(m)
	s.limitRoutes(m)
	m.HandleFunc("GET "+p+"check-runs", func(w http.ResponseWriter, req *http.Request) {
		l, err := s.CheckRuns(req.URL.Query().Get("repo"))
		controlReply(w, l, err)
	})
	m.HandleFunc("GET "+p+"requests", func(w http.ResponseWriter, req *http.Request) {
		writeJSON(w, http.StatusOK, s.Requests())
	})
	m.HandleFunc("GET "+p+"deliveries", func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Query().Get("wait") != "" {
			l, err := s.WaitDeliveries(req.Context())
			controlReply(w, l, err)
			return
		}
		writeJSON(w, http.StatusOK, s.Deliveries())
	})
	m.HandleFunc("POST "+p+"deliveries/{id}/redeliver", func(w http.ResponseWriter, req *http.Request) {
		id, err := pathID(req, "delivery")
		if err != nil {
			controlError(w, err)
			return
		}
		nid, err := s.Redeliver(id)
		controlReply(w, map[string]int64{"id": nid}, err)
	})
}

// pathID reads the {id} of a control path; one that is not a number names
// nothing.
func pathID(req *http.Request, what string) (int64, error) {
	id, err := strconv.ParseInt(req.PathValue("id"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", what, req.PathValue("id"), ErrNotFound)
	}
	return id, nil
}

// decodeStrict decodes a control body, refusing unknown fields.
func decodeStrict(req *http.Request, v any) error {
	dec := json.NewDecoder(req.Body)
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func noResult[In any](f func(In) error) func(In) (struct{}, error) {
	return func(in In) (struct{}, error) { return struct{}{}, f(in) }
}

func control[In, Out any](f func(In) (Out, error)) http.HandlerFunc {
	return controlCtx(func(_ context.Context, in In) (Out, error) { return f(in) })
}

func controlCtx[In, Out any](f func(context.Context, In) (Out, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		var in In
		if err := decodeStrict(req, &in); err != nil {
			controlError(w, fmt.Errorf("body: %w", err))
			return
		}
		out, err := f(req.Context(), in)
		controlReply(w, out, err)
	}
}

func controlReply(w http.ResponseWriter, out any, err error) {
	if err != nil {
		controlError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func controlError(w http.ResponseWriter, err error) {
	status := http.StatusBadRequest
	if errors.Is(err, ErrNotFound) {
		status = http.StatusNotFound
	}
	writeJSON(w, status, map[string]string{"error": err.Error()})
}
