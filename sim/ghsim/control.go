package ghsim

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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
	Events        []string          `json:"events,omitempty"`      // empty: every event (GET /app lists them all)
	// CallbackURLs are the App's callback URLs for its user
	// authorization (oauth.go): a redirect_uri must be one of them or
	// under one (GitHub allows up to 10).
	CallbackURLs []string `json:"callback_urls,omitempty"`
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
	// ClientID and ClientSecret authenticate the App at
	// /login/oauth/access_token (its user authorization: oauth.go).
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
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
	if len(spec.CallbackURLs) > 10 {
		return App{}, fmt.Errorf("app %s: %d callback URLs, GitHub allows at most 10", spec.Slug, len(spec.CallbackURLs))
	}
	for _, c := range spec.CallbackURLs {
		if err := checkCallbackURL(c); err != nil {
			return App{}, err
		}
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
		permissions: clonePerms(perms), events: spec.Events, created: s.now(),
		clientID: fmt.Sprintf("Iv1.%016x", id), clientSecret: newHex(20), callbacks: append([]string(nil), spec.CallbackURLs...)}
	a.bot = &user{id: s.newID(), login: a.slug + "[bot]", typ: "Bot", created: s.now()}
	s.users[strings.ToLower(a.bot.login)] = a.bot
	s.apps[id] = a
	pemKey := spec.PrivateKeyPEM
	if pemKey == "" {
		pemKey = string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	}
	return App{ID: id, Slug: a.slug, HookID: a.hookID, BotLogin: a.bot.login, PrivateKeyPEM: pemKey, ClientID: a.clientID, ClientSecret: a.clientSecret}, nil
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
// made if new), for all its repositories or the ones listed, with the
// App's permissions or fewer (installation created).
type InstallationSpec struct {
	AppID   int64  `json:"app_id"`
	Account string `json:"account"`
	// Repos names the account's repositories it covers ("selected");
	// empty: all of them.
	Repos []string `json:"repos,omitempty"`
	// Permissions granted, at most the App's (default: the App's).
	Permissions map[string]string `json:"permissions,omitempty"`
	// Login is who installs it (default the account).
	Login string `json:"login,omitempty"`
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
	perms := clonePerms(a.permissions)
	if len(spec.Permissions) > 0 {
		for k, v := range spec.Permissions {
			if levelRank(v) == 0 || levelRank(a.permissions[k]) < levelRank(v) {
				return 0, fmt.Errorf("permission %s: %s is more than app %s asks for (%q)", k, v, a.slug, a.permissions[k])
			}
		}
		perms = clonePerms(spec.Permissions)
	}
	sender, err := s.installer(spec.Login, acct)
	if err != nil {
		return 0, err
	}
	in := &installation{id: s.newID(), app: a, account: acct, perms: perms, created: s.now(), updated: s.now()}
	if len(spec.Repos) > 0 {
		in.selected = map[int64]bool{}
		for _, name := range spec.Repos {
			r := s.repoByName(acct.login, name)
			if r == nil {
				return 0, fmt.Errorf("repository %s/%s: %w", acct.login, name, ErrNotFound)
			}
			in.selected[r.id] = true
		}
	}
	s.insts[in.id] = in
	s.emitInstallation(in, "created", sender, sender)
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
		issues: map[int]*issue{}, branches: map[string]string{}, labels: map[string]*label{}}
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
