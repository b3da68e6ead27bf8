package ghsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// maxBody bounds a REST or control request body.
const maxBody = 8 << 20

// Options configure a Server. The zero value serves on a loopback port
// chosen by the kernel, keeps its state in a new temporary directory and
// mints installation tokens that live an hour.
type Options struct {
	// Listen is the address to listen on; default 127.0.0.1:0.
	Listen string
	// Dir holds the bare repositories; default a new temporary directory,
	// removed by Close. A given Dir is left in place.
	Dir string
	// TokenTTL is how long an installation token lives; default 1h, as on
	// GitHub.
	TokenTTL time.Duration
	// Now is the clock for token expiry, JWT checks and timestamps; default
	// time.Now. Tests move it to exercise refresh.
	Now func() time.Time
	// Logger gets one line per request and delivery; default discards.
	Logger *slog.Logger
	// HookClient sends webhooks; default a client with a 10 s timeout.
	HookClient *http.Client
	// UserTokenTTL is how long a user-to-server token lives (oauth.go);
	// default 8h, as on GitHub. RefreshTokenTTL is its refresh token's;
	// default 6 months (15897600 s), as on GitHub.
	UserTokenTTL    time.Duration
	RefreshTokenTTL time.Duration
}

// Request is one HTTP request the stand-in served, as kept in its log.
type Request struct {
	Seq    int             `json:"seq"`
	Time   time.Time       `json:"time"`
	Method string          `json:"method"`
	Path   string          `json:"path"` // as received, /api/v3 included
	Query  string          `json:"query"`
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"` // REST and control requests; null for git
	Header http.Header     `json:"header"`
	// Response is the body of a REST answer (null for git and control).
	Response json.RawMessage `json:"response"`
}

// Server is the GitHub stand-in. Start it with Start; Close stops it.
type Server struct {
	opts      Options
	logger    *slog.Logger
	now       func() time.Time
	dir       string
	ownDir    bool
	gitPath   string
	gitStderr io.Writer
	base      string // http://127.0.0.1:PORT
	api       string // base + /api/v3
	ln        net.Listener
	hs        *http.Server
	mux       *http.ServeMux
	hookc     *http.Client

	ctx    context.Context // ends at Close; deliveries use it
	cancel context.CancelFunc
	wg     sync.WaitGroup // the HTTP server and the delivery worker

	mu     sync.Mutex // guards everything below, and every domain object
	nextID int64
	users  map[string]*user
	apps   map[int64]*app
	insts  map[int64]*installation
	tokens map[string]*token
	repos  map[int64]*repo
	suites map[int64]*checkSuite
	reqs   []Request
	hooks  deliveries
	limits map[string]*budget // by scope (limits.go)
	faults []*fault
	oauth  oauthState // the user authorization (oauth.go)
}

// Start makes the stand-in and serves it until Close.
func Start(opts Options) (*Server, error) {
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.TokenTTL < 0 {
		return nil, fmt.Errorf("token TTL %s: must be positive", opts.TokenTTL)
	}
	if opts.TokenTTL == 0 {
		opts.TokenTTL = time.Hour
	}
	if opts.UserTokenTTL < 0 || opts.RefreshTokenTTL < 0 {
		return nil, fmt.Errorf("user token TTL %s, refresh token TTL %s: must be positive", opts.UserTokenTTL, opts.RefreshTokenTTL)
	}
	if opts.UserTokenTTL == 0 {
		opts.UserTokenTTL = 8 * time.Hour
	}
	if opts.RefreshTokenTTL == 0 {
		opts.RefreshTokenTTL = 15897600 * time.Second
	}
	s := &Server{opts: opts, logger: opts.Logger, now: opts.Now, hookc: opts.HookClient,
		users: map[string]*user{}, apps: map[int64]*app{}, insts: map[int64]*installation{},
		tokens: map[string]*token{}, repos: map[int64]*repo{}, suites: map[int64]*checkSuite{}, nextID: 1000}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.hookc == nil {
		s.hookc = &http.Client{Timeout: 10 * time.Second}
	}
	gitPath, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("the GitHub stand-in needs git: %w", err)
	}
	s.gitPath = gitPath
	s.gitStderr = &logWriter{s.logger}
	s.dir = opts.Dir
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "ghsim-"); err != nil {
			return nil, err
		}
		s.ownDir = true
	} else if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, err
	}
	s.ln, err = net.Listen("tcp", opts.Listen)
	if err != nil {
		s.removeDir()
		return nil, err
	}
	s.base = "http://" + s.ln.Addr().String()
	s.api = s.base + "/api/v3"
	s.routes()
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.hooks.init()
	s.hs = &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second,
		BaseContext: func(net.Listener) context.Context { return s.ctx },
		ErrorLog:    slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn)}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		if err := s.hs.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("serving", "err", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		s.deliverLoop()
	}()
	return s, nil
}

