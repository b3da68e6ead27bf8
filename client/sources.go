package client

import (
	"context"
	"net/http"

	"github.com/harvest-dev/harvest/wire"
)

// Sources lists what the token may start sessions on.
func (c *Client) Sources(ctx context.Context) (*wire.SourceList, error) {
	var l wire.SourceList
	if err := c.request(ctx, http.MethodGet, "/v1/sources", nil, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}
