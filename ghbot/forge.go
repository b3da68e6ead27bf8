package ghbot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/agent/agents"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/gitproxy"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/workspace"
)

// Config is what a Service needs.
type Config struct {
	// GitHub is the connection (credentials, API client). Required.
	GitHub *gh.GitHub
	// Mirrors keeps the host's bare mirrors. Required.
	Mirrors *workspace.Mirrors
	// Git is the git endpoint served in boxes (nil: a new one).
	Git *gitproxy.Proxy
	// BaseURL is where people see a session ("https://harvest.example.com");
	// used in pull request bodies and comments ("" leaves links out).
	BaseURL string
	Logger  *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// CommitAuthor is who authors a session's commits: AuthorBot (""
	// too) or AuthorRequester (identity.go).
	CommitAuthor string
	// ShowCost puts what a turn cost in Harvest's comments.
	ShowCost bool
	// PRLabels are added to every pull request Harvest opens.
	PRLabels []string
	// ProgressEvery is the least time between two edits of a progress
	// comment during a turn (default DefaultProgressEvery).
	ProgressEvery time.Duration
	// MirrorRefresh is how often the mirrors of live and recently active
	// repositories are fetched in the background (mirrors.go); a
	// checkout clones a mirror fetched this recently (and after the last
	// push) without fetching. 0: every checkout fetches, nothing is
	// fetched in the background.
	MirrorRefresh time.Duration
}

// Service is Harvest's GitHub side (see the package doc). It implements
// session.Forge.
type Service struct {
	cfg Config
	gh  *gh.GitHub
	git *gitproxy.Proxy
	log *slog.Logger

	mu        sync.Mutex
	env       map[string][]string // session → its box's git environment (the latest endpoint's)
	defaults  map[string]string   // owner/name → default branch
	protected map[string]protCache
	botID     int64 // the app's bot account's id (identity.go)
	// deliveries are the webhook deliveries, to tell what asked for a
	// turn (notify.go); nil without webhooks.
	deliveries deliveryReader
	// docs are the progress comments of the turns being watched
	// (live.go), handed from the watch to the turn's end.
	docs map[string]*progressDoc
	// checks are the turns' check runs in progress (checks.go), handed
	// from the watch to the turn's end.
	checks  map[string]checkRef
	mirrors mirrorState
}

type protCache struct {
	protected bool
	at        time.Time
}

// protTTL is how long a branch's protection is trusted.
const protTTL = time.Minute

var _ session.Forge = (*Service)(nil)

