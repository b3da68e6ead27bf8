package ghsim

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// The control API: what a test does to set the stand-in up and to act as
// people on GitHub. Every method is also a JSON endpoint under
// /_sim/github/ (see controlRoutes) taking the same fields.

// ErrNotFound is returned when an app, installation, user, repository,
// issue or pull request named does not exist; the HTTP control API answers
// 404.
var ErrNotFound = errors.New("not found")

// AppSpec describes an App to register.
type AppSpec struct {
	ID            int64             `json:"id,omitempty"`   // 0: the next free id
	Slug          string            `json:"slug"`           // required, like harvest-dev
	Name          string            `json:"name,omitempty"` // default the slug
	Owner         string            `json:"owner,omitempty"`
	PrivateKeyPEM string            `json:"private_key_pem,omitempty"` // PKCS#1 or PKCS#8; "" generates one
	WebhookURL    string            `json:"webhook_url,omitempty"`
	WebhookSecret string            `json:"webhook_secret,omitempty"`
	Permissions   map[string]string `json:"permissions,omitempty"` // default DefaultAppPermissions
	Events        []string          `json:"events,omitempty"`      // empty: every event
}

// DefaultAppPermissions are what Harvest's App asks for.
var DefaultAppPermissions = map[string]string{
	"metadata": "read", "contents": "write", "issues": "write", "pull_requests": "write", "checks": "read",
}

// App is a registered App.
type App struct {
	ID            int64  `json:"id"`
	Slug          string `json:"slug"`
	HookID        int64  `json:"hook_id"`
	BotLogin      string `json:"bot_login"`
	PrivateKeyPEM string `json:"private_key_pem"` // PKCS#1 "RSA PRIVATE KEY", as GitHub hands them out
}

var slugRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,33}$`)
var loginRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,37}[A-Za-z0-9])?$`)
var repoRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)

