package gh

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-github/v75/github"
)

// Token lifetimes.
const (
	// refreshBefore: a cached installation token is replaced this long
	// before it expires, so a git push that starts with it finishes.
	refreshBefore = 5 * time.Minute
	// jwtLife is an app JWT's life (GitHub allows at most ten minutes);
	// its iat is set a minute back for clock drift, as GitHub advises.
	jwtLife = 9 * time.Minute
)

// GitHub is a configured connection to GitHub (see the package doc).
type GitHub struct {
	cfg  Config
	key  *rsa.PrivateKey
	hc   *http.Client
	now  func() time.Time
	base *url.URL // API base, with its trailing slash

	limits *limits
	log    *slog.Logger

	mu      sync.Mutex
	jwt     string
	jwtExp  time.Time
	install map[string]int64            // "owner/name" → installation id
	granted map[int64]map[string]string // installation id → its permissions, as found with it
	tokens  map[string]*tokenEntry
	bot     *Identity
	events  []string // the app's subscriptions, as Bot read them
	// repoList is the installed repositories (repos.go).
	repoList *reposEntry
}

type tokenEntry struct {
	done  chan struct{} // closed when minting ends
	tok   Token
	err   error
	until time.Time // use until (refresh after)
}

// Token is a credential for GitHub's API and git.
type Token struct {
	Value string
	// Expires is when GitHub stops accepting it (zero: a personal token,
	// no known expiry).
	Expires time.Time
}

// String never shows the token.
func (t Token) String() string { return "gh.Token(****)" }

// Scope is what a token is for: the repositories ("owner/name", all of one
// installation) and the permissions (name → "read" or "write", as GitHub
// names them: contents, pull_requests, issues, checks, metadata...).
type Scope struct {
	Repos       []string
	Permissions map[string]string
}

// SessionScope is what a session needs on its repositories: push its
// branch, open and update its pull request, comment on the issue, read
// checks.
func SessionScope(repos ...string) Scope {
	return Scope{Repos: repos, Permissions: map[string]string{
		"contents": "write", "pull_requests": "write", "issues": "write", "checks": "read", "metadata": "read",
	}}
}

func (s Scope) key(inst int64) string {
	repos := slices.Clone(s.Repos)
	slices.Sort(repos)
	var perms []string
	for k, v := range s.Permissions {
		perms = append(perms, k+"="+v)
	}
	slices.Sort(perms)
	return strconv.FormatInt(inst, 10) + "|" + strings.Join(repos, ",") + "|" + strings.Join(perms, ",")
}

// New checks cfg and returns a GitHub. It does not reach GitHub.
func New(cfg Config) (*GitHub, error) {
	g := &GitHub{cfg: cfg, hc: cfg.HTTPClient, now: cfg.Now, install: map[string]int64{}, granted: map[int64]map[string]string{},
		tokens: map[string]*tokenEntry{}}
	if g.hc == nil {
		// A bound on each answer's headers, not an http.Client timeout:
		// that would cost a goroutine per request through our transport
		// until its body is closed, and calls carry their own contexts.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.ResponseHeaderTimeout = 30 * time.Second
		g.hc = &http.Client{Transport: tr}
	}
	if g.now == nil {
		g.now = time.Now
	}
	g.log = cfg.Logger
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.limits = newLimits(g.now, cfg.Wait, cfg.Reserve, g.log)
	switch {
	case cfg.Token != "" && (cfg.AppID != 0 || len(cfg.PrivateKey) > 0):
		return nil, errors.New("gh: give an app or a token, not both")
	case cfg.Token == "" && (cfg.AppID == 0 || len(cfg.PrivateKey) == 0):
		return nil, errors.New("gh: an app needs its id and private key; or give a token")
	case cfg.Token == "":
		k, err := parseKey(cfg.PrivateKey)
		if err != nil {
			return nil, fmt.Errorf("gh: the app's private key: %w", err)
		}
		g.key = k
	}
	c, err := g.newClient(nil)
	if err != nil {
		return nil, err
	}
	g.base = c.BaseURL
	return g, nil
}

// IsApp reports whether Harvest speaks as a GitHub App (else as a person,
// with a token).
func (g *GitHub) IsApp() bool { return g.key != nil }

