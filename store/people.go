package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"
)

// # People
//
// A user is a person (or a robot an admin made a token for): the one who
// is shown, given a role and disabled. A user has identities — the
// accounts that name the same person elsewhere (GitHub, an OIDC
// provider, later Slack) — and API tokens, the credentials its programs
// and browsers present. A request is made by a token; it is the token's
// user who caused it, whatever the channel.
//
//	user ─┬─ identities (kind, issuer, subject) → who a webhook or a sign-in names
//	      ├─ tokens (hash)                      → who a request is
//	      └─ sessions, secrets, environments     (user_id: who caused them)
//
// Tokens were people before users existed: the migration that brought
// users made every token a user of its own (UserIDForToken: admin tokens
// admins, the others members) and gave every session its owner token's
// user, so every token works as before and sees what it saw. A token
// stored without a user still becomes one (CreateToken), so automation
// that makes tokens as it did keeps working. A node's token (its name
// starts with NodeTokenPrefix) is no one's: it has no user.

// Role is what a user may do.
type Role string

const (
	// RoleAdmin sees everything and manages users, tokens and the server.
	RoleAdmin Role = "admin"
	// RoleMember starts and steers sessions.
	RoleMember Role = "member"
	// RoleViewer reads.
	RoleViewer Role = "viewer"
)

// Valid reports whether r is one of the roles.
func (r Role) Valid() bool { return r == RoleAdmin || r == RoleMember || r == RoleViewer }

// User is a person.
type User struct {
	// ID is "usr-" and a suffix (the caller makes it).
	ID string `json:"id"`
	// Name is the name shown.
	Name     string `json:"name"`
	Role     Role   `json:"role"`
	Disabled bool   `json:"disabled"`
	// CreatedAt is when the user was created (or, for a token's, when
	// its token was).
	CreatedAt time.Time `json:"created_at"`
}

// Identity kinds.
const (
	IdentityGitHub = "github"
	IdentityOIDC   = "oidc"
	IdentitySlack  = "slack"
)

