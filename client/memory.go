package client

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"github.com/harvest-dev/harvest/wire"
)

// MemoryScope names a repository's memory: Repo is owner/name (GitHub) or
// the source sessions give; Owner is "" (shared by every session on the
// repository), "me" or, for an admin, a token id.
type MemoryScope struct{ Repo, Owner string }

func (s MemoryScope) query() url.Values {
	q := url.Values{"repo": {s.Repo}}
	if s.Owner != "" {
		q.Set("owner", s.Owner)
	}
	return q
}

// ListMemory reads a repository's memory graph; search ("" for all)
// keeps the entities whose name, type or an observation contains it, and
// names (none for all) those entities.
func (c *Client) ListMemory(ctx context.Context, sc MemoryScope, search string, names ...string) (*wire.MemoryGraph, error) {
	q := sc.query()
	if search != "" {
		q.Set("q", search)
	}
	for _, n := range names {
		q.Add("name", n)
	}
	var g wire.MemoryGraph
	return &g, c.request(ctx, http.MethodGet, "/v1/memory", q, nil, &g)
}

// ExportMemory copies a repository's memory to w as JSON lines (the MCP
// memory server's file format).
func (c *Client) ExportMemory(ctx context.Context, sc MemoryScope, w io.Writer) error {
	u := c.base.JoinPath("/v1/memory/export")
	u.RawQuery = sc.query().Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.netError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return readError(resp)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// PutMemoryEntity creates an entity or makes it have exactly req's type
// and observations.
func (c *Client) PutMemoryEntity(ctx context.Context, sc MemoryScope, name string, req wire.MemoryEntityRequest) (*wire.MemoryEntity, error) {
	q := sc.query()
	q.Set("name", name)
	if req.Observations == nil {
		req.Observations = []string{}
	}
	var e wire.MemoryEntity
	return &e, c.request(ctx, http.MethodPut, "/v1/memory/entity", q, req, &e)
}

// DeleteMemoryEntity deletes an entity with its observations and
// relations.
func (c *Client) DeleteMemoryEntity(ctx context.Context, sc MemoryScope, name string) error {
	q := sc.query()
	q.Set("name", name)
	return c.request(ctx, http.MethodDelete, "/v1/memory/entity", q, nil, nil)
}