// AppID is the app's id (0: a token, not an app).
func (g *GitHub) AppID() int64 {
	if g.key == nil {
		return 0
	}
	return g.cfg.AppID
}

// WebURL is where repositories are served: https://github.com/ or the
// configured host, with a trailing slash.
func (g *GitHub) WebURL() string { return g.cfg.webBase() }

// RepoURL is the https URL of a repository's git ("owner/name").
func (g *GitHub) RepoURL(repo string) string { return g.WebURL() + repo + ".git" }

// WebhookSecret is the secret deliveries are signed with (nil: none).
func (g *GitHub) WebhookSecret() []byte { return g.cfg.WebhookSecret }

// newClient is a go-github client on base transport rt (nil: g.hc's).
func (g *GitHub) newClient(rt http.RoundTripper) (*github.Client, error) {
	hc := g.hc
	if rt != nil {
		hc = &http.Client{Transport: rt, CheckRedirect: g.hc.CheckRedirect, Jar: g.hc.Jar}
	}
	c := github.NewClient(hc)
	if g.cfg.APIURL != "" && g.cfg.APIURL != DefaultAPIURL {
		var err error
		if c, err = c.WithEnterpriseURLs(g.cfg.APIURL, g.cfg.APIURL); err != nil {
			return nil, fmt.Errorf("gh: API URL %q: %w", g.cfg.APIURL, err)
		}
	}
	// The limits are ours, shared by every client (limit.go); go-github's
	// are per client and would answer for GitHub without asking it.
	c.DisableRateLimitCheck = true
	return c, nil
}

// transport adds a credential to every request and sends it within
// GitHub's limits (limit.go): auth names the scope whose limits the
// request counts against and gives the Authorization header (fresh: not
// a cached credential, after a 401).
type transport struct {
	g    *GitHub
	base http.RoundTripper
	auth func(ctx context.Context, fresh bool) (scope, header string, err error)
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	resource := resourceOf(t.g.base.Path, r.URL.Path)
	fresh := false
	for try := 1; ; try++ {
		scope, authz, err := t.auth(ctx, fresh)
		if err == nil {
			err = t.g.limits.admit(ctx, scope, resource)
		}
		r2 := r.Clone(ctx)
		if err == nil && try > 1 {
			err = rewind(r, r2)
		}
		if err != nil {
			if r.Body != nil {
				r.Body.Close()
			}
			return nil, err
		}
		r2.Header.Set("Authorization", authz)
		resp, err := t.base.RoundTrip(r2)
		if err != nil {
			return nil, err
		}
		v, m := t.g.limits.observe(ctx, scope, resource, resp)
		last := try >= maxTries || !replayable(r)
		switch {
		case v == limited:
			discard(resp)
			rl := &RateLimitedError{Scope: m.Scope, Kind: m.Kind, RetryAt: m.Until, Sent: true, Note: m.Note}
			if last {
				return nil, rl
			}
			if err := t.g.limits.waitFor(ctx, m, true); err != nil {
				return nil, err
			}
		case v == failing && idempotent(r) && !last:
			if t.g.limits.waitFor(ctx, m, true) != nil {
				return resp, nil // the 5xx, for the caller to retry later
			}
			discard(resp)
		case resp.StatusCode == http.StatusUnauthorized && !fresh && strings.HasPrefix(scope, "installation:") && !last:
			// The cached token was revoked or expired early: once more
			// with a new one; a 401 then is the caller's (permanent).
			fresh = true
			discard(resp)
		default:
			return resp, nil
		}
	}
}

// discard reads what is left of a response GitHub sent and closes it.
func discard(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
}

func (g *GitHub) baseTransport() http.RoundTripper {
	if g.hc.Transport != nil {
		return g.hc.Transport
	}
	return http.DefaultTransport
}

// AppClient speaks as the app (its JWT): the app's own endpoints only.
func (g *GitHub) AppClient() (*github.Client, error) {
	if g.key == nil {
		return nil, errors.New("gh: Harvest is configured with a token, not an app")
	}
	return g.newClient(&transport{g: g, base: g.baseTransport(), auth: func(context.Context, bool) (string, string, error) {
		j, err := g.appJWT()
		return "app", "Bearer " + j, err
	}})
}

