package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/harvest-dev/harvest/wire"
)

// Me says who the client's token is: the token, its user (with their
// identities) and whether it acts as an admin.
func (c *Client) Me(ctx context.Context) (*wire.Me, error) {
	var m wire.Me
	return &m, c.request(ctx, http.MethodGet, "/v1/me", nil, nil, &m)
}

// ListUsers lists the users (admin), oldest first.
func (c *Client) ListUsers(ctx context.Context) ([]*wire.User, error) {
	var l wire.UserList
	if err := c.request(ctx, http.MethodGet, "/v1/users", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Users, nil
}

// CreateUser makes a user (admin).
func (c *Client) CreateUser(ctx context.Context, req wire.UserRequest) (*wire.User, error) {
	var u wire.User
	return &u, c.request(ctx, http.MethodPost, "/v1/users", nil, req, &u)
}

// GetUser reads a user with their identities (admin).
func (c *Client) GetUser(ctx context.Context, id string) (*wire.User, error) {
	var u wire.User
	return &u, c.request(ctx, http.MethodGet, "/v1/users/"+url.PathEscape(id), nil, nil, &u)
}

// UpdateUser renames a user, changes their role, disables or enables them
// (admin).
func (c *Client) UpdateUser(ctx context.Context, id string, p wire.UserPatch) (*wire.User, error) {
	var u wire.User
	return &u, c.request(ctx, http.MethodPatch, "/v1/users/"+url.PathEscape(id), nil, p, &u)
}

// NewToken makes an API token as req says (admin): for a user, or, with
// no user, a new user of its own. The secret is in the result only.
func (c *Client) NewToken(ctx context.Context, req wire.TokenRequest) (*wire.TokenCreated, error) {
	var t wire.TokenCreated
	return &t, c.request(ctx, http.MethodPost, "/v1/tokens", nil, req, &t)
}

// UserTokens lists a user's tokens (admin).
func (c *Client) UserTokens(ctx context.Context, user string) ([]*wire.Token, error) {
	var l wire.TokenList
	if err := c.request(ctx, http.MethodGet, "/v1/tokens", url.Values{"user": {user}}, nil, &l); err != nil {
		return nil, err
	}
	return l.Tokens, nil
}

// AuditOptions select audit entries; zero fields match all.
type AuditOptions struct {
	User, Action string
	Since, Until time.Time
	// Limit is the page size (0: the server's, 100).
	Limit int
	// Cursor continues a list (AuditList.NextCursor).
	Cursor string
}

// Audit reads a page of the audit log (admin), newest first.
func (c *Client) Audit(ctx context.Context, o AuditOptions) (*wire.AuditList, error) {
	q := url.Values{}
	if o.User != "" {
		q.Set("user", o.User)
	}
	if o.Action != "" {
		q.Set("action", o.Action)
	}
	if !o.Since.IsZero() {
		q.Set("since", o.Since.UTC().Format(time.RFC3339Nano))
	}
	if !o.Until.IsZero() {
		q.Set("until", o.Until.UTC().Format(time.RFC3339Nano))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	var l wire.AuditList
	return &l, c.request(ctx, http.MethodGet, "/v1/audit", q, nil, &l)
}
