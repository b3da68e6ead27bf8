package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/harvest-dev/harvest/store"
)

// # Sign in with GitHub
//
// The GitHub App's user authorization (GitHub's "Generating a user access
// token for a GitHub App"): GET /v1/auth/github redirects to
// <WebURL>/login/oauth/authorize with the App's client id, the callback
// (/v1/auth/github/callback), the state and a PKCE S256 challenge; the
// callback exchanges the code at <WebURL>/login/oauth/access_token with
// the client secret and the verifier, and asks GET <APIURL>/user who it
// is. The GitHub account (its numeric id, which a renamed account keeps)
// is the identity a webhook's commenter has (package ghbot makes the same
// store.Identity): the person who commented and the person who signs in
// are one user, whichever came first. A new one gets Role.
//
// The user-to-server token and its refresh token are kept on the server
// only, sealed with the secrets' key (package secrets; scope
// "oauth:github", name the user's id), as a store.OAuthGrant. GitHubToken
// hands a valid one to whoever needs to act as the person on GitHub,
// refreshing it first when it expires within githubRefreshMargin; a
// refresh token is taken once by GitHub, so refreshes are serialized per
// user in this process, and a refresh that fails re-reads the grant (a
// node that refreshed it first wrote the new one).

// GitHubSignIn configures "Sign in with GitHub".
type GitHubSignIn struct {
	// WebURL is GitHub's web root (https://github.com; the stand-in's URL
	// in tests): the authorize and token endpoints are under it.
	WebURL string
	// APIURL is its REST root (https://api.github.com; GitHub Enterprise
	// and the stand-in: .../api/v3).
	APIURL string
	// ClientID and ClientSecret are the App's.
	ClientID, ClientSecret string
	// Role is a new user's role (harvest serve --github-user-role).
	Role store.Role
}

// githubRefreshMargin: a token expiring sooner than this is refreshed
// before it is handed out.
const githubRefreshMargin = 5 * time.Minute

func (g *GitHubSignIn) oauth(redirect string) *oauth2.Config {
	web := strings.TrimSuffix(g.WebURL, "/")
	return &oauth2.Config{ClientID: g.ClientID, ClientSecret: g.ClientSecret, RedirectURL: redirect,
		Endpoint: oauth2.Endpoint{AuthURL: web + "/login/oauth/authorize", TokenURL: web + "/login/oauth/access_token", AuthStyle: oauth2.AuthStyleInParams}}
}

// grantScope is the sealing scope of GitHub's tokens.
const grantScope = "oauth:github"

func (s *Server) githubStart(w http.ResponseWriter, r *http.Request, _ caller) *apiError {
	g := s.cfg.SignIn.GitHub
	if g == nil {
		return errorf(http.StatusNotFound, CodeNotFound, "signing in with GitHub is not set up on this server (harvest serve --github-client-id, --github-client-secret-file): sign in with a token")
	}
	verifier := oauth2.GenerateVerifier()
	state, e := s.startFlow(w, r, store.WebViaGitHub, verifier, "")
	if e != nil {
		return e
	}
	u := g.oauth(s.callbackURL(r, "/v1/auth/github/callback")).AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("allow_signup", "false"))
	http.Redirect(w, r, u, http.StatusFound)
	return nil
}

// githubAccount is what GET /user says (the fields used).
type githubAccount struct {
	ID    int64  `json:"id"`
	Login string `json:"login"`
	Name  string `json:"name"`
	Email string `json:"email"`
}

func (s *Server) githubCallback(w http.ResponseWriter, r *http.Request, _ caller) *apiError {
	g := s.cfg.SignIn.GitHub
	if g == nil {
		return errorf(http.StatusNotFound, CodeNotFound, "signing in with GitHub is not set up on this server: sign in with a token")
	}
	f := s.callbackFlow(w, r, store.WebViaGitHub)
	if f == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithValue(r.Context(), oauth2.HTTPClient, s.cfg.SignIn.client()), 2*providerTimeout)
	defer cancel()
	tok, err := g.oauth(s.callbackURL(r, "/v1/auth/github/callback")).Exchange(ctx, r.URL.Query().Get("code"), oauth2.VerifierOption(f.Verifier))
	if err != nil {
		s.refused(w, r, store.WebViaGitHub, refuse("unauthorized", "GitHub refused the sign-in's code: %s; sign in again", oauthErrorText(err)))
		return nil
	}
	acct, err := s.githubUser(ctx, g, tok.AccessToken)
	if err != nil {
		s.refused(w, r, store.WebViaGitHub, refuse("unavailable", "asking GitHub who you are: %v; try again", err))
		return nil
	}
	detail := map[string]any{"via": store.WebViaGitHub, "login": acct.Login, "github_id": acct.ID}
	u, created, err := s.userForIdentity(r.Context(),
		&store.Identity{Kind: store.IdentityGitHub, Subject: strconv.FormatInt(acct.ID, 10), Login: acct.Login},
		cmp.Or(acct.Name, acct.Login), cmp.Or(g.Role, store.RoleMember))
	if err != nil {
		s.refused(w, r, store.WebViaGitHub, &refusal{result: "unavailable", detail: detail, message: "finding your Harvest user: " + err.Error()})
		return nil
	}
	detail["created"] = created
	if !u.Disabled {
		if err := s.keepGitHubGrant(r.Context(), u.ID, tok); err != nil {
			s.refused(w, r, store.WebViaGitHub, &refusal{result: "unavailable", user: u.ID, detail: detail, message: "keeping GitHub's token: " + err.Error()})
			return nil
		}
	}
	s.finishSignIn(w, r, f, u, detail)
	return nil
}