// Client speaks for scope: with a token minted (and refreshed) for it.
func (g *GitHub) Client(scope Scope) (*github.Client, error) {
	if len(scope.Repos) == 0 {
		return nil, errors.New("gh: a client needs at least one repository")
	}
	return g.newClient(&transport{g: g, base: g.baseTransport(), auth: func(ctx context.Context, fresh bool) (string, string, error) {
		if g.key == nil {
			return "token", "token " + g.cfg.Token, nil
		}
		inst, t, err := g.token(ctx, scope, fresh)
		return InstallationScope(inst), "token " + t.Value, err
	}})
}

// tokenClient speaks with the personal token.
func (g *GitHub) tokenClient() (*github.Client, error) {
	return g.newClient(&transport{g: g, base: g.baseTransport(), auth: func(context.Context, bool) (string, string, error) {
		return "token", "token " + g.cfg.Token, nil
	}})
}

// appJWT is the app's JWT, made anew when the cached one has less than a
// minute left.
func (g *GitHub) appJWT() (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if g.jwt != "" && now.Add(time.Minute).Before(g.jwtExp) {
		return g.jwt, nil
	}
	iat, exp := now.Add(-time.Minute), now.Add(jwtLife)
	head := b64json(map[string]string{"alg": "RS256", "typ": "JWT"})
	body := b64json(map[string]any{"iat": iat.Unix(), "exp": exp.Unix(), "iss": strconv.FormatInt(g.cfg.AppID, 10)})
	sum := sha256.Sum256([]byte(head + "." + body))
	sig, err := rsa.SignPKCS1v15(rand.Reader, g.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("gh: signing the app's JWT: %w", err)
	}
	g.jwt, g.jwtExp = head+"."+body+"."+base64.RawURLEncoding.EncodeToString(sig), exp
	return g.jwt, nil
}

