package wire

import (
	"encoding/json"
	"time"
)

// Roles of a user.
const (
	RoleAdmin  = "admin"  // everything: users, tokens, every session
	RoleMember = "member" // starts and steers sessions
	RoleViewer = "viewer" // reads
)

// User is a person as the API shows it.
type User struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Role      string    `json:"role"`
	Disabled  bool      `json:"disabled"`
	CreatedAt time.Time `json:"created_at"`
	// Identities are the accounts elsewhere that are this user (GitHub,
	// an OIDC provider). Only GET /v1/users/{id} and GET /v1/me list them.
	Identities []*Identity `json:"identities,omitempty"`
}

// Identity is an account elsewhere that is a user.
type Identity struct {
	// Kind is github, oidc or slack.
	Kind string `json:"kind"`
	// Issuer vouches for Subject ("" for GitHub).
	Issuer string `json:"issuer,omitempty"`
	// Subject is the account's stable id there (GitHub's numeric user id).
	Subject string `json:"subject"`
	Login   string `json:"login,omitempty"`
	// Email is the account's verified email.
	Email     string    `json:"email,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// UserRequest is the body of POST /v1/users.
type UserRequest struct {
	Name string `json:"name"`
	// Role is admin, member (default) or viewer.
	Role string `json:"role,omitempty"`
}

// UserPatch is the body of PATCH /v1/users/{id}: what to change.
type UserPatch struct {
	Name     *string `json:"name,omitempty"`
	Role     *string `json:"role,omitempty"`
	Disabled *bool   `json:"disabled,omitempty"`
}

// UserList is the body of GET /v1/users.
type UserList struct {
	Users []*User `json:"users"`
}

// Me is the body of GET /v1/me: who the caller is.
type Me struct {
	// User is the token's user (absent for a node's token).
	User *User `json:"user,omitempty"`
	// Token is the token the request was made with; absent for a
	// browser the user signed in with GitHub or OIDC (SignedInVia).
	Token *Token `json:"token,omitempty"`
	// SignedInVia is "github" or "oidc" for such a browser.
	SignedInVia string `json:"signed_in_via,omitempty"`
	// Admin: the request may do what an admin does (an admin token of
	// an admin).
	Admin bool `json:"admin"`
	// Budgets are the budgets the user is held to (their own, then their
	// teams'), each with what it holds today; absent when none.
	Budgets []*Budget `json:"budgets,omitempty"`
	// Today is what the user uses: the day's model spend (UTC) and their
	// live sessions (absent for a node's token).
	Today *BudgetUse `json:"today,omitempty"`
}

// AuditEntry is one action of the audit log.
type AuditEntry struct {
	ID   int64     `json:"id"`
	Time time.Time `json:"time"`
	// User is the id of the user who acted ("" when no user is known).
	User string `json:"user,omitempty"`
	// Token is the id of the token the request was made with.
	Token string `json:"token,omitempty"`
	// Channel is api, ui, cli, github, node or server.
	Channel string `json:"channel"`
	// Remote is the client's IP address.
	Remote string `json:"remote,omitempty"`
	// Action is what was done, like session.create or token.delete.
	Action string `json:"action"`
	// Target is what it was done to (a session id, a token id, ...).
	Target string `json:"target,omitempty"`
	// Result is "ok" or the error code the action was answered with.
	Result string `json:"result"`
	// Detail says more (a JSON object).
	Detail json.RawMessage `json:"detail,omitempty"`
}

// AuditList is the body of GET /v1/audit: a page, newest first;
// NextCursor continues it (absent on the last page).
type AuditList struct {
	Entries    []*AuditEntry `json:"entries"`
	NextCursor string        `json:"next_cursor,omitempty"`
}

// SlackLink is a Slack account waiting to be linked to whoever redeems
// its code (GET /v1/slack/links/{code}).
type SlackLink struct {
	// Team is the Slack workspace's id; User the account's id there.
	Team string `json:"team"`
	User string `json:"slack_user"`
	// Name is the account's name in Slack.
	Name      string    `json:"name,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
}
