package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/harvest-dev/harvest/wire"
)

// GitHubDeliveries lists the GitHub webhook deliveries the server stored,
// newest first (admin): all, or those in state (wire.DeliveryFailed,
// ...); at most limit (0: the server's default, 100).
func (c *Client) GitHubDeliveries(ctx context.Context, state string, limit int) ([]wire.GitHubDelivery, error) {
	q := url.Values{}
	if state != "" {
		q.Set("state", state)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var l wire.GitHubDeliveryList
	if err := c.request(ctx, http.MethodGet, "/v1/github/deliveries", q, nil, &l); err != nil {
		return nil, err
	}
	return l.Deliveries, nil
}

// ReplayGitHubDelivery makes a delivery that failed for good pending
// again (admin): it is processed once more, once (409 when it is not
// failed, or another replay took it).
func (c *Client) ReplayGitHubDelivery(ctx context.Context, id string) (*wire.GitHubDelivery, error) {
	var d wire.GitHubDelivery
	return &d, c.request(ctx, http.MethodPost, "/v1/github/deliveries/"+url.PathEscape(id)+"/replay", nil, nil, &d)
}