// URL is the server's root, like http://127.0.0.1:PORT. REST is served
// both at URL/api/v3 (as GitHub Enterprise Server does) and at URL; git at
// URL/OWNER/REPO.git.
func (s *Server) URL() string { return s.base }

// Dir is where the bare repositories are kept.
func (s *Server) Dir() string { return s.dir }

// Close stops serving, abandons deliveries not yet sent, waits for every
// goroutine and removes a temporary directory it made.
func (s *Server) Close() error {
	s.cancel()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.hs.Shutdown(sctx)
	if err != nil {
		s.hs.Close()
	}
	s.hooks.close()
	s.wg.Wait()
	s.removeDir()
	return err
}

func (s *Server) removeDir() {
	if s.ownDir {
		os.RemoveAll(s.dir)
	}
}

func (s *Server) newID() int64 {
	s.nextID++
	return s.nextID
}

// Requests returns the request log, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// ServeHTTP logs the request and routes it; /api/v3/... is served as /....
func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := s.now()
	var body []byte
	isGit := strings.Contains(req.URL.Path, ".git/")
	if !isGit && req.Body != nil {
		b, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody))
		if err != nil {
			writeError(w, http.StatusRequestEntityTooLarge, "Request body too large")
			return
		}
		body = b
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	if p, ok := strings.CutPrefix(req.URL.Path, "/api/v3/"); ok {
		// The escaped form too: a branch "feat/x" is one segment,
		// .../branches/feat%2Fx, for the mux as for GitHub.
		raw, _ := strings.CutPrefix(req.URL.RawPath, "/api/v3/")
		req.URL.Path, req.URL.RawPath = "/"+p, ""
		if raw != "" {
			req.URL.RawPath = "/" + raw
		}
	} else if req.URL.Path == "/api/v3" {
		req.URL.Path = "/"
	}
	rw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	control := strings.HasPrefix(req.URL.Path, "/_sim/")
	if !isGit && !control && !webPath(req.URL.Path) {
		rw.capture = &bytes.Buffer{}
	}
	if control || s.limit(rw, req, isGit) {
		s.mux.ServeHTTP(rw, req)
	}
	var raw json.RawMessage
	switch {
	case len(body) == 0:
	case json.Valid(body):
		raw = body
	default:
		raw, _ = json.Marshal(string(body))
	}
	if strings.HasPrefix(req.URL.Path, "/_sim/") && req.Method == http.MethodGet {
		return // reading the log does not grow it
	}
	s.mu.Lock()
	var resp json.RawMessage
	if rw.capture != nil && json.Valid(rw.capture.Bytes()) {
		resp = rw.capture.Bytes()
	}
	s.reqs = append(s.reqs, Request{Seq: len(s.reqs) + 1, Time: start, Method: req.Method,
		Path: req.RequestURI, Query: req.URL.RawQuery, Status: rw.status, Body: raw, Header: req.Header.Clone(), Response: resp})
	if i := strings.IndexByte(s.reqs[len(s.reqs)-1].Path, '?'); i >= 0 {
		s.reqs[len(s.reqs)-1].Path = s.reqs[len(s.reqs)-1].Path[:i]
	}
	s.mu.Unlock()
	s.logger.Info("request", "method", req.Method, "path", req.URL.Path, "status", rw.status)
}