// oauthErrorText is what a token endpoint's refusal says.
func oauthErrorText(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.ErrorCode != "" {
		return re.ErrorCode + ": " + re.ErrorDescription
	}
	return err.Error()
}

// githubUser asks GET /user who a user-to-server token is.
func (s *Server) githubUser(ctx context.Context, g *GitHubSignIn, token string) (*githubAccount, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(g.APIURL, "/")+"/user", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	resp, err := s.cfg.SignIn.client().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /user: %s: %s", resp.Status, clip(string(b), 200))
	}
	var a githubAccount
	if err := json.Unmarshal(b, &a); err != nil || a.ID <= 0 || a.Login == "" {
		return nil, fmt.Errorf("GET /user: an answer without an id and login (%v)", err)
	}
	return &a, nil
}

// keepGitHubGrant seals and stores the tokens GitHub gave.
func (s *Server) keepGitHubGrant(ctx context.Context, user string, tok *oauth2.Token) error {
	k := s.cfg.SecretKey
	if k == nil {
		return errors.New("this server has no secrets key to seal it with")
	}
	now := s.cfg.SignIn.now().UTC()
	g := &store.OAuthGrant{User: user, Provider: store.WebViaGitHub, Access: k.Seal(grantScope, user+"/access", []byte(tok.AccessToken)),
		ExpiresAt: tok.Expiry.UTC(), UpdatedAt: now}
	if n := extraSeconds(tok, "expires_in"); n > 0 {
		g.ExpiresAt = now.Add(time.Duration(n) * time.Second) // on our clock, as the refresh judges it
	}
	if tok.RefreshToken != "" {
		g.Refresh = k.Seal(grantScope, user+"/refresh", []byte(tok.RefreshToken))
		if n := extraSeconds(tok, "refresh_token_expires_in"); n > 0 {
			g.RefreshExpiresAt = now.Add(time.Duration(n) * time.Second)
		}
	}
	return s.cfg.Store.PutOAuthGrant(ctx, g)
}

// extraSeconds is a number of seconds of the token answer
// (expires_in, refresh_token_expires_in), form-encoded or JSON.
func extraSeconds(tok *oauth2.Token, name string) int64 {
	switch v := tok.Extra(name).(type) {
	case int64:
		return v
	case float64:
		return int64(v)
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

// ErrNoGitHubGrant: the user has not signed in with GitHub (or their
// grant can no longer be refreshed): they sign in with GitHub again.
var ErrNoGitHubGrant = errors.New("no GitHub authorization: sign in with GitHub again")

// githubRefresh serializes refreshes per user in this process.
var githubRefresh struct {
	mu    sync.Mutex
	users map[string]*sync.Mutex
}

func refreshLock(user string) *sync.Mutex {
	githubRefresh.mu.Lock()
	defer githubRefresh.mu.Unlock()
	if githubRefresh.users == nil {
		githubRefresh.users = map[string]*sync.Mutex{}
	}
	m := githubRefresh.users[user]
	if m == nil {
		m = &sync.Mutex{}
		githubRefresh.users[user] = m
	}
	return m
}

// GitHubToken is a valid user-to-server token of user, refreshed first
// when it expires within githubRefreshMargin; ErrNoGitHubGrant when there
// is none or it cannot be refreshed.
func (s *Server) GitHubToken(ctx context.Context, user string) (string, error) {
	g, k := s.cfg.SignIn.GitHub, s.cfg.SecretKey
	if g == nil || k == nil {
		return "", errors.New("signing in with GitHub is not set up on this server")
	}
	l := refreshLock(user)
	l.Lock()
	defer l.Unlock()
	grant, err := s.cfg.Store.OAuthGrant(ctx, user, store.WebViaGitHub)
	if errors.Is(err, store.ErrNotFound) {
		return "", ErrNoGitHubGrant
	}
	if err != nil {
		return "", err
	}
	now := s.cfg.SignIn.now()
	if grant.ExpiresAt.IsZero() || grant.ExpiresAt.After(now.Add(githubRefreshMargin)) {
		b, err := k.Open(grantScope, user+"/access", grant.Access)
		return string(b), err
	}
	if grant.Refresh == nil || (!grant.RefreshExpiresAt.IsZero() && !grant.RefreshExpiresAt.After(now)) {
		return "", ErrNoGitHubGrant
	}
	rt, err := k.Open(grantScope, user+"/refresh", grant.Refresh)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, oauth2.HTTPClient, s.cfg.SignIn.client()), providerTimeout)
	defer cancel()
	// An expired token makes the source refresh: what it returns is new.
	src := g.oauth("").TokenSource(ctx, &oauth2.Token{RefreshToken: string(rt), Expiry: time.Unix(1, 0)})
	tok, err := src.Token()
	if err != nil {
		// Another node may have refreshed it first (a refresh token is
		// taken once): its grant is the newer one.
		if again, gerr := s.cfg.Store.OAuthGrant(ctx, user, store.WebViaGitHub); gerr == nil && again.UpdatedAt.After(grant.UpdatedAt) && again.ExpiresAt.After(now) {
			b, oerr := k.Open(grantScope, user+"/access", again.Access)
			return string(b), oerr
		}
		return "", fmt.Errorf("%w (refreshing the token: %s)", ErrNoGitHubGrant, oauthErrorText(err))
	}
	if err := s.keepGitHubGrant(ctx, user, tok); err != nil {
		return "", err
	}
	return tok.AccessToken, nil
}