// Identity is an account elsewhere that is a user: (Kind, Issuer,
// Subject) names it once, for one user.
type Identity struct {
	User string `json:"user"`
	// Kind is IdentityGitHub, IdentityOIDC or IdentitySlack.
	Kind string `json:"kind"`
	// Issuer is who vouches for Subject: the OIDC issuer URL, a Slack
	// team; "" for GitHub (the GitHub the server's app is on).
	Issuer string `json:"issuer,omitempty"`
	// Subject is the account's stable id there: GitHub's numeric user
	// id, the OIDC "sub" claim.
	Subject string `json:"subject"`
	// Login is the account's name there (GitHub's login), as last seen.
	Login string `json:"login,omitempty"`
	// Email is the account's verified email, as last seen ("" for none).
	Email     string    `json:"email,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// Token is an API token. Only its SHA-256 is stored.
type Token struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Hash      []byte    `json:"-"`
	Admin     bool      `json:"admin"`
	CreatedAt time.Time `json:"created_at"`
	// User is the id of the user it belongs to; "" only for a node's
	// token, which is no one's.
	User string `json:"user,omitempty"`
	// Role and Disabled are its user's, read with it (CreateToken ignores
	// them): what a request's check needs, in the one read.
	Role     Role `json:"-"`
	Disabled bool `json:"-"`
}

// NodeTokenPrefix starts the name of a node's token (package server's
// NewNodeToken): such a token is no person's.
const NodeTokenPrefix = "node:"

// IsNodeToken reports whether a token of this name is a node's.
func IsNodeToken(name string) bool { return strings.HasPrefix(name, NodeTokenPrefix) }

// NewUserID makes a user id: "usr-" and 12 random hex digits.
func NewUserID() string {
	var b [6]byte
	rand.Read(b[:])
	return "usr-" + hex.EncodeToString(b[:])
}

// UserIDForToken is the id of the user a token with no user becomes
// (CreateToken, and the migration that made every token a user):
// "usr-" and the token id without its "tok-".
func UserIDForToken(tokenID string) string {
	return "usr-" + strings.TrimPrefix(tokenID, "tok-")
}

// WebSession is a browser's sign-in (package server): the cookie's secret
// stands for an API token (a sign-in with a token) or for a user
// directly (a sign-in with GitHub or an OIDC provider: signin.go) until
// it expires or is signed out. Only the secret's SHA-256 is stored.
type WebSession struct {
	Hash []byte
	// TokenID is the token it stands for; "" when User is set.
	TokenID string
	// User is the user it stands for, with no token; "" when TokenID is
	// set. Exactly one of the two is set.
	User string
	// Via is how the browser signed in: WebViaToken, WebViaGitHub,
	// WebViaOIDC ("" is a token's, stored before users could sign in
	// otherwise).
	Via       string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// WebSessions keeps browsers' sign-ins.
type WebSessions interface {
	// CreateWebSession stores w (a hash that exists is ErrConflict) and
	// removes the expired ones.
	CreateWebSession(ctx context.Context, w *WebSession) error
	// TokenByWebSession is the token of the unexpired web session whose
	// secret has SHA-256 hash, or ErrNotFound (also when the token was
	// deleted).
	TokenByWebSession(ctx context.Context, hash []byte, now time.Time) (*Token, error)
	// DeleteWebSession removes it (no error when it is gone already).
	DeleteWebSession(ctx context.Context, hash []byte) error
	// UserByWebSession is the unexpired web session whose secret has
	// SHA-256 hash and that stands for a user directly (WebSession.User),
	// with its user read in the same query; ErrNotFound otherwise (a
	// token's web session included).
	UserByWebSession(ctx context.Context, hash []byte, now time.Time) (*WebSession, *User, error)
}

// People is the part of a Store that keeps users and their identities.
type People interface {
	// CreateUser stores u (ID, Name and a valid Role set by the caller; a
	// zero CreatedAt is now). An id that exists is ErrConflict. It
	// records the context's audit entry in its transaction (WithAudit).
	CreateUser(ctx context.Context, u *User) error
	// GetUser reads a user, or ErrNotFound.
	GetUser(ctx context.Context, id string) (*User, error)
	// ListUsers lists every user, oldest first.
	ListUsers(ctx context.Context) ([]*User, error)
	// UpdateUser reads the user, calls fn on it and writes it back, in
	// one transaction (the ID and CreatedAt are fixed; a role must stay
	// valid). It records the context's audit entry in it (WithAudit).
	UpdateUser(ctx context.Context, id string, fn func(*User) error) (*User, error)
	// UserTokens lists the tokens of a user, oldest first.
	UserTokens(ctx context.Context, user string) ([]*Token, error)

	// AddIdentity gives i.User the identity i; an identity that is
	// someone's already is ErrConflict, a user that does not exist
	// ErrNotFound.
	AddIdentity(ctx context.Context, i *Identity) error
	// RemoveIdentity takes the identity (kind, issuer, subject) from
	// user, with the context's audit entry (WithAudit), in one
	// transaction; ErrNotFound when user has no such identity.
	RemoveIdentity(ctx context.Context, user, kind, issuer, subject string) error
	// Identities lists a user's identities.
	Identities(ctx context.Context, user string) ([]*Identity, error)
	// UserByIdentity finds the user of an identity, or ErrNotFound.
	UserByIdentity(ctx context.Context, kind, issuer, subject string) (*User, error)
	// UserForIdentity is the user of i (by Kind, Issuer, Subject), whose
	// Login and Email it brings up to date; or, the first time i is seen,
	// u (as CreateUser takes it) created with i, in one transaction.
	// created says which. Two callers at once with the same new identity
	// get the same user.
	UserForIdentity(ctx context.Context, i *Identity, u *User) (user *User, created bool, err error)
}

// Audit channels: where a request came from.
const (
	ChannelAPI    = "api"    // a token over the HTTP API
	ChannelUI     = "ui"     // a browser signed in (the web UI's cookie)
	ChannelCLI    = "cli"    // the harvest command (its User-Agent says so)
	ChannelGitHub = "github" // a webhook delivery
	ChannelSlack  = "slack"  // Harvest's Slack app: an event, a click, a slash command
	ChannelNode   = "node"   // another node of the server, on a client's behalf
	// ChannelServer is the server acting for no request: an environment's
	// setup given its repository's secrets.
	ChannelServer = "server"
)

// AuditOK is the Result of an action that succeeded.
const AuditOK = "ok"

// AuditEntry is one action in the audit log: who (User, and the Token
// used), from where (Channel, Remote), what (Action on Target, with
// Detail) and the result.
type AuditEntry struct {
	// ID orders the log (assigned by the store, increasing).
	ID   int64     `json:"id"`
	Time time.Time `json:"time"`
	// User is the user who acted ("" when no person is known: a node,
	// a webhook's refused sender who is no user).
	User  string `json:"user,omitempty"`
	Token string `json:"token,omitempty"`
	// Channel is one of the Channel constants.
	Channel string `json:"channel"`
	// Remote is the client's address (the HTTP peer, without the port).
	Remote string `json:"remote,omitempty"`
	// Action names what was done, like "session.create" or "token.delete".
	Action string `json:"action"`
	// Target is what it was done to: a session, token, user, secret id.
	Target string `json:"target,omitempty"`
	// Result is AuditOK or the API's error code.
	Result string `json:"result"`
	// Detail is a JSON object with more (nil: none).
	Detail json.RawMessage `json:"detail,omitempty"`
}

// AuditFilter selects audit entries, newest first; zero fields match all.
type AuditFilter struct {
	User, Action string
	// Since and Until bound Time: Since <= Time < Until.
	Since, Until time.Time
	// Before continues a list where a page ended: entries with a smaller
	// ID only (keyset pagination on the ID).
	Before int64
	// Limit bounds the result (0: 100).
	Limit int
}

// Audit is the part of a Store that keeps the audit log. It is append
// only: nothing deletes or changes an entry.
type Audit interface {
	// AppendAudit stores e (Action, Channel and Result not empty; a zero
	// Time is now) and sets its ID.
	AppendAudit(ctx context.Context, e *AuditEntry) error
	// ListAudit lists entries, newest first.
	ListAudit(ctx context.Context, f AuditFilter) ([]*AuditEntry, error)
}

type auditKey struct{}

// WithAudit returns ctx carrying e: the store methods that say so record
// e (its Result AuditOK) in the transaction of their change, so the
// change and its entry are committed together or not at all. Give it to
// one such call only.
func WithAudit(ctx context.Context, e *AuditEntry) context.Context {
	return context.WithValue(ctx, auditKey{}, e)
}

// AuditOf is the entry WithAudit put in ctx, or nil.
func AuditOf(ctx context.Context) *AuditEntry {
	e, _ := ctx.Value(auditKey{}).(*AuditEntry)
	return e
}
