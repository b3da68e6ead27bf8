package client

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"github.com/harvest-dev/harvest/wire"
)

// PrepareEnvironment begins building a repository's environment; the
// answer is it, building (or the ready one with the same fingerprint).
func (c *Client) PrepareEnvironment(ctx context.Context, req wire.PrepareRequest) (*wire.Environment, error) {
	var e wire.Environment
	return &e, c.request(ctx, http.MethodPost, "/v1/environments", nil, req, &e)
}

// ListEnvironments lists environments, newest first; repo, backend and
// state ("" for any) filter them.
func (c *Client) ListEnvironments(ctx context.Context, repo, backend, state string) ([]*wire.Environment, error) {
	q := url.Values{}
	for k, v := range map[string]string{"repo": repo, "backend": backend, "state": state} {
		if v != "" {
			q.Set(k, v)
		}
	}
	var l wire.EnvironmentList
	if err := c.request(ctx, http.MethodGet, "/v1/environments", q, nil, &l); err != nil {
		return nil, err
	}
	return l.Environments, nil
}

// GetEnvironment returns an environment.
func (c *Client) GetEnvironment(ctx context.Context, id string) (*wire.Environment, error) {
	var e wire.Environment
	return &e, c.request(ctx, http.MethodGet, "/v1/environments/"+url.PathEscape(id), nil, nil, &e)
}

// EnvironmentLog returns an environment's build log; with follow it
// streams until the build ends. The caller closes it.
func (c *Client) EnvironmentLog(ctx context.Context, id string, follow bool) (io.ReadCloser, error) {
	u := c.base.JoinPath("/v1/environments/" + url.PathEscape(id) + "/log")
	if follow {
		u.RawQuery = "follow=true"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.netError(err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return resp.Body, nil
}