// CreateApp registers an App.
func (s *Server) CreateApp(spec AppSpec) (App, error) {
	if !slugRE.MatchString(spec.Slug) {
		return App{}, fmt.Errorf("app slug %q: lower-case letters, digits and dashes", spec.Slug)
	}
	var key *rsa.PrivateKey
	var err error
	if spec.PrivateKeyPEM == "" {
		if key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			return App{}, err
		}
	} else if key, err = ParsePrivateKey([]byte(spec.PrivateKeyPEM)); err != nil {
		return App{}, err
	}
	if err := checkWebhookURL(spec.WebhookURL); err != nil {
		return App{}, err
	}
	for k, v := range spec.Permissions {
		if levelRank(v) == 0 {
			return App{}, fmt.Errorf("app permission %s: %q, want read, write or admin", k, v)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.apps {
		if a.slug == spec.Slug || a.id == spec.ID {
			return App{}, fmt.Errorf("app %s (id %d): already registered", spec.Slug, a.id)
		}
	}
	id := spec.ID
	if id == 0 {
		id = s.newID()
	}
	owner := s.ensureUser(cmpOr(spec.Owner, "harvest-dev"), "Organization")
	perms := spec.Permissions
	if len(perms) == 0 {
		perms = DefaultAppPermissions
	}
	a := &app{id: id, slug: spec.Slug, name: cmpOr(spec.Name, spec.Slug), owner: owner, key: &key.PublicKey,
		webhookURL: spec.WebhookURL, secret: spec.WebhookSecret, hookID: s.newID(),
		permissions: clonePerms(perms), events: spec.Events, created: s.now()}
	a.bot = &user{id: s.newID(), login: a.slug + "[bot]", typ: "Bot", created: s.now()}
	s.users[strings.ToLower(a.bot.login)] = a.bot
	s.apps[id] = a
	pemKey := spec.PrivateKeyPEM
	if pemKey == "" {
		pemKey = string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	}
	return App{ID: id, Slug: a.slug, HookID: a.hookID, BotLogin: a.bot.login, PrivateKeyPEM: pemKey}, nil
}

func clonePerms(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ParsePrivateKey reads an RSA key in PEM, PKCS#1 or PKCS#8.
func ParsePrivateKey(p []byte) (*rsa.PrivateKey, error) {
	b, _ := pem.Decode(p)
	if b == nil {
		return nil, errors.New("private key: no PEM block")
	}
	if k, err := x509.ParsePKCS1PrivateKey(b.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, errors.New("private key: not RSA")
	}
	return rk, nil
}

// ensureUser returns the user or organization login, made if new. Called
// with s.mu held.
func (s *Server) ensureUser(login, typ string) *user {
	if u := s.users[strings.ToLower(login)]; u != nil {
		return u
	}
	u := &user{id: s.newID(), login: login, typ: typ, created: s.now()}
	s.users[strings.ToLower(login)] = u
	return u
}

// InstallationSpec installs an App on an account (a user or organization,
// made if new) for all its repositories.
type InstallationSpec struct {
	AppID   int64  `json:"app_id"`
	Account string `json:"account"`
}

// CreateInstallation installs an App and returns the installation id.
func (s *Server) CreateInstallation(spec InstallationSpec) (int64, error) {
	if !loginRE.MatchString(spec.Account) {
		return 0, fmt.Errorf("account %q: not a GitHub login", spec.Account)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apps[spec.AppID]
	if a == nil {
		return 0, fmt.Errorf("app %d: %w", spec.AppID, ErrNotFound)
	}
	acct := s.ensureUser(spec.Account, "Organization")
	for _, in := range s.insts {
		if in.app == a && in.account == acct {
			return 0, fmt.Errorf("app %s is already installed on %s", a.slug, acct.login)
		}
	}
	in := &installation{id: s.newID(), app: a, account: acct, created: s.now()}
	s.insts[in.id] = in
	return in.id, nil
}

// UserSpec adds a person.
type UserSpec struct {
	Login string `json:"login"`
	Name  string `json:"name,omitempty"`
	Email string `json:"email,omitempty"`
	// PublicEmail shows Email on the profile (GitHub's "Public email"):
	// GET /users/{username} gives it to authenticated callers, else null.
	PublicEmail bool `json:"public_email,omitempty"`
}

// User is a person and their personal access token.
type User struct {
	ID    int64  `json:"id"`
	Login string `json:"login"`
	Token string `json:"token"` // ghp_..., for REST and git
}

// AddUser adds a person with a personal access token.
func (s *Server) AddUser(spec UserSpec) (User, error) {
	if !loginRE.MatchString(spec.Login) {
		return User{}, fmt.Errorf("login %q: not a GitHub login", spec.Login)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users[strings.ToLower(spec.Login)] != nil {
		return User{}, fmt.Errorf("user %s: already exists", spec.Login)
	}
	u := s.ensureUser(spec.Login, "User")
	u.name, u.email, u.public = spec.Name, spec.Email, spec.PublicEmail
	u.pat = newToken("ghp_")
	s.tokens[u.pat] = &token{kind: tokPAT, value: u.pat, user: u}
	return User{ID: u.id, Login: u.login, Token: u.pat}, nil
}

// RepoSpec creates a repository from a local directory.
type RepoSpec struct {
	Owner         string `json:"owner"`
	Name          string `json:"name"`
	Dir           string `json:"dir"`                      // a git repository (its history) or plain files (one commit)
	DefaultBranch string `json:"default_branch,omitempty"` // default: Dir's HEAD branch, or main
	Private       bool   `json:"private,omitempty"`
	Description   string `json:"description,omitempty"`
}

// Repo is a created repository.
type Repo struct {
	ID            int64  `json:"id"`
	FullName      string `json:"full_name"`
	CloneURL      string `json:"clone_url"`
	DefaultBranch string `json:"default_branch"`
}

// CreateRepo makes a repository. It runs git without holding the lock.
func (s *Server) CreateRepo(ctx context.Context, spec RepoSpec) (Repo, error) {
	if !loginRE.MatchString(spec.Owner) || !repoRE.MatchString(spec.Name) || strings.HasSuffix(spec.Name, ".git") {
		return Repo{}, fmt.Errorf("repository %s/%s: not a valid name", spec.Owner, spec.Name)
	}
	if st, err := os.Stat(spec.Dir); err != nil || !st.IsDir() {
		return Repo{}, fmt.Errorf("repository %s/%s: dir %q is not a directory", spec.Owner, spec.Name, spec.Dir)
	}
	s.mu.Lock()
	if s.repoByName(spec.Owner, spec.Name) != nil {
		s.mu.Unlock()
		return Repo{}, fmt.Errorf("repository %s/%s: already exists", spec.Owner, spec.Name)
	}
	r := &repo{id: s.newID(), owner: s.ensureUser(spec.Owner, "Organization"), name: spec.Name,
		private: spec.Private, defaultBranch: spec.DefaultBranch, description: spec.Description,
		created: s.now(), pushed: s.now(), protected: map[string]bool{}, perms: map[string]Permission{},
		issues: map[int]*issue{}, branches: map[string]string{}}
	s.mu.Unlock()
	dir, _ := filepath.Abs(spec.Dir)
	if err := s.importRepo(ctx, r, dir); err != nil {
		os.RemoveAll(s.repoDir(r))
		return Repo{}, fmt.Errorf("repository %s: %w", r.fullName(), err)
	}
	br, err := s.readBranches(ctx, r)
	if err != nil {
		return Repo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.repoByName(spec.Owner, spec.Name) != nil {
		return Repo{}, fmt.Errorf("repository %s/%s: already exists", spec.Owner, spec.Name)
	}
	r.branches = br
	s.repos[r.id] = r
	return Repo{ID: r.id, FullName: r.fullName(), CloneURL: s.base + "/" + r.fullName() + ".git", DefaultBranch: r.defaultBranch}, nil
}

// PermissionSpec gives a user a role on a repository.
type PermissionSpec struct {
	Repo       string     `json:"repo"` // owner/name
	Login      string     `json:"login"`
	Permission Permission `json:"permission"`
}

// SetPermission gives a user a role (admin, write, read, none) on a repo.
func (s *Server) SetPermission(spec PermissionSpec) error {
	if !spec.Permission.valid() {
		return fmt.Errorf("permission %q: want admin, write, read or none", spec.Permission)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.repoNamed(spec.Repo)
	if err != nil {
		return err
	}
	u := s.users[strings.ToLower(spec.Login)]
	if u == nil {
		return fmt.Errorf("user %s: %w", spec.Login, ErrNotFound)
	}
	r.perms[u.login] = spec.Permission
	return nil
}

func (s *Server) repoNamed(full string) (*repo, error) {
	o, n, _ := strings.Cut(full, "/")
	r := s.repoByName(o, n)
	if r == nil {
		return nil, fmt.Errorf("repository %s: %w", full, ErrNotFound)
	}
	return r, nil
}

// ProtectionSpec marks a branch protected or not.
type ProtectionSpec struct {
	Repo      string `json:"repo"`
	Branch    string `json:"branch"`
	Protected bool   `json:"protected"`
}

// ProtectBranch marks a branch protected (pushes to it are refused with
// GH006) or unprotected.
func (s *Server) ProtectBranch(spec ProtectionSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.repoNamed(spec.Repo)
	if err != nil {
		return err
	}
	if _, ok := r.branches[spec.Branch]; !ok {
		return fmt.Errorf("branch %s of %s: %w", spec.Branch, spec.Repo, ErrNotFound)
	}
	r.protected[spec.Branch] = spec.Protected
	return s.writeProtected(r)
}

// Branches returns a repository's branches and their head shas.
func (s *Server) Branches(full string) (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.repoNamed(full)
	if err != nil {
		return nil, err
	}
	return clonePerms(r.branches), nil
}

// actor returns the user login acting on full; they must see it.
func (s *Server) actor(login, full string) (*user, *repo, error) {
	u := s.users[strings.ToLower(login)]
	if u == nil {
		return nil, nil, fmt.Errorf("user %s: %w", login, ErrNotFound)
	}
	r, err := s.repoNamed(full)
	if err != nil {
		return nil, nil, err
	}
	if r.private && s.role(u, r) == PermNone {
		return nil, nil, fmt.Errorf("user %s cannot see %s", login, full)
	}
	return u, r, nil
}

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
	l := &label{id: s.newID(), name: spec.Label, color: cmpOr(spec.Color, "ededed")}
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

// PullSpec opens a pull request as a user; head must be a branch of the
// repository.
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
func (s *Server) OpenPull(spec PullSpec) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, r, err := s.actor(spec.Login, spec.Repo)
	if err != nil {
		return 0, err
	}
	base := cmpOr(spec.Base, r.defaultBranch)
	if _, ok := r.branches[spec.Head]; !ok {
		return 0, fmt.Errorf("head branch %s of %s: %w", spec.Head, spec.Repo, ErrNotFound)
	}
	if _, ok := r.branches[base]; !ok {
		return 0, fmt.Errorf("base branch %s of %s: %w", base, spec.Repo, ErrNotFound)
	}
	return s.openPull(r, u, nil, spec.Title, spec.Body, spec.Head, base, spec.Draft).number, nil
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
	return s.addReviewComment(is, u, nil, spec.Body, spec.Path, spec.Line, is.pr.headSHA, hunk).id, nil
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
		cs.runs = append(cs.runs, &checkRun{id: s.newID(), suite: cs, name: rs.Name, concl: rs.Conclusion,
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
	m.HandleFunc("POST "+p+"pulls", control(s.OpenPull))
	m.HandleFunc("POST "+p+"review-comments", controlCtx(s.ReviewComment))
	m.HandleFunc("POST "+p+"check-suites", controlCtx(s.CompleteCheckSuite))
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