func (s *Server) routes() {
	m := http.NewServeMux()
	rest := map[Operation]http.HandlerFunc{
		{"GET", "/app"}: s.getApp,
		{"GET", "/repos/{owner}/{repo}/installation"}:                                       s.getRepoInstallation,
		{"POST", "/app/installations/{installation_id}/access_tokens"}:                      s.createToken,
		{"GET", "/app/installations"}:                                                       s.listInstallations,
		{"GET", "/installation/repositories"}:                                               s.listInstallationRepos,
		{"GET", "/user"}:                                                                    s.getUser,
		{"GET", "/users/{username}"}:                                                        s.getUserByLogin,
		{"GET", "/repos/{owner}/{repo}"}:                                                    s.getRepo,
		{"POST", "/repos/{owner}/{repo}/forks"}:                                             s.createFork,
		{"GET", "/repos/{owner}/{repo}/branches/{branch}"}:                                  s.getBranch,
		{"GET", "/repos/{owner}/{repo}/collaborators/{username}/permission"}:                s.getPermission,
		{"GET", "/repos/{owner}/{repo}/issues/{issue_number}"}:                              s.getIssue,
		{"GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments"}:                     s.listComments,
		{"POST", "/repos/{owner}/{repo}/issues/{issue_number}/comments"}:                    s.createComment,
		{"GET", "/repos/{owner}/{repo}/issues/comments/{comment_id}"}:                       s.getComment,
		{"PATCH", "/repos/{owner}/{repo}/issues/comments/{comment_id}"}:                     s.updateComment,
		{"POST", "/repos/{owner}/{repo}/issues/{issue_number}/labels"}:                      s.addLabels,
		{"POST", "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions"}:            s.reactIssueComment,
		{"POST", "/repos/{owner}/{repo}/issues/{issue_number}/reactions"}:                   s.reactIssue,
		{"POST", "/repos/{owner}/{repo}/pulls/comments/{comment_id}/reactions"}:             s.reactReviewComment,
		{"POST", "/repos/{owner}/{repo}/pulls"}:                                             s.createPull,
		{"GET", "/repos/{owner}/{repo}/pulls"}:                                              s.listPulls,
		{"GET", "/repos/{owner}/{repo}/pulls/{pull_number}"}:                                s.getPull,
		{"PATCH", "/repos/{owner}/{repo}/pulls/{pull_number}"}:                              s.updatePull,
		{"POST", "/repos/{owner}/{repo}/pulls/{pull_number}/comments"}:                      s.createReviewComment,
		{"POST", "/repos/{owner}/{repo}/pulls/{pull_number}/comments/{comment_id}/replies"}: s.replyReviewComment,
		{"POST", "/repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers"}:           s.requestReviewers,
		{"GET", "/repos/{owner}/{repo}/check-suites/{check_suite_id}/check-runs"}:           s.listCheckRuns,
		{"POST", "/repos/{owner}/{repo}/check-runs"}:                                        s.createCheckRun,
		{"PATCH", "/repos/{owner}/{repo}/check-runs/{check_run_id}"}:                        s.updateCheckRun,
		{"GET", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}"}:            s.getReview,
		{"GET", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}/comments"}:   s.listReviewComments,
		{"DELETE", "/repos/{owner}/{repo}/git/refs/{ref}"}:                                  s.deleteRef,
	}
	// Go's mux cannot tell .../issues/{n}/comments from
	// .../issues/comments/{id} (issues/comments/comments is both): one
	// pattern serves the two, as GitHub's router does.
	listComments := Operation{"GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments"}
	getComment := Operation{"GET", "/repos/{owner}/{repo}/issues/comments/{comment_id}"}
	m.HandleFunc("GET /repos/{owner}/{repo}/issues/{a}/{b}", func(w http.ResponseWriter, req *http.Request) {
		switch a, b := req.PathValue("a"), req.PathValue("b"); {
		case a == "comments":
			req.SetPathValue("comment_id", b)
			rest[getComment](w, req)
		case b == "comments":
			req.SetPathValue("issue_number", a)
			rest[listComments](w, req)
		default:
			writeError(w, http.StatusNotFound, "Not Found")
		}
	})
	for _, op := range operations {
		h, ok := rest[op]
		if !ok {
			panic("ghsim: no handler for " + op.Method + " " + op.Path)
		}
		if op == listComments || op == getComment {
			continue
		}
		pattern := op.Method + " " + op.Path
		if strings.HasSuffix(op.Path, "/git/refs/{ref}") {
			pattern += "..." // a ref has slashes: heads/harvest/s-...
			pattern = strings.Replace(pattern, "{ref}...", "{ref...}", 1)
		}
		m.HandleFunc(pattern, h)
	}
	if len(rest) != len(operations) {
		panic("ghsim: a handler for an operation not in the list")
	}
	m.HandleFunc("GET /{owner}/{repo}/info/refs", s.gitHandler)
	m.HandleFunc("POST /{owner}/{repo}/git-upload-pack", s.gitHandler)
	m.HandleFunc("POST /{owner}/{repo}/git-receive-pack", s.gitHandler)
	s.controlRoutes(m)
	s.oauthRoutes(m)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { writeError(w, http.StatusNotFound, "Not Found") })
	s.mux = m
}

// apiError is GitHub's error body.
type apiError struct {
	Message          string       `json:"message"`
	DocumentationURL string       `json:"documentation_url"`
	Status           string       `json:"status,omitempty"`
	Errors           []fieldError `json:"errors,omitempty"`
}

// fieldError is one entry of a 422's errors.
type fieldError struct {
	Resource string `json:"resource,omitempty"`
	Field    string `json:"field,omitempty"`
	Code     string `json:"code"`
	Message  string `json:"message,omitempty"`
}

const docsURL = "https://docs.github.com/rest"

func writeError(w http.ResponseWriter, status int, msg string, errs ...fieldError) {
	writeJSON(w, status, apiError{Message: msg, DocumentationURL: docsURL, Status: fmt.Sprint(status), Errors: errs})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-GitHub-Media-Type", "github.v3; format=json")
	w.Header().Set("X-GitHub-Api-Version-Selected", "2022-11-28")
	w.WriteHeader(status)
	w.Write(b)
}

// logWriter sends git http-backend's stderr to the logger.
type logWriter struct{ l *slog.Logger }

func (w *logWriter) Write(p []byte) (int, error) {
	w.l.Warn("git http-backend", "stderr", strings.TrimSpace(string(p)))
	return len(p), nil
}
