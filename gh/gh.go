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

	mu      sync.Mutex
	jwt     string
	jwtExp  time.Time
	install map[string]int64 // "owner/name" → installation id
	tokens  map[string]*tokenEntry
	bot     *Identity
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
	g := &GitHub{cfg: cfg, hc: cfg.HTTPClient, now: cfg.Now, install: map[string]int64{}, tokens: map[string]*tokenEntry{}}
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
	if g.cfg.APIURL == "" || g.cfg.APIURL == DefaultAPIURL {
		return c, nil
	}
	c, err := c.WithEnterpriseURLs(g.cfg.APIURL, g.cfg.APIURL)
	if err != nil {
		return nil, fmt.Errorf("gh: API URL %q: %w", g.cfg.APIURL, err)
	}
	return c, nil
}

// transport adds a credential to every request: auth returns the
// Authorization header's value.
type transport struct {
	base http.RoundTripper
	auth func(ctx context.Context) (string, error)
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	v, err := t.auth(r.Context())
	if err != nil {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, err
	}
	r2 := r.Clone(r.Context())
	r2.Header.Set("Authorization", v)
	return t.base.RoundTrip(r2)
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
	return g.newClient(&transport{base: g.baseTransport(), auth: func(context.Context) (string, error) {
		j, err := g.appJWT()
		return "Bearer " + j, err
	}})
}

// Client speaks for scope: with a token minted (and refreshed) for it.
func (g *GitHub) Client(scope Scope) (*github.Client, error) {
	if len(scope.Repos) == 0 {
		return nil, errors.New("gh: a client needs at least one repository")
	}
	return g.newClient(&transport{base: g.baseTransport(), auth: func(ctx context.Context) (string, error) {
		t, err := g.Token(ctx, scope)
		return "token " + t.Value, err
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
	if len(scope.Repos) == 0 {
		return Token{}, errors.New("gh: a token needs at least one repository")
	}
	inst, err := g.installation(ctx, scope.Repos)
	if err != nil {
		return Token{}, err
	}
	key := scope.key(inst)
	for {
		g.mu.Lock()
		e := g.tokens[key]
		if e != nil {
			select {
			case <-e.done:
				if e.err == nil && g.now().Before(e.until) {
					g.mu.Unlock()
					return e.tok, nil
				}
				e = nil // failed or due: mint anew
			default:
			}
		}
		if e == nil {
			e = &tokenEntry{done: make(chan struct{})}
			g.tokens[key] = e
			g.mu.Unlock()
			e.tok, e.err = g.mint(ctx, inst, scope)
			if e.err == nil {
				e.until = e.tok.Expires.Add(-refreshBefore)
			}
			close(e.done)
			return e.tok, e.err
		}
		g.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return Token{}, context.Cause(ctx)
		}
	}
}

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
	t, _, err := c.Apps.CreateInstallationToken(ctx, inst, opts)
	if err != nil {
		return Token{}, explain(err, "minting a token for "+strings.Join(scope.Repos, ", "))
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
		_, err := g.installation(ctx, []string{repo})
		return err
	}
	c, err := g.newClient(&transport{base: g.baseTransport(), auth: func(context.Context) (string, error) { return "token " + g.cfg.Token, nil }})
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
// share one).
func (g *GitHub) installation(ctx context.Context, repos []string) (int64, error) {
	var id int64
	for _, r := range repos {
		owner, name, ok := strings.Cut(r, "/")
		if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
			return 0, fmt.Errorf("gh: repository %q: give owner/name", r)
		}
		g.mu.Lock()
		rid, ok := g.install[r]
		g.mu.Unlock()
		if !ok {
			c, err := g.AppClient()
			if err != nil {
				return 0, err
			}
			in, _, err := c.Apps.FindRepositoryInstallation(ctx, owner, name)
			if err != nil {
				return 0, explain(err, "finding the app's installation on "+r)
			}
			rid = in.GetID()
			g.mu.Lock()
			g.install[r] = rid
			g.mu.Unlock()
		}
		if id != 0 && rid != id {
			return 0, fmt.Errorf("gh: %s and %s are in different installations of the app: a session's repositories must share one (one owner)", repos[0], r)
		}
		id = rid
	}
	return id, nil
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
		if id.Name == "" {
			id.Name = app.GetSlug()
		}
		// The bot user's id is not the app's; without a token we cannot
		// ask, so the noreply address goes without it (GitHub accepts both
		// forms for attribution).
		id.Email = g.Noreply(0, id.Login)
	} else {
		c, err := g.newClient(&transport{base: g.baseTransport(), auth: func(context.Context) (string, error) { return "token " + g.cfg.Token, nil }})
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

// Handle is the name people mention to call Harvest: "@" + the bot's
// login without "[bot]".
func (id Identity) Handle() string { return "@" + strings.TrimSuffix(id.Login, "[bot]") }

// ErrNoAccess is GitHub refusing Harvest (401, 403, 404): retrying will
// not help until an operator changes the app, its installation or the
// token.
var ErrNoAccess = errors.New("no access")

// explain turns a go-github error into one that says what to fix, with no
// credential in it.
func explain(err error, doing string) error {
	var ge *github.ErrorResponse
	if errors.As(err, &ge) && ge.Response != nil {
		msg := ge.Message
		switch ge.Response.StatusCode {
		case http.StatusUnauthorized:
			return fmt.Errorf("gh: %s: GitHub refused Harvest's credentials (401 %s): check the app id and private key, or the token file: %w", doing, msg, ErrNoAccess)
		case http.StatusForbidden:
			return fmt.Errorf("gh: %s: forbidden (403 %s): the app or token lacks the permission: %w", doing, msg, ErrNoAccess)
		case http.StatusNotFound:
			return fmt.Errorf("gh: %s: not found (404): the repository does not exist or the app is not installed on it: %w", doing, ErrNoAccess)
		}
		return fmt.Errorf("gh: %s: GitHub answered %d %s", doing, ge.Response.StatusCode, msg)
	}
	return fmt.Errorf("gh: %s: %w", doing, err)
}