func b64json(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Token returns a credential for scope: the personal token, or an
// installation token narrowed to scope, cached until shortly before it
// expires.
func (g *GitHub) Token(ctx context.Context, scope Scope) (Token, error) {
	if g.key == nil {
		return Token{Value: g.cfg.Token}, nil
	}
	_, t, err := g.token(ctx, scope, false)
	return t, err
}

// token is Token for an app, with the installation; fresh drops a cached
// token first (GitHub refused it). A cached installation id GitHub no
// longer knows (the app was reinstalled) is looked up again, once.
func (g *GitHub) token(ctx context.Context, scope Scope, fresh bool) (int64, Token, error) {
	if len(scope.Repos) == 0 {
		return 0, Token{}, errors.New("gh: a token needs at least one repository")
	}
	for again := false; ; again = true {
		inst, cached, err := g.installation(ctx, scope.Repos)
		if err != nil {
			return 0, Token{}, err
		}
		t, err := g.cachedToken(ctx, inst, scope, fresh)
		if cached && !again && errors.Is(err, errStaleInstallation) {
			g.log.Info("GitHub no longer knows a cached installation: looking it up again", "installation", inst, "repos", scope.Repos)
			g.ForgetInstallation(inst)
			continue
		}
		return inst, t, err
	}
}

// cachedToken is the token of inst for scope, minted once however many
// callers ask at the same moment.
func (g *GitHub) cachedToken(ctx context.Context, inst int64, scope Scope, fresh bool) (Token, error) {
	key := scope.key(inst)
	for {
		g.mu.Lock()
		e := g.tokens[key]
		if e != nil {
			select {
			case <-e.done:
				if e.err == nil && g.now().Before(e.until) && !fresh {
					g.mu.Unlock()
					return e.tok, nil
				}
				e = nil // failed, due or refused: mint anew
			default:
			}
		}
		if e == nil {
			e = &tokenEntry{done: make(chan struct{})}
			g.tokens[key] = e
			g.mu.Unlock()
			// Not minted for an installation that is suspended or inside
			// one of its windows: the token could not be used.
			if e.err = g.limits.admit(ctx, InstallationScope(inst), "core"); e.err == nil {
				e.tok, e.err = g.mint(ctx, inst, scope)
			}
			if e.err == nil {
				e.until = e.tok.Expires.Add(-refreshBefore)
			}
			close(e.done)
			return e.tok, e.err
		}
		g.mu.Unlock()
		fresh = false // the one being minted is fresh
		select {
		case <-e.done:
		case <-ctx.Done():
			return Token{}, context.Cause(ctx)
		}
	}
}

// errStaleInstallation is a token request for an installation GitHub
// does not know (404): it was deleted, or the app reinstalled.
var errStaleInstallation = errors.New("GitHub does not know the installation")

// mint asks GitHub for an installation token for scope.
func (g *GitHub) mint(ctx context.Context, inst int64, scope Scope) (Token, error) {
	c, err := g.AppClient()
	if err != nil {
		return Token{}, err
	}
	opts := &github.InstallationTokenOptions{}
	for _, r := range scope.Repos {
		_, name, _ := strings.Cut(r, "/")
		opts.Repositories = append(opts.Repositories, name)
	}
	if len(scope.Permissions) > 0 {
		b, _ := json.Marshal(scope.Permissions)
		opts.Permissions = &github.InstallationPermissions{}
		if err := json.Unmarshal(b, opts.Permissions); err != nil {
			return Token{}, fmt.Errorf("gh: permissions %v: %w", scope.Permissions, err)
		}
	}
	t, resp, err := c.Apps.CreateInstallationToken(ctx, inst, opts)
	if err != nil {
		doing := "minting a token for " + strings.Join(scope.Repos, ", ")
		var ge *github.ErrorResponse
		switch {
		case resp != nil && resp.StatusCode == http.StatusNotFound:
			return Token{}, fmt.Errorf("gh: %s: installation %d: %w: %w", doing, inst, errStaleInstallation, ErrNotInstalled)
		case errors.As(err, &ge) && ge.Response != nil && ge.Response.StatusCode == http.StatusForbidden && strings.Contains(strings.ToLower(ge.Message), "suspended"):
			g.Suspend(ctx, inst, ge.Message)
			return Token{}, &SuspendedError{Scope: InstallationScope(inst), Note: ge.Message}
		}
		return Token{}, explain(err, doing)
	}
	if t.GetToken() == "" {
		return Token{}, errors.New("gh: GitHub answered a token request without a token")
	}
	return Token{Value: t.GetToken(), Expires: t.GetExpiresAt().Time}, nil
}

// Reach says whether Harvest's credentials reach repo ("owner/name"):
// for an app, that it is installed on the repository (the installation
// found is cached, as Token caches it); for a token, that the token sees
// the repository. GitHub's refusal (no such repository, not installed,
// not visible to the token) wraps ErrNoAccess, with what to do; any other
// error is GitHub not answering, and may pass on a retry.
func (g *GitHub) Reach(ctx context.Context, repo string) error {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("gh: repository %q: give owner/name", repo)
	}
	if g.key != nil {
		_, _, err := g.installation(ctx, []string{repo})
		return err
	}
	c, err := g.tokenClient()
	if err != nil {
		return err
	}
	_, resp, err := c.Repositories.Get(ctx, owner, name)
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("gh: reading repository %s: not found (404): there is no such repository, or Harvest's token cannot see it (give its account access): %w", repo, ErrNoAccess)
	}
	if err != nil {
		return explain(err, "reading repository "+repo)
	}
	return nil
}

// installation finds the app's installation covering repos (all must
// share one); cached reports whether every one came from the cache.
func (g *GitHub) installation(ctx context.Context, repos []string) (id int64, cached bool, err error) {
	cached = true
	for _, r := range repos {
		owner, name, ok := strings.Cut(r, "/")
		if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
			return 0, false, fmt.Errorf("gh: repository %q: give owner/name", r)
		}
		key := strings.ToLower(r)
		g.mu.Lock()
		rid, ok := g.install[key]
		_, known := g.granted[rid]
		g.mu.Unlock()
		if !ok || !known {
			cached = false
			c, err := g.AppClient()
			if err != nil {
				return 0, false, err
			}
			in, resp, err := c.Apps.FindRepositoryInstallation(ctx, owner, name)
			if resp != nil && resp.StatusCode == http.StatusNotFound {
				return 0, false, fmt.Errorf("gh: finding the app's installation on %s: not found (404): the app is not installed on it, or the repository does not exist: install the app on it (or add it to the installation's repositories): %w", r, ErrNotInstalled)
			}
			if err != nil {
				return 0, false, explain(err, "finding the app's installation on "+r)
			}
			rid = in.GetID()
			perms := map[string]string{}
			if b, err := json.Marshal(in.GetPermissions()); err == nil {
				json.Unmarshal(b, &perms)
			}
			g.mu.Lock()
			g.install[key] = rid
			g.granted[rid] = perms
			g.mu.Unlock()
		}
		if id != 0 && rid != id {
			return 0, false, fmt.Errorf("gh: %s and %s are in different installations of the app: a session's repositories must share one (one owner)", repos[0], r)
		}
		id = rid
	}
	return id, cached, nil
}

