package store

import (
	"context"
	"fmt"
	"regexp"
	"time"
)

// # Teams
//
// A team is a named group of users. It exists for one thing: a server's
// repository policy (package authz, harvest serve --repo-root
// /srv/repos?read=team:qa) may name a team instead of listing people, so
// who may read or write a directory repository's sessions is changed by
// changing a team, not the server's flags. A user may be in any number
// of teams; a team's name is its id (TeamNamePattern), fixed once made.
// Deleting a team removes its memberships with it; its users stay.
//
// Changes are the admin's (server /v1/teams, harvest team) and each is
// recorded in the audit log in the transaction of the change
// (WithAudit), as users' and tokens' are.

// Team is a named group of users.
type Team struct {
	// Name is the team's id: TeamNamePattern.
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// TeamNamePattern is the shape of a team's name: lower-case letters,
// digits and dashes, starting with a letter, at most 40 characters (it
// is written in flags and config files: team:backend).
var TeamNamePattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,39}$`)

// CheckTeamName says what is wrong with a team's name, or nil.
func CheckTeamName(name string) error {
	if !TeamNamePattern.MatchString(name) {
		return fmt.Errorf("team name %q: give lower-case letters, digits and dashes, starting with a letter, at most 40 (like backend or qa-leads)", clipName(name))
	}
	return nil
}

func clipName(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// Teams is the part of a Store that keeps teams and their members.
type Teams interface {
	// CreateTeam stores t (a valid Name; a zero CreatedAt is now): a name
	// that exists is ErrConflict. It records the context's audit entry
	// in its transaction (WithAudit).
	CreateTeam(ctx context.Context, t *Team) error
	// ListTeams lists every team, by name.
	ListTeams(ctx context.Context) ([]*Team, error)
	// DeleteTeam removes a team and its memberships (ErrNotFound when
	// there is none), with the context's audit entry.
	DeleteTeam(ctx context.Context, name string) error
	// AddTeamMember puts user in team, with the context's audit entry: a
	// team or user that does not exist is ErrNotFound, a user already in
	// it ErrConflict.
	AddTeamMember(ctx context.Context, team, user string) error
	// RemoveTeamMember takes user out of team, with the context's audit
	// entry (ErrNotFound when they are not in it).
	RemoveTeamMember(ctx context.Context, team, user string) error
	// TeamMembers lists the ids of a team's users, sorted (ErrNotFound
	// for a team that does not exist).
	TeamMembers(ctx context.Context, team string) ([]string, error)
	// UserTeams lists the names of the teams a user is in, sorted.
	UserTeams(ctx context.Context, user string) ([]string, error)
}