// New makes a Service.
func New(cfg Config) (*Service, error) {
	if cfg.GitHub == nil || cfg.Mirrors == nil {
		return nil, errors.New("ghbot: GitHub and Mirrors are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch cfg.CommitAuthor {
	case "":
		cfg.CommitAuthor = AuthorBot
	case AuthorBot, AuthorRequester:
	default:
		return nil, fmt.Errorf("ghbot: commit author %q: %s or %s", cfg.CommitAuthor, AuthorBot, AuthorRequester)
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = DefaultProgressEvery
	}
	g := cfg.Git
	if g == nil {
		g = gitproxy.New(gitproxy.Config{Logger: cfg.Logger})
	}
	s := &Service{cfg: cfg, gh: cfg.GitHub, git: g, log: cfg.Logger,
		env: map[string][]string{}, defaults: map[string]string{}, protected: map[string]protCache{}, docs: map[string]*progressDoc{},
		checks: map[string]checkRef{}}
	s.mirrors.init()
	return s, nil
}

// Parse recognises https://GITHUB/owner/name(.git) as owner/name.
func (s *Service) Parse(source string) (string, bool) {
	rest, ok := strings.CutPrefix(source, s.gh.WebURL())
	if !ok {
		return "", false
	}
	rest = strings.TrimSuffix(strings.TrimSuffix(rest, "/"), ".git")
	if !session.ForgeRepo(rest) {
		return "", false
	}
	return rest, true
}

// Check asks GitHub whether Harvest reaches repo: the app is installed
// on it (or the token sees it). GitHub's no is permanent (the session is
// refused with it); GitHub not answering is not.
func (s *Service) Check(ctx context.Context, repo string) error {
	err := s.gh.Reach(ctx, repo)
	if gh.Permanent(err) {
		return session.Permanent(err)
	}
	return err
}

func split(repo string) (owner, name string) {
	owner, name, _ = strings.Cut(repo, "/")
	return owner, name
}

func (s *Service) scope(sess *store.Session) gh.Scope {
	var repos []string
	for _, r := range sess.Repos {
		if r.GitHub != "" {
			repos = append(repos, r.GitHub)
		}
	}
	return gh.SessionScope(repos...)
}

// client is the API client for the session's repositories.
func (s *Service) client(sess *store.Session) (*github.Client, error) {
	return s.gh.Client(s.scope(sess))
}

// defaultBranch asks GitHub for repo's default branch (cached).
func (s *Service) defaultBranch(ctx context.Context, c *github.Client, repo string) (string, error) {
	s.mu.Lock()
	b, ok := s.defaults[repo]
	s.mu.Unlock()
	if ok {
		return b, nil
	}
	owner, name := split(repo)
	r, _, err := c.Repositories.Get(ctx, owner, name)
	if err != nil {
		return "", explain(err, "reading repository "+repo)
	}
	b = r.GetDefaultBranch()
	if b == "" {
		return "", fmt.Errorf("repository %s has no default branch (is it empty?)", repo)
	}
	s.mu.Lock()
	s.defaults[repo] = b
	s.mu.Unlock()
	return b, nil
}

// Checkout syncs the repository's mirror and clones it onto the session's
// branch.
func (s *Service) Checkout(ctx context.Context, sess *store.Session, r *store.Repo, dst string, owner workspace.Owner) error {
	err := s.checkout(ctx, sess, r, dst, owner)
	if gh.Permanent(err) || errors.Is(err, workspace.ErrUnknownRef) {
		return session.Permanent(err)
	}
	return err
}

func (s *Service) checkout(ctx context.Context, sess *store.Session, r *store.Repo, dst string, owner workspace.Owner) error {
	c, err := s.client(sess)
	if err != nil {
		return err
	}
	def, err := s.defaultBranch(ctx, c, r.GitHub)
	if err != nil {
		return err
	}
	s.touch(r.GitHub)
	// A mirror the background keeps fresh is cloned as it is: no network
	// (mirrors.go); else it is fetched now.
	path, ok := s.fresh(ctx, r.GitHub)
	if ok && !s.mirrorHas(ctx, path, r) {
		ok = false // a push Harvest did not hear of (no push events)
	}
	var refs []string
	if isPullRef(r.Ref) {
		// A fork's pull request's head: fetched now, as it is now
		// (forks.go); a fresh mirror has branches and tags only.
		ok, refs = false, []string{r.Ref}
	}
	if !ok {
		if path, err = s.fetchMirror(ctx, s.scope(sess), r.GitHub, def, refs...); err != nil {
			return err
		}
	}
	author, _, coauthor, err := s.identities(ctx, c, sess)
	if err != nil {
		return err
	}
	ref := r.Ref
	if isPullRef(ref) {
		out, err := s.cfg.Mirrors.Git(ctx, path, "rev-parse", "--verify", "--quiet", ref+"^{commit}")
		if err != nil {
			return fmt.Errorf("%s of %s: %w", ref, r.GitHub, workspace.ErrUnknownRef)
		}
		ref = strings.TrimSpace(out)
		r.From = ref
	}
	head, err := s.cfg.Mirrors.Clone(ctx, path, dst, workspace.Checkout{
		Ref: ref, Branch: r.Branch, OriginURL: s.gh.RepoURL(r.GitHub), Name: author.Name, Email: author.Email,
		Hooks: coauthorHooks(coauthor), Owner: owner,
	})
	if err != nil {
		return err
	}
	if r.Base == "" {
		r.Base = def
		if ref != "" && ref != r.Branch {
			if _, err := s.cfg.Mirrors.Git(ctx, path, "rev-parse", "--verify", "--quiet", "refs/heads/"+ref); err == nil {
				r.Base = ref
			}
		}
	}
	r.Head = head
	return nil
}

// mirrorKey is where a repository's mirror lives: host/owner/name.
func mirrorKey(web, repo string) string {
	host := strings.TrimPrefix(strings.TrimPrefix(web, "https://"), "http://")
	host = strings.NewReplacer(":", "_", "/", "").Replace(host)
	return host + "/" + repo
}

// endpoint is a session's git endpoint grant (agents.GitEndpoint).
type endpoint struct {
	s      *Service
	sess   *store.Session
	emit   func(event.Payload)
	env    []string // the identity
	revoke func()
}

// Endpoint prepares the git endpoint for a box of sess.
func (s *Service) Endpoint(ctx context.Context, sess *store.Session, emit func(event.Payload)) (agents.GitEndpoint, error) {
	c, err := s.client(sess)
	if err != nil {
		return nil, err
	}
	author, committer, _, err := s.identities(ctx, c, sess)
	if err != nil {
		return nil, err
	}
	return &endpoint{s: s, sess: sess, emit: emit, env: []string{
		"GIT_AUTHOR_NAME=" + author.Name, "GIT_AUTHOR_EMAIL=" + author.Email,
		"GIT_COMMITTER_NAME=" + committer.Name, "GIT_COMMITTER_EMAIL=" + committer.Email,
	}}, nil
}

func (e *endpoint) Bind(ln net.Listener) ([]string, error) {
	s, sess := e.s, e.sess
	scope := s.scope(sess)
	c, err := s.client(sess)
	if err != nil {
		return nil, err
	}
	var repos []gitproxy.Repo
	for _, r := range sess.Repos {
		if r.GitHub == "" {
			continue
		}
		s.mu.Lock()
		def := s.defaults[r.GitHub]
		s.mu.Unlock()
		if def == "" {
			def = r.Base // provisioning asked GitHub; after a restart, the stored base
		}
		repo := r.GitHub
		repos = append(repos, gitproxy.Repo{
			Path: repo, URL: s.gh.RepoURL(repo), DefaultBranch: def, Branches: []string{r.Branch},
			Token: func(ctx context.Context) (string, error) {
				t, err := s.gh.Token(ctx, scope)
				return t.Value, err
			},
			Protected: func(ctx context.Context, branch string) (bool, error) { return s.isProtected(ctx, c, repo, branch) },
		})
	}
	token, revoke := s.git.Grant(gitproxy.Grant{
		Session: sess.ID, Repos: repos, Listener: ln,
		OnPush: func(p gitproxy.Push) {
			for _, ref := range p.Refs {
				b := strings.TrimPrefix(ref.Ref, "refs/heads/")
				if ref.OK {
					s.holdMirror(sess.ID, p.Repo) // until the turn's end is published (mirrors.go)
					e.emit(event.GitPushed{Repo: repoName(sess, p.Repo), Branch: b, Remote: "origin", From: ref.Old, To: ref.New})
				} else {
					e.emit(event.GitPushed{Repo: repoName(sess, p.Repo), Branch: b, Remote: "origin", From: ref.Old, To: ref.New, Refused: "GitHub: " + ref.Reason})
				}
			}
		},
		OnRefuse: func(rf gitproxy.Refusal) {
			if rf.Op != gitproxy.OpPush {
				return
			}
			for _, ref := range rf.Refs {
				e.emit(event.GitPushed{Repo: repoName(sess, rf.Repo), Branch: strings.TrimPrefix(ref.Ref, "refs/heads/"), Remote: "origin",
					From: ref.Old, To: ref.New, Refused: ref.Reason})
			}
			if len(rf.Refs) == 0 {
				e.emit(event.GitPushed{Repo: repoName(sess, rf.Repo), Remote: "origin", Refused: rf.Reason})
			}
		},
	})
	e.revoke = revoke
	env := append(gitproxy.BoxEnv(ln.Addr().String(), token, s.gh.WebURL()), e.env...)
	s.mu.Lock()
	s.env[sess.ID] = env
	s.mu.Unlock()
	return env, nil
}

func (e *endpoint) Serve(ctx context.Context, ln net.Listener) error { return e.s.git.Serve(ctx, ln) }

func (e *endpoint) Close() {
	if e.revoke != nil {
		e.revoke()
	}
	e.s.mu.Lock()
	delete(e.s.env, e.sess.ID)
	e.s.mu.Unlock()
}

// repoName is the workspace name of the session's repository owner/name.
func repoName(sess *store.Session, repo string) string {
	for _, r := range sess.Repos {
		if strings.EqualFold(r.GitHub, repo) {
			return r.Name
		}
	}
	return repo
}

// isProtected asks GitHub whether a branch is protected (cached briefly).
func (s *Service) isProtected(ctx context.Context, c *github.Client, repo, branch string) (bool, error) {
	key := repo + "\x00" + branch
	s.mu.Lock()
	pc, ok := s.protected[key]
	s.mu.Unlock()
	if ok && s.cfg.Now().Sub(pc.at) < protTTL {
		return pc.protected, nil
	}
	owner, name := split(repo)
	b, resp, err := c.Repositories.GetBranch(ctx, owner, name, branch, 0)
	switch {
	case resp != nil && resp.StatusCode == http.StatusNotFound:
		pc = protCache{false, s.cfg.Now()} // a new branch: not protected
	case err != nil:
		return false, explain(err, "checking whether "+branch+" is protected")
	default:
		pc = protCache{b.GetProtected(), s.cfg.Now()}
	}
	s.mu.Lock()
	s.protected[key] = pc
	s.mu.Unlock()
	return pc.protected, nil
}

// boxGit runs git in the session's box, in repository r, with env.
func boxGit(ctx context.Context, box *sandbox.Sandbox, r store.Repo, env []string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	st, err := box.Run(ctx, &sandbox.Cmd{
		Args: append([]string{"git"}, args...), Env: env,
		Dir: box.WorkspacePath(r.Name), Stdout: &out, Stderr: &errb, OutputLimit: 1 << 20, Timeout: 2 * time.Minute,
	})
	if err != nil {
		return "", err
	}
	if !st.Success() {
		return out.String(), fmt.Errorf("git %s in the box (%s): %s", args[0], st, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

var shaPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// explain words a go-github error without anything secret.
func explain(err error, doing string) error {
	if err == nil {
		return nil
	}
	var ge *github.ErrorResponse
	if errors.As(err, &ge) && ge.Response != nil {
		switch ge.Response.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
			return fmt.Errorf("%s: GitHub answered %d %s: %w", doing, ge.Response.StatusCode, ge.Message, gh.ErrNoAccess)
		case http.StatusUnprocessableEntity:
			return fmt.Errorf("%s: GitHub answered 422 %s: %w", doing, ge.Message, gh.ErrInvalid)
		}
		return fmt.Errorf("%s: GitHub answered %d %s", doing, ge.Response.StatusCode, ge.Message)
	}
	return fmt.Errorf("%s: %w", doing, err)
}