// Installation is the app's installation covering repo ("owner/name"),
// looked up once and cached until an installation event says otherwise.
func (g *GitHub) Installation(ctx context.Context, repo string) (int64, error) {
	if g.key == nil {
		return 0, errors.New("gh: Harvest is configured with a token, not an app")
	}
	id, _, err := g.installation(ctx, []string{repo})
	return id, err
}

// Granted says whether the app's installation covering repo was granted
// permission perm at level ("read" or "write"; write implies read), as
// GitHub said when the installation was found (cached with it, and
// forgotten with it: an installation event, new_permissions_accepted
// among them, clears both). A token, not an app: false.
func (g *GitHub) Granted(ctx context.Context, repo, perm, level string) (bool, error) {
	if g.key == nil {
		return false, nil
	}
	id, _, err := g.installation(ctx, []string{repo})
	if err != nil {
		return false, err
	}
	g.mu.Lock()
	have := g.granted[id][perm]
	g.mu.Unlock()
	return have == "write" || have == "admin" || level == "read" && have == "read", nil
}

// Identity is a GitHub account as Harvest writes it into commits.
type Identity struct {
	Login string
	ID    int64
	Name  string
	// Email is the account's noreply address.
	Email string
}

// Noreply is login's noreply address on this GitHub
// (ID+login@users.noreply.github.com).
func (g *GitHub) Noreply(id int64, login string) string {
	host := "github.com"
	if u, err := url.Parse(g.WebURL()); err == nil && u.Hostname() != "" {
		host = u.Hostname()
	}
	if id == 0 {
		return login + "@users.noreply." + host
	}
	return strconv.FormatInt(id, 10) + "+" + login + "@users.noreply." + host
}

// Bot is who Harvest is on GitHub: the app's bot account (slug[bot]), or
// the token's user. It is asked once and cached.
func (g *GitHub) Bot(ctx context.Context) (Identity, error) {
	g.mu.Lock()
	if g.bot != nil {
		b := *g.bot
		g.mu.Unlock()
		return b, nil
	}
	g.mu.Unlock()
	var id Identity
	if g.key != nil {
		c, err := g.AppClient()
		if err != nil {
			return Identity{}, err
		}
		app, _, err := c.Apps.Get(ctx, "")
		if err != nil {
			return Identity{}, explain(err, "asking GitHub who the app is")
		}
		id.Login = app.GetSlug() + "[bot]"
		id.Name = app.GetName()
		g.mu.Lock()
		g.events = app.Events
		g.mu.Unlock()
		if id.Name == "" {
			id.Name = app.GetSlug()
		}
		// The bot user's id is not the app's; without a token we cannot
		// ask, so the noreply address goes without it (GitHub accepts both
		// forms for attribution).
		id.Email = g.Noreply(0, id.Login)
	} else {
		c, err := g.tokenClient()
		if err != nil {
			return Identity{}, err
		}
		u, _, err := c.Users.Get(ctx, "")
		if err != nil {
			return Identity{}, explain(err, "asking GitHub whose token this is")
		}
		id = Identity{Login: u.GetLogin(), ID: u.GetID(), Name: u.GetName()}
		if id.Name == "" {
			id.Name = id.Login
		}
		id.Email = g.Noreply(id.ID, id.Login)
	}
	g.mu.Lock()
	g.bot = &id
	g.mu.Unlock()
	return id, nil
}

// Subscribed reports whether the app is subscribed to event (its
// settings' "Subscribe to events"), as GitHub said when Bot asked; false
// for a token, whose repository webhooks Harvest cannot see.
func (g *GitHub) Subscribed(ctx context.Context, event string) bool {
	if g.key == nil {
		return false
	}
	if _, err := g.Bot(ctx); err != nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Contains(g.events, event)
}

// Handle is the name people mention to call Harvest: "@" + the bot's
// login without "[bot]".
func (id Identity) Handle() string { return "@" + strings.TrimSuffix(id.Login, "[bot]") }
