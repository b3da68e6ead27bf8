package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/harvest-dev/harvest/wire"
)

// ListTeams lists the teams with their members (admin).
func (c *Client) ListTeams(ctx context.Context) ([]*wire.Team, error) {
	var l wire.TeamList
	if err := c.request(ctx, http.MethodGet, "/v1/teams", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Teams, nil
}

// CreateTeam makes a team (admin).
func (c *Client) CreateTeam(ctx context.Context, name string) (*wire.Team, error) {
	var t wire.Team
	return &t, c.request(ctx, http.MethodPost, "/v1/teams", nil, wire.TeamRequest{Name: name}, &t)
}

// DeleteTeam removes a team and its memberships (admin).
func (c *Client) DeleteTeam(ctx context.Context, name string) error {
	return c.request(ctx, http.MethodDelete, "/v1/teams/"+url.PathEscape(name), nil, nil, nil)
}

// AddTeamMember puts a user in a team (admin).
func (c *Client) AddTeamMember(ctx context.Context, team, user string) error {
	return c.request(ctx, http.MethodPost, "/v1/teams/"+url.PathEscape(team)+"/members", nil, wire.TeamMemberRequest{User: user}, nil)
}

// RemoveTeamMember takes a user out of a team (admin).
func (c *Client) RemoveTeamMember(ctx context.Context, team, user string) error {
	return c.request(ctx, http.MethodDelete, "/v1/teams/"+url.PathEscape(team)+"/members/"+url.PathEscape(user), nil, nil, nil)
}
