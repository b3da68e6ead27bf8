package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/harvest-dev/harvest/wire"
)

// SlackLink says which Slack account a link's code would link to the
// caller (the code of the web UI's #/link/slack/CODE).
func (c *Client) SlackLink(ctx context.Context, code string) (*wire.SlackLink, error) {
	var l wire.SlackLink
	return &l, c.request(ctx, http.MethodGet, "/v1/slack/links/"+url.PathEscape(code), nil, nil, &l)
}

// RedeemSlackLink links the code's Slack account to the caller's user,
// and returns the user with their identities.
func (c *Client) RedeemSlackLink(ctx context.Context, code string) (*wire.User, error) {
	var u wire.User
	return &u, c.request(ctx, http.MethodPost, "/v1/slack/links/"+url.PathEscape(code), nil, nil, &u)
}

// UnlinkIdentity takes an identity (kind, issuer, subject) from a user:
// an admin any, a user their own Slack accounts.
func (c *Client) UnlinkIdentity(ctx context.Context, user, kind, issuer, subject string) error {
	var q url.Values
	if issuer != "" {
		q = url.Values{"issuer": {issuer}}
	}
	return c.request(ctx, http.MethodDelete, "/v1/users/"+url.PathEscape(user)+"/identities/"+url.PathEscape(kind)+"/"+url.PathEscape(subject), q, nil, nil)
}
